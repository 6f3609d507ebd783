"""The CEL of every admission policy the library ships, evaluated with a real CEL runtime
(cel-expr-python) against pods and training jobs a tenant could submit. Schema validation
(test_manifests.py) proves the objects are well formed; only this proves what they admit."""

import copy

import pytest

from constructs_lib.backends.hyperpod_eks import kubernetes, kueue
from constructs_lib.model import KubernetesTenancy, PodSecurityLevel

from .admission import JOB_CONTROLLER, Admission, CelError, compile_expression, evaluate

BASELINE, RESTRICTED, DEDICATED = "research", "vision", "prod"
TEAMS = {
    BASELINE: KubernetesTenancy(),
    RESTRICTED: KubernetesTenancy(pod_security=PodSecurityLevel.RESTRICTED),
    DEDICATED: KubernetesTenancy(dedicated_instance_groups=("prod-p5",)),
}
CLASSES = ("urgent", "standard", "opportunistic")  # declared, most urgent first
GRANTED = {BASELINE: CLASSES, RESTRICTED: CLASSES, DEDICATED: ("standard", "opportunistic")}  # prod may not use urgent
SHIPPED = kubernetes.pod_security_objects() + [
    o for team, tenancy in TEAMS.items() for o in kubernetes.team_objects(team, tenancy, GRANTED[team])
]
ADMISSION = Admission(SHIPPED)
NS = {team: kueue.namespace(team) for team in TEAMS}
QUEUE, PRIORITY = kubernetes.QUEUE_LABEL, kubernetes.PRIORITY_CLASS_LABEL


def gpu_pod() -> dict:
    """A distributed-training pod as the training operators make them: GPUs and EFA, shared
    memory, the FSx claim and the pod identity token volume."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "llama-worker-0",
            "labels": {"app": "llama"},
            "annotations": {"container.apparmor.security.beta.kubernetes.io/trainer": "runtime/default"},
        },
        "spec": {
            "serviceAccountName": "gpu-workload",
            "initContainers": [
                {"name": "fetch", "image": "public.ecr.aws/aws-cli/aws-cli:2", "command": ["aws", "s3", "sync"]}
            ],
            "containers": [
                {
                    "name": "trainer",
                    "image": "111122223333.dkr.ecr.us-east-1.amazonaws.com/llama:1",
                    "command": ["torchrun"],
                    "ports": [{"containerPort": 29500}, {"containerPort": 8080, "hostPort": 0}],
                    "resources": {"limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32", "memory": "1000Gi"}},
                    "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "fsx", "mountPath": "/fsx"}],
                    "securityContext": {"privileged": False, "capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"]}},
                    "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}},
                }
            ],
            "volumes": [
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
                {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}},
                {
                    "name": "eks-pod-identity-token",
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "audience": "pods.eks.amazonaws.com",
                                    "expirationSeconds": 86400,
                                    "path": "eks-pod-identity-token",
                                }
                            }
                        ]
                    },
                },
            ],
            "securityContext": {
                "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}],
                "seLinuxOptions": {"type": "container_t"},
            },
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def hardened(pod: dict) -> dict:
    """The same pod as the restricted level wants it."""
    pod = copy.deepcopy(pod)
    pod["spec"]["securityContext"].update(
        {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
    )
    for container in pod["spec"]["containers"] + pod["spec"]["initContainers"]:
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
        }
    return pod


def changed(pod: dict, change) -> dict:
    pod = copy.deepcopy(pod)
    change(pod["spec"], pod["spec"]["containers"][0], pod["metadata"])
    return pod


def sc(container: dict) -> dict:
    return container.setdefault("securityContext", {})


# (id, change(spec, first container, metadata), words of the message it must be refused with)
BASELINE_VIOLATIONS = [
    ("privileged", lambda s, c, m: sc(c).update(privileged=True), "privileged containers"),
    (
        "privileged-init-container",
        lambda s, c, m: sc(s["initContainers"][0]).update(privileged=True),
        "privileged containers",
    ),
    ("host-network", lambda s, c, m: s.update(hostNetwork=True), "host namespaces"),
    ("host-pid", lambda s, c, m: s.update(hostPID=True), "host namespaces"),
    ("host-ipc", lambda s, c, m: s.update(hostIPC=True), "host namespaces"),
    (
        "host-path",
        lambda s, c, m: s["volumes"].append({"name": "root", "hostPath": {"path": "/var/lib/kubelet"}}),
        "hostPath volumes",
    ),
    ("host-port", lambda s, c, m: c["ports"].append({"containerPort": 80, "hostPort": 80}), "hostPort"),
    ("sys-admin", lambda s, c, m: sc(c)["capabilities"]["add"].append("SYS_ADMIN"), "capabilities"),
    ("cap-prefixed-sys-admin", lambda s, c, m: sc(c)["capabilities"]["add"].append("CAP_SYS_ADMIN"), "capabilities"),
    (
        "net-admin-on-init",
        lambda s, c, m: (
            sc(s["initContainers"][0]).setdefault("capabilities", {}).setdefault("add", []).append("NET_ADMIN")
        ),
        "capabilities",
    ),
    ("proc-mount", lambda s, c, m: sc(c).update(procMount="Unmasked"), "procMount"),
    (
        "unsafe-sysctl",
        lambda s, c, m: s["securityContext"]["sysctls"].append({"name": "kernel.msgmax", "value": "65536"}),
        "sysctls",
    ),
    ("selinux-type", lambda s, c, m: sc(c).update(seLinuxOptions={"type": "spc_t"}), "SELinux"),
    ("selinux-user", lambda s, c, m: s["securityContext"].update(seLinuxOptions={"user": "system_u"}), "SELinux"),
    ("apparmor-unconfined", lambda s, c, m: sc(c).update(appArmorProfile={"type": "Unconfined"}), "AppArmor"),
    (
        "apparmor-annotation",
        lambda s, c, m: m["annotations"].update(
            {"container.apparmor.security.beta.kubernetes.io/trainer": "unconfined"}
        ),
        "AppArmor",
    ),
    (
        "seccomp-unconfined-pod",
        lambda s, c, m: s["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "seccomp",
    ),
    ("seccomp-unconfined-container", lambda s, c, m: sc(c).update(seccompProfile={"type": "Unconfined"}), "seccomp"),
    (
        "windows-host-process",
        lambda s, c, m: s["securityContext"].update(windowsOptions={"hostProcess": True}),
        "HostProcess",
    ),
    # The kubelet runs probes from the node: a probe host reaches node-local endpoints such as IMDS.
    (
        "probe-host",
        lambda s, c, m: c["livenessProbe"]["httpGet"].update(host="169.254.169.254"),
        "probes and lifecycle hooks",
    ),
    (
        "lifecycle-host",
        lambda s, c, m: c.update(lifecycle={"preStop": {"tcpSocket": {"port": 22, "host": "10.0.0.1"}}}),
        "probes and lifecycle hooks",
    ),
    ("node-name", lambda s, c, m: s.update(nodeName="ip-10-1-2-3.ec2.internal"), "nodeName"),
    # An ephemeral claim naming a volume binds that PersistentVolume if unclaimed: another team's static FSx volume.
    (
        "ephemeral-volume-name",
        lambda s, c, m: s["volumes"].append(
            {
                "name": "scratch",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteMany"],
                            "volumeName": "fsx-speech-static",
                            "resources": {"requests": {"storage": "1200Gi"}},
                        }
                    }
                },
            }
        ),
        "volumeName",
    ),
]

# Admitted at baseline, refused at restricted.
RESTRICTED_VIOLATIONS = [
    ("runs-as-root", lambda s, c, m: s["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
    ("container-overrides-non-root", lambda s, c, m: sc(c).update(runAsNonRoot=False), "runAsNonRoot"),
    ("user-zero", lambda s, c, m: sc(c).update(runAsUser=0), "runAsUser 0"),
    ("privilege-escalation", lambda s, c, m: sc(c).pop("allowPrivilegeEscalation"), "allowPrivilegeEscalation"),
    ("no-seccomp", lambda s, c, m: s["securityContext"].pop("seccompProfile"), "seccomp"),
    ("keeps-capabilities", lambda s, c, m: sc(c)["capabilities"].pop("drop"), "drop ALL"),
    ("adds-chown", lambda s, c, m: sc(c)["capabilities"]["add"].append("CHOWN"), "drop ALL"),
    (
        "nfs-volume",
        lambda s, c, m: s["volumes"].append({"name": "nfs", "nfs": {"server": "10.0.0.2", "path": "/"}}),
        "volume types",
    ),
]


# Kubeflow kinds: (apiVersion, replica specs field, the two replica types)
KUBEFLOW = {
    "PyTorchJob": ("kubeflow.org/v1", "pytorchReplicaSpecs", ("Master", "Worker")),
    "MPIJob": ("kubeflow.org/v2beta1", "mpiReplicaSpecs", ("Worker", "Launcher")),
    "TFJob": ("kubeflow.org/v1", "tfReplicaSpecs", ("Chief", "Worker")),
    "XGBoostJob": ("kubeflow.org/v1", "xgbReplicaSpecs", ("Master", "Worker")),
    "PaddleJob": ("kubeflow.org/v1", "paddleReplicaSpecs", ("Master", "Worker")),
    "JAXJob": ("kubeflow.org/v1", "jaxReplicaSpecs", ("Worker", "Chief")),
}


def as_workload(kind: str, bad: dict, good: dict) -> dict:
    """``bad`` as one pod template of a workload of ``kind``, beside a clean template ``good``
    where the kind has more than one."""
    bad_t, good_t = ({"metadata": p["metadata"], "spec": p["spec"]} for p in (bad, good))
    meta = {"name": "j"}
    if kind == "Pod":
        return bad
    if kind in KUBEFLOW:
        api_version, field, (good_type, bad_type) = KUBEFLOW[kind]
        replicas = {good_type: {"replicas": 1, "template": good_t}, bad_type: {"replicas": 3, "template": bad_t}}
        return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": {field: replicas}}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": bad_t}}
    if kind == "CronJob":
        job = {"metadata": {}, "spec": {"template": bad_t}}
        return {
            "apiVersion": "batch/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"schedule": "@daily", "jobTemplate": job},
        }
    if kind in ("Deployment", "StatefulSet"):
        selector = {"matchLabels": {"app": "llama"}}
        return {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": selector, "template": bad_t},
        }
    if kind == "JobSet":
        jobs = [
            {"name": name, "replicas": 1, "template": {"spec": {"template": template}}}
            for name, template in (("driver", good_t), ("workers", bad_t))
        ]
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": kind,
            "metadata": meta,
            "spec": {"replicatedJobs": jobs},
        }
    assert kind == "HyperPodPyTorchJob"
    return {
        "apiVersion": "sagemaker.amazonaws.com/v1",
        "kind": "HyperPodPyTorchJob",
        "metadata": meta,
        "spec": {
            "nprocPerNode": "8",
            "replicaSpecs": [
                {"name": "head", "replicas": 1, "template": good_t},
                {"name": "pods", "replicas": 4, "template": bad_t},
            ],
        },
    }


KINDS = ["Pod", "Job", "PyTorchJob", "MPIJob", "HyperPodPyTorchJob"]  # what the team's Role creates, and pods
# Every kind the queue and priority policies check: also those another role may grant.
QUEUED_KINDS = [*KINDS, "CronJob", "Deployment", "StatefulSet", "JobSet", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"]


def queued(obj: dict, team: str) -> dict:
    """``obj`` as the team submits it: naming its local queue where Kueue reads it."""
    obj = copy.deepcopy(obj)
    holder = obj["spec"]["jobTemplate"] if obj["kind"] == "CronJob" else obj
    holder.setdefault("metadata", {}).setdefault("labels", {})[QUEUE] = kueue.local_queue(team)
    return obj


def messages(obj: dict, team: str, **kwargs) -> list[str]:
    """The refusals of ``obj`` submitted to the team's namespace with its queue label."""
    return [d.message for d in ADMISSION.review(queued(obj, team), NS[team], **kwargs)]


# --- the harness itself -----------------------------------------------------------------------


def test_every_shipped_expression_compiles_without_kubernetes_extensions():
    expressions = ADMISSION.expressions()
    assert len(expressions) > 20
    for expression in expressions:
        compile_expression(expression)
    # The environment really lacks them, so a policy relying on one would fail here.
    with pytest.raises(CelError):
        compile_expression("quantity('1Gi').isGreaterThan(quantity('1Mi'))")


def test_the_runtime_reports_errors_instead_of_guessing():
    with pytest.raises(CelError):
        evaluate("object.spec.missing", {"object": {"spec": {}}, "request": {}, "variables": {}, "oldObject": None})


# --- baseline ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_normal_gpu_training_pod_is_admitted_at_baseline(kind):
    assert messages(as_workload(kind, gpu_pod(), gpu_pod()), BASELINE) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_hardened_pod_is_admitted_at_restricted(kind):
    pod = hardened(gpu_pod())
    assert messages(as_workload(kind, pod, pod), RESTRICTED) == []


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case, change, words", BASELINE_VIOLATIONS, ids=[v[0] for v in BASELINE_VIOLATIONS])
def test_every_baseline_violation_is_refused_in_pods_and_in_every_workload_template(case, change, words, kind):
    refused = messages(as_workload(kind, changed(gpu_pod(), change), gpu_pod()), BASELINE)
    assert len(refused) == 1 and words in refused[0] and refused[0].startswith("Pod Security baseline: "), refused
    # Restricted includes baseline (an added capability breaks restricted's own rule as well).
    pod = hardened(gpu_pod())
    refused = messages(as_workload(kind, changed(pod, change), pod), RESTRICTED)
    baseline_refusals = [m for m in refused if m.startswith("Pod Security baseline: ")]
    assert len(baseline_refusals) == 1 and words in baseline_refusals[0], refused


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case, change, words", RESTRICTED_VIOLATIONS, ids=[v[0] for v in RESTRICTED_VIOLATIONS])
def test_restricted_only_violations_are_refused_only_for_restricted_teams(case, change, words, kind):
    pod = hardened(gpu_pod())
    obj = as_workload(kind, changed(pod, change), pod)
    refused = messages(obj, RESTRICTED)
    assert len(refused) == 1 and words in refused[0] and refused[0].startswith("Pod Security restricted"), refused
    assert messages(obj, BASELINE) == []


def test_the_plain_gpu_pod_fails_restricted_on_each_missing_hardening():
    refused = messages(gpu_pod(), RESTRICTED)
    for words in ("allowPrivilegeEscalation", "runAsNonRoot", "seccomp", "drop ALL"):
        assert [m for m in refused if words in m and m.startswith("Pod Security restricted: ")], words
    assert len(refused) == 4


def test_undeclared_hyperpod_namespaces_are_held_to_baseline_whatever_their_labels():
    privileged = changed(gpu_pod(), lambda s, c, m: sc(c).update(privileged=True))
    relabelled = {"pod-security.kubernetes.io/enforce": "privileged"}
    refused = ADMISSION.review(queued(privileged, "newteam"), "hyperpod-ns-newteam", namespace_labels=relabelled)
    assert [d.policy for d in refused] == ["gpu-governance-pod-security-baseline"]
    assert ADMISSION.review(privileged, NS[BASELINE], namespace_labels=relabelled) != []


def test_system_namespaces_keep_their_privileged_daemons():
    daemon = changed(gpu_pod(), lambda s, c, m: (s.update(hostNetwork=True), sc(c).update(privileged=True)))
    assert ADMISSION.review(daemon, "kube-system") == []
    assert ADMISSION.review(daemon, "aws-hyperpod") == []


def test_ephemeral_containers_added_to_a_running_pod_are_checked():
    running = changed(gpu_pod(), lambda s, c, m: s.update(nodeName="ip-10-1-2-3.ec2.internal"))
    debug = {"name": "debug", "image": "busybox", "targetContainerName": "trainer"}
    running["spec"]["ephemeralContainers"] = [debug]
    assert messages(running, BASELINE, operation="UPDATE", subresource="ephemeralcontainers") == []
    debug["securityContext"] = {"privileged": True}
    assert messages(running, BASELINE, operation="UPDATE", subresource="ephemeralcontainers") == [
        "Pod Security baseline: privileged containers are forbidden"
    ]


def test_a_template_the_policy_cannot_read_fails_closed():
    # The API server denies when a rule cannot be evaluated (failurePolicy Fail).
    broken = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}},
    }
    with pytest.raises(CelError):
        ADMISSION.review(broken, NS[BASELINE])
    assert all(p["failurePolicy"] == "Fail" for p in ADMISSION.policies.values())


def test_every_workload_the_team_may_create_is_checked():
    role = kubernetes.rbac(BASELINE)[0]
    creatable = {
        (g, r)
        for rule in role["rules"]
        if "create" in rule["verbs"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert creatable == set(kubernetes.TEAM_WORKLOADS)
    for level in PodSecurityLevel:
        rules = kubernetes.pod_security_policy(level)["spec"]["matchConstraints"]["resourceRules"]
        covered = {
            (g, r)
            for rule in rules
            if "CREATE" in rule["operations"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
        }
        assert creatable | {("", "pods")} <= covered


def test_a_deployment_is_not_a_tenant_workload_but_its_pods_are_checked():
    # The team cannot create Deployments; if someone else lets it, pod security judges the pods
    # the controller creates one by one like any other (the queue policy judges the Deployment).
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": changed(gpu_pod(), lambda s, c, m: s.update(hostPID=True))},
    }
    assert messages(deployment, BASELINE) == []
    assert messages(changed(gpu_pod(), lambda s, c, m: s.update(hostPID=True)), BASELINE) != []


# --- dedicated nodes -----------------------------------------------------------------------

KEY = kubernetes.DEDICATED_NODE_KEY


def dedicated_denials(pod, namespace, operation="CREATE"):
    return [
        d
        for d in ADMISSION.review(pod, namespace, operation=operation)
        if d.policy == f"gpu-governance-dedicated-{DEDICATED}"
    ]


@pytest.mark.parametrize(
    "toleration",
    [
        {"operator": "Exists"},  # tolerates every taint
        {"key": KEY, "operator": "Exists"},
        {"key": KEY, "operator": "Equal", "value": DEDICATED, "effect": "NoSchedule"},
        {"key": "", "operator": "Exists", "effect": "NoSchedule"},
    ],
)
def test_other_tenants_may_not_tolerate_a_dedicated_taint(toleration):
    pod = changed(gpu_pod(), lambda s, c, m: s["tolerations"].append(toleration))
    for operation in ("CREATE", "UPDATE"):  # tolerations may be added to a running pod
        assert len(dedicated_denials(pod, NS[BASELINE], operation)) == 1


def test_other_tolerations_and_system_daemons_are_admitted():
    other_value = changed(
        gpu_pod(), lambda s, c, m: s["tolerations"].append({"key": KEY, "operator": "Equal", "value": BASELINE})
    )
    assert dedicated_denials(other_value, NS[BASELINE]) == []
    daemon = changed(gpu_pod(), lambda s, c, m: s["tolerations"].append({"operator": "Exists"}))
    assert dedicated_denials(daemon, "kube-system") == []


def test_the_owning_team_must_select_and_tolerate_its_nodes():
    def pinned(s, c, m):
        s["nodeSelector"] = {KEY: DEDICATED}
        s["tolerations"].append({"key": KEY, "operator": "Equal", "value": DEDICATED, "effect": "NoSchedule"})

    assert messages(changed(gpu_pod(), pinned), DEDICATED) == []
    unpinned = messages(gpu_pod(), DEDICATED)
    assert len(unpinned) == 1 and "must run on its dedicated nodes" in unpinned[0]
    tolerates_only = changed(gpu_pod(), lambda s, c, m: s["tolerations"].append({"key": KEY, "operator": "Exists"}))
    assert len(messages(tolerates_only, DEDICATED)) == 1
    # A running pod is not re-checked for its placement (nodeSelector cannot change).
    assert messages(gpu_pod(), DEDICATED, operation="UPDATE") == []


# --- priority classes: each team only those the governance file grants it --------------------


def labelled(obj: dict, priority: str | None, on_templates: bool = False) -> dict:
    obj = copy.deepcopy(obj)
    targets = [obj["metadata"]] if not on_templates else [t["metadata"] for t in pod_templates(obj)]
    for metadata in targets:
        labels = metadata.setdefault("labels", {})
        labels.pop(PRIORITY, None)
        if priority is not None:
            labels[PRIORITY] = priority
    return obj


def pod_templates(obj: dict) -> list[dict]:
    """The pod templates of ``obj`` (as the object, so changes show in it); a pod's is itself."""
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind == "Pod":
        return [obj]
    if kind in ("Job", "Deployment", "StatefulSet"):
        return [spec["template"]]
    if kind == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]]
    if kind == "JobSet":
        return [r["template"]["spec"]["template"] for r in spec["replicatedJobs"]]
    if kind == "HyperPodPyTorchJob":
        return [r["template"] for r in spec["replicaSpecs"]]
    return [r["template"] for r in spec[KUBEFLOW[kind][1]].values()]


def priority_denials(obj: dict, team: str, **kwargs) -> list[str]:
    return [
        d.message for d in ADMISSION.review(obj, NS[team], **kwargs) if d.policy == f"gpu-governance-priority-{team}"
    ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("on_templates", [False, True])
def test_a_team_may_label_its_workloads_only_with_the_priority_classes_it_is_granted(kind, on_templates):
    workload = as_workload(kind, gpu_pod(), gpu_pod())
    for allowed in (None, "standard-priority", "opportunistic-priority"):
        assert priority_denials(labelled(workload, allowed, on_templates), DEDICATED) == [], allowed
    for refused in ("urgent-priority", "urgent", "made-up-priority", ""):
        assert priority_denials(labelled(workload, refused, on_templates), DEDICATED) == [
            "team prod may use only the priority classes standard, opportunistic "
            "(label kueue.x-k8s.io/priority-class: standard-priority, opportunistic-priority)"
        ], refused
    # A team granted every class uses the highest; the grant of one team binds only its own namespace.
    assert priority_denials(labelled(workload, "urgent-priority", on_templates), BASELINE) == []


def test_the_priority_class_label_cannot_be_raised_by_an_update():
    job = labelled(as_workload("PyTorchJob", gpu_pod(), gpu_pod()), "standard-priority")
    assert priority_denials(labelled(job, "urgent-priority"), DEDICATED, operation="UPDATE", old_object=job)
    assert priority_denials(labelled(gpu_pod(), "urgent-priority"), DEDICATED, operation="UPDATE", old_object=gpu_pod())


def test_a_team_granted_no_class_may_name_none():
    (policy, _) = kubernetes.priority_class_admission("idle", ())
    admission = Admission([policy, kubernetes.admission_binding("b", "idle", policy["metadata"]["name"])])
    assert admission.review(labelled(gpu_pod(), "opportunistic-priority"), "hyperpod-ns-idle")
    assert admission.review(gpu_pod(), "hyperpod-ns-idle") == []


# --- volumes: a claim of a team binds only the team's storage ---------------------------------


def volume(name: str, claim_namespace: str | None, team_label: str | None = None, provisioned: bool = False) -> dict:
    metadata: dict = {"name": name}
    if team_label is not None:
        metadata["labels"] = {kubernetes.TEAM_LABEL: team_label}
    if provisioned:
        metadata["annotations"] = {"pv.kubernetes.io/provisioned-by": "fsx.csi.aws.com"}
    spec: dict = {
        "capacity": {"storage": "1200Gi"},
        "accessModes": ["ReadWriteMany"],
        "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": "fs-1"},
    }
    if claim_namespace is not None:
        spec["claimRef"] = {"namespace": claim_namespace, "name": "data"}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": metadata, "spec": spec}


def volume_denials(pv: dict, **kwargs) -> list[str]:
    return [d.message for d in ADMISSION.review(pv, "", **kwargs) if d.policy == kubernetes.VOLUME_BINDING_POLICY]


def test_another_teams_static_volume_is_not_bound_to_a_claim_of_this_team():
    unbound = volume("fsx-speech-static", None, team_label="speech")
    assert volume_denials(unbound) == []  # the platform creates it, unbound
    # The PV controller binds it to research's claim (volumeName, or an ephemeral volume): refused.
    stolen = volume("fsx-speech-static", NS[BASELINE], team_label="speech")
    assert volume_denials(stolen, operation="UPDATE", old_object=unbound) == [
        "a volume is bound to a claim of hyperpod-ns-<team> only if it is labelled gpu-governance/team: <team> or was provisioned for that claim"
    ]
    assert volume_denials(
        volume("unlabelled-static", NS[BASELINE]), operation="UPDATE", old_object=volume("unlabelled-static", None)
    )
    # A look-alike team name is not the team: research's label does not open hyperpod-ns-research-2.
    assert volume_denials(volume("fsx-research", "hyperpod-ns-research-2", team_label="research"), operation="UPDATE")


def test_the_teams_own_volumes_and_volumes_provisioned_for_its_claims_are_bound():
    assert (
        volume_denials(
            volume("fsx-research", NS[BASELINE], team_label=BASELINE),
            operation="UPDATE",
            old_object=volume("fsx-research", None, team_label=BASELINE),
        )
        == []
    )
    provisioned = volume("pvc-1234", NS[BASELINE], provisioned=True)
    assert volume_denials(provisioned) == []  # created by the provisioner for that claim
    assert volume_denials(provisioned, operation="UPDATE") == []
    # Released, its claimRef moved to another team's claim: no longer provisioned for it.
    assert volume_denials(
        volume("pvc-1234", NS[RESTRICTED], provisioned=True), operation="UPDATE", old_object=provisioned
    )
    assert (
        volume_denials(volume("system-volume", "kube-system"), operation="UPDATE") == []
    )  # outside tenant namespaces: not ours to judge


# --- the queue and the priority class wherever Kubernetes or Kueue reads one (issue 38, row 1) ---

SYSTEM_CLASSES = ("system-node-critical", "system-cluster-critical")
QUEUE_REFUSED = (
    "every workload and pod in hyperpod-ns-<team> must name its team's local queue: label "
    "kueue.x-k8s.io/queue-name: hyperpod-ns-<team>-localqueue (on a CronJob, in spec.jobTemplate.metadata.labels)"
)
SYSTEM_REFUSED = (
    "the system priority classes (system-node-critical, system-cluster-critical) are the cluster's own: "
    "no workload or pod in hyperpod-ns-<team> may name one"
)
# prod (DEDICATED) is granted standard and opportunistic, not urgent.
LABEL_REFUSED = (
    "team prod may use only the priority classes standard, opportunistic "
    "(label kueue.x-k8s.io/priority-class: standard-priority, opportunistic-priority)"
)
NAME_REFUSED = (
    "team prod may use only the priority classes standard, opportunistic "
    "(priorityClassName: standard-priority, opportunistic-priority, or none)"
)


def refusals(obj: dict, namespace: str, **kwargs) -> list[str]:
    """The refusals of the queue and priority policies (pod security is judged above)."""
    judged = {kubernetes.TENANT_QUEUE_POLICY, *(f"gpu-governance-priority-{team}" for team in TEAMS)}
    return [d.message for d in ADMISSION.review(obj, namespace, **kwargs) if d.policy in judged]


def with_class(pod: dict, priority_class: str | None) -> dict:
    """``pod`` (or a template) naming ``priority_class`` as its PriorityClass; None names none."""
    pod = copy.deepcopy(pod)
    pod["spec"].pop("priorityClassName", None)
    if priority_class is not None:
        pod["spec"]["priorityClassName"] = priority_class
    return pod


def with_queue_label(obj: dict, key: str, value: str, where: str = "holder") -> dict:
    """``obj`` with one queue label ``key: value`` (only), on the object Kueue reads (``holder``),
    on the object itself (``object``), or on its pod templates only (``templates``)."""
    obj = copy.deepcopy(obj)
    for metadata in [obj["metadata"], *(t["metadata"] for t in pod_templates(obj))]:
        metadata.get("labels", {}).pop(QUEUE, None)
    holder = obj["spec"]["jobTemplate"] if obj["kind"] == "CronJob" and where == "holder" else obj
    targets = [t["metadata"] for t in pod_templates(obj)] if where == "templates" else [holder["metadata"]]
    for metadata in targets:
        metadata.setdefault("labels", {})[key] = value
    return obj


def test_the_queued_kinds_are_the_policies_kinds():
    """A kind added to the policies' table without a test here fails this test."""
    from .admission import RESOURCES

    tested = {RESOURCES[kind][::2] for kind in QUEUED_KINDS} - {("", "pods")}
    assert tested == set(kubernetes.QUEUED_WORKLOADS)
    assert set(kubernetes.TEAM_WORKLOADS) <= tested  # every kind the team's Role creates


@pytest.mark.parametrize("queue", [True, False], ids=["queued", "no-queue"])
def test_row_1_a_job_naming_system_node_critical_is_refused_with_or_without_a_queue(queue):
    """The report: a batch/v1 Job whose pods name system-node-critical. With a queue label Kueue
    would take that class's priority as the workload's; without one the Job skips Kueue."""
    job = as_workload("Job", with_class(gpu_pod(), "system-node-critical"), gpu_pod())
    submitted = queued(job, DEDICATED) if queue else job
    expected = [SYSTEM_REFUSED, NAME_REFUSED]
    assert refusals(submitted, NS[DEDICATED]) == ([] if queue else [QUEUE_REFUSED]) + expected
    # A team granted every declared class may not name a system class either.
    assert refusals(queued(job, BASELINE), NS[BASELINE])[0] == SYSTEM_REFUSED
    # Its pods, whoever makes them (the job controller included), are refused too.
    pod = with_class(gpu_pod(), "system-node-critical")
    assert refusals(pod, NS[DEDICATED], username=JOB_CONTROLLER) == expected


@pytest.mark.parametrize("kind", QUEUED_KINDS)
def test_every_workload_and_pod_must_name_the_teams_own_local_queue_where_kueue_reads_it(kind):
    workload = as_workload(kind, gpu_pod(), gpu_pod())
    own = kueue.local_queue(DEDICATED)
    assert refusals(queued(workload, DEDICATED), NS[DEDICATED]) == []
    assert refusals(workload, NS[DEDICATED]) == [QUEUE_REFUSED]  # no label: Kueue would leave it alone
    for wrong in (kueue.local_queue(BASELINE), "", own.upper(), f"{own} ", "localqueue", "hyperpod-ns-prod"):
        assert refusals(with_queue_label(workload, QUEUE, wrong), NS[DEDICATED]) == [QUEUE_REFUSED], wrong
    # Only where Kueue reads it: on the pod templates alone, a look-alike key, or the old annotation does nothing.
    if kind != "Pod":
        assert refusals(with_queue_label(workload, QUEUE, own, "templates"), NS[DEDICATED]) == [QUEUE_REFUSED]
    assert refusals(with_queue_label(workload, "Kueue.x-k8s.io/queue-name", own), NS[DEDICATED]) == [QUEUE_REFUSED]
    annotated = copy.deepcopy(workload)
    annotated["metadata"]["annotations"] = {QUEUE: own}
    assert refusals(annotated, NS[DEDICATED]) == [QUEUE_REFUSED]
    # Queued for one team, submitted in another's namespace.
    assert refusals(queued(workload, DEDICATED), NS[BASELINE]) == [QUEUE_REFUSED]


def test_a_cronjobs_queue_is_in_its_job_template():
    cron = as_workload("CronJob", gpu_pod(), gpu_pod())
    own = kueue.local_queue(DEDICATED)
    assert refusals(with_queue_label(cron, QUEUE, own, "object"), NS[DEDICATED]) == [QUEUE_REFUSED]
    assert refusals(with_queue_label(cron, QUEUE, own), NS[DEDICATED]) == []
    # The Kueue label in the job template reaches every Job it makes.
    in_template = queued(cron, DEDICATED)
    in_template["spec"]["jobTemplate"]["metadata"]["labels"][PRIORITY] = "urgent-priority"
    assert refusals(in_template, NS[DEDICATED]) == [LABEL_REFUSED]


@pytest.mark.parametrize("kind", QUEUED_KINDS)
def test_pods_and_pod_templates_may_name_only_a_granted_priority_class(kind):
    def submitted(priority_class: str | None) -> dict:  # one template names it, the other none
        return queued(as_workload(kind, with_class(gpu_pod(), priority_class), gpu_pod()), DEDICATED)

    for allowed in (None, "", "standard-priority", "opportunistic-priority"):
        assert refusals(submitted(allowed), NS[DEDICATED]) == [], allowed
    for refused in ("urgent-priority", "urgent", "Standard-priority", "standard-priority ", "System-Node-Critical"):
        assert refusals(submitted(refused), NS[DEDICATED]) == [NAME_REFUSED], refused
    for system in (*SYSTEM_CLASSES, "system-anything"):
        assert refusals(submitted(system), NS[DEDICATED]) == [SYSTEM_REFUSED, NAME_REFUSED], system
    # A granted class on the Kueue label does not cover an ungranted one on priorityClassName:
    # Kueue takes the label's for the workload, the scheduler the PriorityClass for the pods.
    both = labelled(submitted("urgent-priority"), "standard-priority")
    assert refusals(both, NS[DEDICATED]) == [NAME_REFUSED]
    assert refusals(labelled(submitted(None), "system-node-critical"), NS[DEDICATED]) == [SYSTEM_REFUSED, LABEL_REFUSED]


@pytest.mark.parametrize("kind", sorted(KUBEFLOW))
def test_a_kubeflow_jobs_run_policy_names_only_a_granted_priority_class(kind):
    """Kueue reads runPolicy.schedulingPolicy.priorityClass before any pod template's."""
    job = queued(as_workload(kind, gpu_pod(), gpu_pod()), DEDICATED)
    for priority_class, expected in (
        ("standard-priority", []),
        ("urgent-priority", [NAME_REFUSED]),
        ("system-cluster-critical", [SYSTEM_REFUSED, NAME_REFUSED]),
    ):
        job["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": priority_class}}
        assert refusals(job, NS[DEDICATED]) == expected, priority_class


@pytest.mark.parametrize(
    "kind, broken",
    [
        ("CronJob", lambda o: o["spec"].pop("jobTemplate")),
        ("CronJob", lambda o: o["spec"]["jobTemplate"]["spec"]["template"].pop("spec")),
        ("JobSet", lambda o: o["spec"].pop("replicatedJobs")),
        ("Deployment", lambda o: o["spec"].pop("template")),
        ("Job", lambda o: o["spec"]["template"].pop("spec")),
        ("TFJob", lambda o: o["spec"]["tfReplicaSpecs"]["Worker"].pop("template")),
    ],
)
def test_a_workload_the_queue_policy_cannot_read_fails_closed(kind, broken):
    obj = queued(as_workload(kind, gpu_pod(), gpu_pod()), DEDICATED)
    broken(obj)
    with pytest.raises(CelError):
        ADMISSION.review(obj, NS[DEDICATED])


def test_pods_the_clusters_controllers_make_need_no_queue_label_but_keep_to_the_priority_classes():
    pod = gpu_pod()  # made from a checked template: the job's queue label is on the job
    controllers = (
        JOB_CONTROLLER,
        "system:serviceaccount:kubeflow:training-operator",
        "system:serviceaccount:aws-hyperpod:hyperpod-training-operator",
        "system:serviceaccount:mpi-operator:mpi-operator",
        "system:kube-controller-manager",  # the controller manager without per-controller accounts
    )
    for controller in controllers:
        assert refusals(pod, NS[DEDICATED], username=controller) == [], controller
        assert refusals(with_class(pod, "urgent-priority"), NS[DEDICATED], username=controller) == [NAME_REFUSED]
    # A tenant, or anything acting from a tenant namespace, is no controller.
    for requester in (
        "arn:aws:sts::111122223333:assumed-role/prod-gpu-submit/mallory",
        "system:serviceaccount:hyperpod-ns-prod:gpu-workload",
        "system:serviceaccount:hyperpod-ns-research:default",
        "system:serviceaccount",
        "system:kube-controller-manager-x",
        "kube-controller-manager",
    ):
        assert refusals(pod, NS[DEDICATED], username=requester) == [QUEUE_REFUSED], requester


def test_the_queue_label_cannot_be_dropped_or_changed_by_an_update():
    job = queued(as_workload("PyTorchJob", gpu_pod(), gpu_pod()), DEDICATED)
    other_queue = with_queue_label(job, QUEUE, kueue.local_queue(BASELINE))
    unqueued = with_queue_label(job, "app", "llama")
    for update in (other_queue, unqueued):
        assert refusals(update, NS[DEDICATED], operation="UPDATE", old_object=job) == [QUEUE_REFUSED]
    # Kueue (a platform service account) suspends and resumes the job: admitted.
    controller = "system:serviceaccount:kueue-system:kueue-controller-manager"
    assert refusals(job, NS[DEDICATED], operation="UPDATE", old_object=job, username=controller) == []


def test_a_pods_priority_class_is_judged_once_so_its_finalizer_can_always_go():
    """priorityClassName cannot change on a pod: an update (the job controller removing its
    finalizer) is not refused for it, even for a pod made before the policy."""
    old = with_class(gpu_pod(), "urgent-priority")
    assert refusals(old, NS[DEDICATED], operation="UPDATE", old_object=old, username=JOB_CONTROLLER) == []
    assert refusals(old, NS[DEDICATED], username=JOB_CONTROLLER) == [NAME_REFUSED]  # at creation it is judged


def test_undeclared_tenant_namespaces_need_a_queue_and_no_system_class_and_others_are_untouched():
    job = as_workload("Job", with_class(gpu_pod(), "system-node-critical"), gpu_pod())
    assert refusals(job, "hyperpod-ns-newteam") == [QUEUE_REFUSED, SYSTEM_REFUSED]
    assert refusals(queued(as_workload("Job", gpu_pod(), gpu_pod()), "newteam"), "hyperpod-ns-newteam") == []
    assert ADMISSION.review(job, "kube-system") == []
