"""Kubernetes objects that isolate teams on a shared EKS cluster running Kueue, generated from
the model: what every backend whose teams are tenants of a Kubernetes cluster shares.

Plain functions returning plain dicts, so a construct applies them and the tests check every one
against the Kubernetes schema of the cluster's version and evaluate its admission rules with the
real CEL. A backend names its tenants with a :class:`Tenants` (the namespace prefix, the team
group, the operators' namespaces); everything else is the same on every cluster: RBAC, network
policies, the workload service account, GPU quota, Pod Security Standards and the queue, priority
and volume policies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from constructs_lib.model import KubernetesTenancy, PodSecurityLevel
from gpu_governance_runtime.contract import EKS_USAGE_READER_GROUP

Manifest = dict[str, Any]

WORKLOAD_SERVICE_ACCOUNT = "gpu-workload"
"""Service account in each team namespace bound to the team's workload IAM role (pod identity)."""

POD_IDENTITY_AGENT = ("169.254.170.23/32", "fd00:ec2::23/128")
"""Link-local addresses of the EKS Pod Identity Agent on every node (IPv4, IPv6), port 80."""

_MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-governance"}
# Cost allocation by label (Kubecost, OpenCost; docs/chargeback.md): on each team namespace and on
# the workloads the member's manifests make.
TEAM_LABEL = "gpu-governance/team"
COST_CENTRE_LABEL = "gpu-governance/cost-centre"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
NAME_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace
_SUBMIT_VERBS = ["create", "get", "list", "watch", "delete"]
_READ_VERBS = ["get", "list", "watch"]

TEAM_WORKLOADS: dict[tuple[str, str], str] = {
    ("batch", "jobs"): "[object.spec.template]",
    (
        "kubeflow.org",
        "pytorchjobs",
    ): "object.spec.pytorchReplicaSpecs.map(r, object.spec.pytorchReplicaSpecs[r].template)",
    ("kubeflow.org", "mpijobs"): "object.spec.mpiReplicaSpecs.map(r, object.spec.mpiReplicaSpecs[r].template)",
    ("sagemaker.amazonaws.com", "hyperpodpytorchjobs"): "object.spec.replicaSpecs.map(r, r.template)",
}
"""(API group, resource) of every workload a team may create -> CEL listing the pod templates in
one such object. The team's Role grants exactly these, and the pod security policy checks their
templates, so the two cannot drift apart."""


def _replica_templates(field: str) -> str:
    return f"object.spec.{field}.map(r, object.spec.{field}[r].template)"


OTHER_POD_TEMPLATE_WORKLOADS: dict[tuple[str, str], str] = {
    ("batch", "cronjobs"): "[object.spec.jobTemplate.spec.template]",
    ("apps", "deployments"): "[object.spec.template]",
    ("apps", "statefulsets"): "[object.spec.template]",
    ("jobset.x-k8s.io", "jobsets"): "object.spec.replicatedJobs.map(r, r.template.spec.template)",
    ("kubeflow.org", "tfjobs"): _replica_templates("tfReplicaSpecs"),
    ("kubeflow.org", "xgboostjobs"): _replica_templates("xgbReplicaSpecs"),
    ("kubeflow.org", "paddlejobs"): _replica_templates("paddleReplicaSpecs"),
    ("kubeflow.org", "jaxjobs"): _replica_templates("jaxReplicaSpecs"),
}
"""Kinds with pod templates that Kueue queues but the team's Role does not grant: another role
(the HyperPod CLI's namespace role, a platform's own) may. Their pods are made by the cluster's
controllers, so the queue and priority policies check them where the team writes them."""

QUEUED_WORKLOADS = {**TEAM_WORKLOADS, **OTHER_POD_TEMPLATE_WORKLOADS}
"""Every workload kind the queue and priority policies check, besides pods."""

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
LOCAL_QUEUE_SUFFIX = "-localqueue"
CLUSTER_QUEUE_SUFFIX = "-clusterqueue"
# system-node-critical and system-cluster-critical ship with every cluster; no other class may take the prefix [aws: eks.pod-priority-classes]
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
_OBJECT_LABELS = "object.?metadata.?labels.orValue({})"
QUEUE_LABEL_HOLDERS: dict[str, str] = {"cronjobs": "object.spec.jobTemplate.?metadata.?labels.orValue({})"}
"""Resource -> CEL of the labels Kueue reads the queue and priority class from, where not the
object's own: a CronJob's Jobs take theirs from its job template [aws: eks.kueue-cronjob-queue-label]."""


def workload_priority_class(priority_class: str) -> str:
    """The Kueue WorkloadPriorityClass of a declared priority class, as HyperPod task governance
    names each of its classes."""
    return f"{priority_class}-priority"


def object_meta(name: str, team: str | None, namespace: str | None = None) -> dict[str, Any]:
    """Metadata of one object; ``team`` None for the cluster-wide objects no team owns."""
    if team is None:
        return {"name": name, "labels": dict(_MANAGED_BY)}
    meta: dict[str, Any] = {"name": name, "labels": {**_MANAGED_BY, TEAM_LABEL: team}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


USAGE_READER = "gpu-governance-usage-reader"


def usage_reader_objects(holds: Sequence[str] = ()) -> list[Manifest]:
    """Cluster-wide, applied once per cluster: group ``EKS_USAGE_READER_GROUP`` (the reclaim
    function's role, through its EKS access entry) may get and list Kueue ClusterQueues, which
    carry each team's quota and use in GPUs, and nothing else: no workload, pod or secret.
    ``holds``: the teams' ClusterQueues it may also patch (their stopPolicy, at a GPU-hour limit)."""
    rules: list[dict[str, Any]] = [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get", "list"]}
    ]
    if holds:
        rules.append(
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["clusterqueues"],
                "resourceNames": sorted(holds),
                "verbs": ["patch"],
            }
        )
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": object_meta(USAGE_READER, None),
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": object_meta(USAGE_READER, None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USAGE_READER},
        "subjects": [{"kind": "Group", "name": EKS_USAGE_READER_GROUP, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    return [cluster_role, binding]


def _namespaces(names: Sequence[str]) -> dict[str, Any]:
    return {"namespaceSelector": {"matchExpressions": [{"key": NAME_LABEL, "operator": "In", "values": list(names)}]}}


_ADMISSION_API = "admissionregistration.k8s.io/v1"
PODS = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}


def admission_policy(
    name: str,
    team: str | None,
    resource_rules: Sequence[dict[str, Any]],
    validations: Sequence[tuple[str, str]],
    variables: Sequence[tuple[str, str]] = (),
    match_conditions: Sequence[tuple[str, str]] = (),
) -> Manifest:
    """A ValidatingAdmissionPolicy (built into Kubernetes, no controller to install) that denies,
    and fails closed: a rule that cannot be evaluated denies too. ``validations`` are
    (CEL expression, message) pairs, ``variables`` and ``match_conditions`` (name, CEL) pairs."""
    spec: dict[str, Any] = {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": list(resource_rules)}}
    if match_conditions:
        spec["matchConditions"] = [{"name": n, "expression": e} for n, e in match_conditions]
    if variables:
        spec["variables"] = [{"name": n, "expression": e} for n, e in variables]
    spec["validations"] = [{"expression": e, "message": m, "reason": "Forbidden"} for e, m in validations]
    return {
        "apiVersion": _ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": object_meta(name, team),
        "spec": spec,
    }


def admission_binding(
    name: str, team: str | None, policy: str, namespace_selector: dict[str, Any] | None = None
) -> Manifest:
    """Binds ``policy`` with action Deny, to the namespaces ``namespace_selector`` selects (all without one)."""
    spec: dict[str, Any] = {"policyName": policy, "validationActions": ["Deny"]}
    if namespace_selector is not None:
        spec["matchResources"] = {"namespaceSelector": namespace_selector}
    return {
        "apiVersion": _ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": object_meta(name, team),
        "spec": spec,
    }


# --- Pod Security Standards ------------------------------------------------------------------
# The checks of Kubernetes' own Pod Security admission (k8s.io/pod-security-admission/policy),
# written in CEL over a pod template ``p`` ({metadata, spec}) and its containers ``c``. Where a
# Kubernetes version widened an allow-list (sysctls, SELinux types) the narrowest list is used.

POD_SECURITY_POLICY = "gpu-governance-pod-security"
_POD_SECURITY_LABEL = "pod-security.kubernetes.io"

BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
)
RESTRICTED_VOLUME_TYPES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
_SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t")
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"

_POD_SC = "p.spec.?securityContext"
_CONTAINER_SC = "c.?securityContext"
_CONTAINERS = "(p.spec.containers + p.spec.?initContainers.orValue([]) + p.spec.?ephemeralContainers.orValue([]))"
_HOST_FIELDS = [
    f"c.?{probe}.?{handler}.?host"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe")
    for handler in ("httpGet", "tcpSocket")
] + [
    f"c.?lifecycle.?{hook}.?{handler}.?host"
    for hook in ("postStart", "preStop")
    for handler in ("httpGet", "tcpSocket")
]


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _each_pod(expression: str) -> str:
    return f"variables.pods.all(p, {expression})"


def _each_container(expression: str) -> str:
    return _each_pod(f"{_CONTAINERS}.all(c, {expression})")


def _both(check) -> str:
    """A check of a security context that Kubernetes reads at pod and at container level."""
    return f"{_each_pod(check(_POD_SC))} && {_each_container(check(_CONTAINER_SC))}"


def _selinux(sc: str) -> str:
    options = f"{sc}.?seLinuxOptions"
    return (
        f"{options}.?type.orValue('') in {_cel_list(_SELINUX_TYPES)} && "
        f"{options}.?user.orValue('') == '' && {options}.?role.orValue('') == ''"
    )


BASELINE_CHECKS: tuple[tuple[str, str], ...] = (
    (
        _each_pod(
            "!p.spec.?hostNetwork.orValue(false) && !p.spec.?hostPID.orValue(false) && !p.spec.?hostIPC.orValue(false)"
        ),
        "host namespaces: hostNetwork, hostPID and hostIPC are forbidden",
    ),
    (_each_container(f"!{_CONTAINER_SC}.?privileged.orValue(false)"), "privileged containers are forbidden"),
    (
        _each_container(
            f"{_CONTAINER_SC}.?capabilities.?add.orValue([]).all(x, x in {_cel_list(BASELINE_CAPABILITIES)})"
        ),
        f"capabilities outside the baseline set may not be added (allowed: {', '.join(BASELINE_CAPABILITIES)})",
    ),
    (_each_pod("p.spec.?volumes.orValue([]).all(v, !has(v.hostPath))"), "hostPath volumes are forbidden"),
    (_each_container("c.?ports.orValue([]).all(port, port.?hostPort.orValue(0) == 0)"), "hostPort is forbidden"),
    (
        _both(lambda sc: f"!{sc}.?windowsOptions.?hostProcess.orValue(false)"),
        "Windows HostProcess containers are forbidden",
    ),
    (
        _both(lambda sc: f"{sc}.?appArmorProfile.?type.orValue('RuntimeDefault') in ['RuntimeDefault', 'Localhost']")
        + " && "
        + _each_pod(
            f"p.?metadata.?annotations.orValue({{}}).all(k, !k.startsWith('{_APPARMOR_ANNOTATION}') || "
            "p.metadata.annotations[k] == 'runtime/default' || p.metadata.annotations[k].startsWith('localhost/'))"
        ),
        "AppArmor may not be disabled (profile RuntimeDefault or Localhost only)",
    ),
    (
        _both(_selinux),
        f"SELinux: type only one of {', '.join(t for t in _SELINUX_TYPES if t)}; user and role may not be set",
    ),
    (
        _each_container(f"{_CONTAINER_SC}.?procMount.orValue('Default') == 'Default'"),
        "procMount other than Default is forbidden",
    ),
    (
        _both(lambda sc: f"{sc}.?seccompProfile.?type.orValue('RuntimeDefault') != 'Unconfined'"),
        "seccomp profile Unconfined is forbidden",
    ),
    (
        _each_pod(f"{_POD_SC}.?sysctls.orValue([]).all(s, s.name in {_cel_list(SAFE_SYSCTLS)})"),
        f"only the safe sysctls may be set ({', '.join(SAFE_SYSCTLS)})",
    ),
    (
        _each_container(" && ".join(f"{field}.orValue('') == ''" for field in _HOST_FIELDS)),
        "probes and lifecycle hooks may not name a host (the kubelet would connect to it from the node)",
    ),
    # Not part of the standard: a pod that names its node skips the scheduler, so taints,
    # dedicated nodes and Kueue's placement. Only at creation: running pods have a node.
    (
        "request.operation != 'CREATE' || " + _each_pod("p.spec.?nodeName.orValue('') == ''"),
        "spec.nodeName may not be set: the scheduler places tenant pods",
    ),
    # Not part of the standard either: a claim naming a volume binds that PersistentVolume if it is
    # unclaimed, another team's static FSx volume for example (volume_binding_objects guards the binding itself).
    (
        _each_pod(
            "p.spec.?volumes.orValue([]).all(v, v.?ephemeral.?volumeClaimTemplate.?spec.?volumeName.orValue('') == '')"
        ),
        "ephemeral volume claim templates may not name a volume (volumeName): they get storage provisioned for them",
    ),
)
"""(CEL, message) of every Pod Security Standards baseline control, and the library's nodeName and volumeName rules."""

RESTRICTED_CHECKS: tuple[tuple[str, str], ...] = (
    (
        _each_pod(
            f"p.spec.?volumes.orValue([]).all(v, v.all(k, k in {_cel_list(('name', *RESTRICTED_VOLUME_TYPES))}))"
        ),
        f"volume types other than {', '.join(RESTRICTED_VOLUME_TYPES)} are forbidden",
    ),
    (
        _each_container(f"{_CONTAINER_SC}.?allowPrivilegeEscalation.orValue(true) == false"),
        "every container must set securityContext.allowPrivilegeEscalation: false",
    ),
    (
        _each_container(f"{_CONTAINER_SC}.?runAsNonRoot.orValue({_POD_SC}.?runAsNonRoot.orValue(false)) == true"),
        "runAsNonRoot must be true (on the pod or on every container)",
    ),
    (_both(lambda sc: f"{sc}.?runAsUser.orValue(1) != 0"), "runAsUser 0 (root) is forbidden"),
    (
        _each_container(
            f"{_CONTAINER_SC}.?seccompProfile.?type.orValue({_POD_SC}.?seccompProfile.?type.orValue('')) in ['RuntimeDefault', 'Localhost']"
        ),
        "seccomp profile RuntimeDefault or Localhost must be set (on the pod or on every container)",
    ),
    (
        _each_container(
            f"{_CONTAINER_SC}.?capabilities.?drop.orValue([]).exists(x, x == 'ALL') && "
            f"{_CONTAINER_SC}.?capabilities.?add.orValue([]).all(x, x == 'NET_BIND_SERVICE')"
        ),
        "every container must drop ALL capabilities and may add only NET_BIND_SERVICE",
    ),
)
"""(CEL, message) of the controls the Pod Security Standards restricted level adds to baseline."""


def _pod_security_rules() -> list[dict[str, Any]]:
    # Pods are checked at creation whoever creates them (the training operators included), and
    # when containers are added to a running pod; the workloads a team creates are checked too,
    # so a bad template is refused at once rather than as pod events the team may never read.
    # Pod security fields of a pod cannot change after creation.
    return [
        {**PODS, "operations": ["CREATE"]},
        {**PODS, "resources": ["pods/ephemeralcontainers"], "operations": ["UPDATE"]},
        *(
            {"apiGroups": [group], "apiVersions": ["*"], "resources": [resource], "operations": ["CREATE"]}
            for group, resource in TEAM_WORKLOADS
        ),
    ]


def _by_resource(cases: dict[str, str], otherwise: str) -> str:
    """CEL: ``cases[<the resource under review>]``, ``otherwise`` for any other resource."""
    expression = otherwise
    for resource, cel in reversed(cases.items()):
        expression = f"request.resource.resource == '{resource}' ? {cel} : {expression}"
    return expression


def _pod_templates(workloads: dict[tuple[str, str], str] = TEAM_WORKLOADS) -> str:
    """CEL: the pod templates of the object under review (one of ``workloads``), for pods the pod itself."""
    *cases, (_, last) = [("pods", "[object]"), *((resource, cel) for (_, resource), cel in workloads.items())]
    return _by_resource(dict(cases), last)  # the last matched resource needs no test of its own


def _workload_rules(
    operations: Sequence[str], workloads: Iterable[tuple[str, str]] = QUEUED_WORKLOADS
) -> list[dict[str, Any]]:
    """Pods and every kind of ``workloads`` (API group, resource), one rule per API group."""
    groups: dict[str, list[str]] = {}
    for group, resource in workloads:
        groups.setdefault(group, []).append(resource)
    return [
        {**PODS, "operations": list(operations)},
        *(
            {"apiGroups": [group], "apiVersions": ["*"], "resources": resources, "operations": list(operations)}
            for group, resources in groups.items()
        ),
    ]


_WORKLOAD_VARIABLES = (
    ("pods", _pod_templates(QUEUED_WORKLOADS)),
    ("queueLabels", _by_resource(QUEUE_LABEL_HOLDERS, _OBJECT_LABELS)),
    # Every label set Kueue may read a priority class from: the object's, its job template's, its pods'.
    (
        "labelSets",
        f"[{_OBJECT_LABELS}, variables.queueLabels] + variables.pods.map(p, p.?metadata.?labels.orValue({{}}))",
    ),
    # Every PriorityClass named: on each pod or pod template, and on a Kubeflow job's run policy,
    # which Kueue reads first [aws: eks.kueue-pod-priority]. A pod that names none carries the
    # cluster's globalDefault class, if it has one, by the time this is read [aws: eks.pod-priority-classes].
    # A pod's priorityClassName cannot change after creation, so a pod is judged once (the job
    # controller removes its finalizer by an update).
    (
        "priorityClassNames",
        "request.resource.resource == 'pods' && request.operation != 'CREATE' ? [] : "
        "variables.pods.map(p, p.spec.?priorityClassName.orValue('')) + "
        "[object.?spec.?runPolicy.?schedulingPolicy.?priorityClass.orValue('')]",
    ),
)


VOLUME_BINDING_POLICY = "gpu-governance-volume-binding"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"  # set by the provisioner on a volume it made for a claim

TENANT_QUEUE_POLICY = "gpu-governance-tenant-queue"


def pod_security_labels(level: PodSecurityLevel, kubernetes_version: str) -> dict[str, str]:
    """Namespace labels for Kubernetes' own Pod Security admission: enforce, audit and warn at the
    team's level, each pinned to the cluster's version so an upgrade does not change the rules."""
    return {
        f"{_POD_SECURITY_LABEL}/{mode}{suffix}": value
        for mode in ("enforce", "audit", "warn")
        for suffix, value in (("", level.value), ("-version", f"v{kubernetes_version}"))
    }


def cost_metadata(team: str, cost_centre: str | None) -> dict[str, dict[str, str]]:
    """Labels and annotations that attribute a namespace or workload to its team and cost centre.
    A cost centre is a label only when it is a valid label value (at most 63 letters, digits, '-',
    '_' and '.', alphanumeric at both ends; tag values allow more); it is always an annotation,
    which takes any text, so no declared cost centre is lost."""
    labels = {TEAM_LABEL: team}
    if cost_centre and _LABEL_VALUE.match(cost_centre):
        labels[COST_CENTRE_LABEL] = cost_centre
    return {"labels": labels, **({"annotations": {COST_CENTRE_LABEL: cost_centre}} if cost_centre else {})}


@dataclass(frozen=True, kw_only=True)
class Tenants:
    """How one kind of cluster names its tenants, and every object that isolates them there.

    A team lives in namespace ``<namespace_prefix><team>``, submits to the Kueue local queue
    ``<namespace>-localqueue`` of ClusterQueue ``<namespace>-clusterqueue``, and acts through the
    Kubernetes group ``<namespace><group_suffix>``, which its EKS access entries name. The
    cluster-wide policies match every namespace with the prefix, declared team or not: a
    request's namespace cannot be relabelled away from its name."""

    namespace_prefix: str
    group_suffix: str
    operator_namespaces: tuple[str, ...]
    """Namespaces of Kueue, the training operators and the cluster's own agents, which reach the
    job's pods (and which the job's pods reach)."""

    def namespace(self, team: str) -> str:
        return f"{self.namespace_prefix}{team}"

    def team_group(self, team: str) -> str:
        return f"{self.namespace(team)}{self.group_suffix}"

    def cluster_queue(self, team: str) -> str:
        return f"{self.namespace(team)}{CLUSTER_QUEUE_SUFFIX}"

    def cluster_queue_team(self, name: str) -> str:
        """The team whose cluster queue ``name`` is (the inverse of :meth:`cluster_queue`)."""
        return name.removeprefix(self.namespace_prefix).removesuffix(CLUSTER_QUEUE_SUFFIX)

    def team_named(self, name: str) -> str | None:
        """The team whose namespace or cluster queue ``name`` is; None when it is neither."""
        team = self.cluster_queue_team(name)
        return team if team and name in (self.namespace(team), self.cluster_queue(team)) else None

    def local_queue(self, team: str) -> str:
        """The Kueue local queue in the team's namespace (jobs name it)."""
        return f"{self.namespace(team)}{LOCAL_QUEUE_SUFFIX}"

    def meta(self, name: str, team: str | None, namespaced: bool = True) -> dict[str, Any]:
        """Metadata of one object; ``team`` None for the cluster-wide objects no team owns."""
        return object_meta(name, team, self.namespace(team) if team is not None and namespaced else None)

    def _group_subject(self, team: str) -> list[dict[str, str]]:
        return [{"kind": "Group", "name": self.team_group(team), "apiGroup": "rbac.authorization.k8s.io"}]

    def rbac(self, team: str) -> list[Manifest]:
        """Submit and watch training jobs and pods in the team's namespace, read its Kueue workloads
        and local queue, and read its own cluster queue. No rule names secrets, so the group cannot
        read any secret, its own or another namespace's."""
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": self.meta("gpu-governance-team", team),
            "rules": [
                *(
                    {"apiGroups": [group], "resources": [resource], "verbs": _SUBMIT_VERBS}
                    for group, resource in TEAM_WORKLOADS
                ),
                {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": _READ_VERBS},
                {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": _READ_VERBS},
            ],
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": self.meta("gpu-governance-team", team),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gpu-governance-team"},
            "subjects": self._group_subject(team),
        }
        # Cluster queues are cluster-scoped: a ClusterRole limited by name to the team's own queue.
        queue_reader = f"gpu-governance-{team}-clusterqueue-reader"
        cluster_role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": self.meta(queue_reader, team, namespaced=False),
            "rules": [
                {
                    "apiGroups": ["kueue.x-k8s.io"],
                    "resources": ["clusterqueues"],
                    "resourceNames": [self.cluster_queue(team)],
                    "verbs": _READ_VERBS,
                }
            ],
        }
        cluster_binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": self.meta(queue_reader, team, namespaced=False),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": queue_reader},
            "subjects": self._group_subject(team),
        }
        return [role, binding, cluster_role, cluster_binding]

    def _policy(self, team: str, name: str, spec: dict[str, Any]) -> Manifest:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": self.meta(name, team),
            "spec": {"podSelector": {}, **spec},
        }

    def network_policies(self, team: str, operator_namespaces: Sequence[str] | None = None) -> list[Manifest]:
        """Deny all traffic to and from the team's pods, then allow what distributed training needs.
        Policies are additive: a flow is allowed when any policy allows it. docs/hyperpod-eks.md says
        why each allow exists. ``operator_namespaces``: default the cluster's (:attr:`operator_namespaces`)."""
        operator_namespaces = self.operator_namespaces if operator_namespaces is None else operator_namespaces
        same_namespace = [{"podSelector": {}}]
        return [
            self._policy(team, "default-deny", {"policyTypes": ["Ingress", "Egress"]}),
            # Name resolution through CoreDNS in kube-system.
            self._policy(
                team,
                "allow-dns",
                {
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [
                                {
                                    **_namespaces(["kube-system"]),
                                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                                }
                            ],
                            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                        }
                    ],
                },
            ),
            # Rendezvous, NCCL bootstrap and collective traffic between the job's own pods.
            self._policy(
                team,
                "allow-same-namespace",
                {
                    "policyTypes": ["Ingress", "Egress"],
                    "ingress": [{"from": same_namespace}],
                    "egress": [{"to": same_namespace}],
                },
            ),
            # Kueue, the training operators and the cluster's agents reach the job's pods (and back).
            self._policy(
                team,
                "allow-operators",
                {
                    "policyTypes": ["Ingress", "Egress"],
                    "ingress": [{"from": [_namespaces(operator_namespaces)]}],
                    "egress": [{"to": [_namespaces(operator_namespaces)]}],
                },
            ),
            # Credentials of the team's workload role come from the node-local Pod Identity Agent.
            self._policy(
                team,
                "allow-pod-identity-agent",
                {
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": cidr}} for cidr in POD_IDENTITY_AGENT],
                            "ports": [{"protocol": "TCP", "port": 80}],
                        }
                    ],
                },
            ),
            # The team's bucket, key and other AWS APIs over HTTPS (VPC endpoints or NAT).
            self._policy(
                team,
                "allow-https-egress",
                {
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
                            "ports": [{"protocol": "TCP", "port": 443}],
                        }
                    ],
                },
            ),
        ]

    def service_account(self, team: str) -> Manifest:
        return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": self.meta(WORKLOAD_SERVICE_ACCOUNT, team)}

    def gpu_quota(self, team: str, gpus: int) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": self.meta("gpu-governance-gpus", team),
            # Kubernetes quota for extended resources accepts only the requests. form.
            "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}},
        }

    def pod_security_policy(self, level: PodSecurityLevel) -> Manifest:
        """The policy for one level; restricted holds only what it adds, baseline applies as well.
        Baseline matches every tenant namespace, declared team or not, by name: a
        request's namespace cannot be relabelled away from it."""
        restricted = level is PodSecurityLevel.RESTRICTED
        return admission_policy(
            f"{POD_SECURITY_POLICY}-{level.value}",
            None,
            _pod_security_rules(),
            validations=[
                (cel, f"Pod Security {level.value}: {message}")
                for cel, message in (RESTRICTED_CHECKS if restricted else BASELINE_CHECKS)
            ],
            variables=[("pods", _pod_templates())],
            match_conditions=()
            if restricted
            else [("tenant-namespace", f"request.namespace.startsWith('{self.namespace_prefix}')")],
        )

    def pod_security_objects(self) -> list[Manifest]:
        """Cluster-wide, applied once per cluster, before any tenant namespace exists: baseline bound
        everywhere (its match condition narrows it to tenant namespaces) and restricted, bound per team
        by :func:`team_objects`; the volume binding policy (:func:`volume_binding_objects`); and the
        queue policy (:func:`tenant_queue_objects`)."""
        baseline = f"{POD_SECURITY_POLICY}-{PodSecurityLevel.BASELINE.value}"
        return [
            self.pod_security_policy(PodSecurityLevel.BASELINE),
            admission_binding(baseline, None, baseline),
            self.pod_security_policy(PodSecurityLevel.RESTRICTED),
            *self.volume_binding_objects(),
            *self.tenant_queue_objects(),
        ]

    def volume_binding_objects(self) -> list[Manifest]:
        """A PersistentVolume may be bound to a claim of a tenant namespace ``<prefix><team>``
        only if it is that team's storage: labelled ``gpu-governance/team: <team>`` (the platform
        labels each team's static volumes, FSx for example), or provisioned for that very claim
        (the provisioner's annotation, and the claim's namespace never changed since). Checked on the
        volume, where the binding is written (claimRef): every way to a volume (a claim's volumeName,
        an ephemeral volume, a volume whose claimRef someone cleared) passes here. Only the platform
        creates volumes (tenants' RBAC has no PersistentVolume verb)."""
        tenant_claim = f"object.spec.?claimRef.?namespace.orValue('').startsWith('{self.namespace_prefix}')"
        labelled = (
            f"object.?metadata.?labels.orValue({{}}).exists(k, k == '{TEAM_LABEL}' && "
            f"'{self.namespace_prefix}' + object.metadata.labels[k] == object.spec.claimRef.namespace)"
        )
        provisioned = (
            f"object.?metadata.?annotations.orValue({{}}).exists(k, k == '{PROVISIONED_BY}') && (request.operation == 'CREATE' || "
            "oldObject.spec.?claimRef.?namespace.orValue(object.spec.claimRef.namespace) == object.spec.claimRef.namespace)"
        )
        policy = admission_policy(
            VOLUME_BINDING_POLICY,
            None,
            [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["persistentvolumes"],
                    "operations": ["CREATE", "UPDATE"],
                }
            ],
            validations=[
                (
                    f"!({tenant_claim}) || ({labelled}) || ({provisioned})",
                    f"a volume is bound to a claim of {self.namespace_prefix}<team> only if it is labelled {TEAM_LABEL}: <team> "
                    "or was provisioned for that claim",
                )
            ],
        )
        return [policy, admission_binding(VOLUME_BINDING_POLICY, None, VOLUME_BINDING_POLICY)]

    def priority_class_admission(self, team: str, granted: Sequence[str]) -> list[Manifest]:
        """The team's workloads and pods may name only the priority classes it is granted
        (``kubernetes.<pool>.priority_classes``), as ``<class>-priority``: in the Kueue label (on the
        object, a CronJob's job template and every pod template; a label can be changed later, so at
        creation and on every update) and as a PriorityClass (``priorityClassName`` of pods and pod
        templates, a Kubeflow job's ``runPolicy.schedulingPolicy.priorityClass``), which Kueue takes
        as the workload's priority when no label names one and the scheduler as the pods' priority
        whatever the label says [aws: eks.kueue-pod-priority]. No class at all stays allowed."""
        name = f"gpu-governance-priority-{team}"
        names = [workload_priority_class(c) for c in granted]
        allowed = _cel_list(names)
        granted_text = ", ".join(granted) or "(none)"
        policy = admission_policy(
            name,
            team,
            _workload_rules(["CREATE", "UPDATE"]),
            variables=_WORKLOAD_VARIABLES,
            validations=[
                (
                    f"variables.labelSets.all(l, !('{PRIORITY_CLASS_LABEL}' in l) || l['{PRIORITY_CLASS_LABEL}'] in {allowed})",
                    f"team {team} may use only the priority classes {granted_text} "
                    f"(label {PRIORITY_CLASS_LABEL}: {', '.join(names) or '-'})",
                ),
                (
                    f"variables.priorityClassNames.all(c, c == '' || c in {allowed})",
                    f"team {team} may use only the priority classes {granted_text} "
                    f"(priorityClassName: {', '.join(names) or '-'}, or none)",
                ),
            ],
        )
        return [policy, admission_binding(name, team, name, _namespaces([self.namespace(team)])["namespaceSelector"])]

    def tenant_queue_objects(self) -> list[Manifest]:
        """Cluster-wide, in every tenant namespace (declared team or not, matched by
        name like pod security baseline): every workload and pod a tenant creates or changes must name
        the namespace's own Kueue local queue, ``<prefix><team>-localqueue``, where Kueue reads it
        (the object's label; a CronJob's job template), since Kueue leaves a job without one alone and
        it starts at once, outside every quota [aws: eks.kueue-queue-label]; and nothing may name a
        system priority class. Pods and child jobs the cluster's controllers make need no queue label
        of their own: their workload was checked. ValidatingAdmissionPolicy, not a mutating policy that
        could add the label: MutatingAdmissionPolicy is alpha on every supported Kubernetes version and
        EKS enables no alpha API [aws: eks.mutating-admission-policy]."""
        own_queue = f"request.namespace + '{LOCAL_QUEUE_SUFFIX}'"
        system = f"c.startsWith('{SYSTEM_PRIORITY_CLASS_PREFIX}')"
        policy = admission_policy(
            TENANT_QUEUE_POLICY,
            None,
            _workload_rules(["CREATE", "UPDATE"]),
            variables=_WORKLOAD_VARIABLES,
            match_conditions=[("tenant-namespace", f"request.namespace.startsWith('{self.namespace_prefix}')")],
            validations=[
                (
                    f"({self.platform_request}) || ('{QUEUE_LABEL}' in variables.queueLabels && variables.queueLabels['{QUEUE_LABEL}'] == {own_queue})",
                    f"every workload and pod in {self.namespace_prefix}<team> must name its team's local queue: "
                    f"label {QUEUE_LABEL}: {self.namespace_prefix}<team>{LOCAL_QUEUE_SUFFIX} "
                    "(on a CronJob, in spec.jobTemplate.metadata.labels)",
                ),
                (
                    f"!variables.priorityClassNames.exists(c, {system}) && "
                    f"!variables.labelSets.exists(l, '{PRIORITY_CLASS_LABEL}' in l && l['{PRIORITY_CLASS_LABEL}'].startsWith('{SYSTEM_PRIORITY_CLASS_PREFIX}'))",
                    "the system priority classes (system-node-critical, system-cluster-critical) are the cluster's own: "
                    f"no workload or pod in {self.namespace_prefix}<team> may name one",
                ),
            ],
        )
        return [policy, admission_binding(TENANT_QUEUE_POLICY, None, TENANT_QUEUE_POLICY)]

    def restricted_binding(self, team: str) -> Manifest:
        policy = f"{POD_SECURITY_POLICY}-{PodSecurityLevel.RESTRICTED.value}"
        return admission_binding(
            f"{policy}-{team}", team, policy, _namespaces([self.namespace(team)])["namespaceSelector"]
        )

    @property
    def platform_request(self) -> str:
        """CEL: the cluster's own controllers make the request. They make pods and child jobs from
        templates the policies have checked (job, CronJob and ReplicaSet controllers, the training
        operators, Kueue itself): service accounts of the platform's namespaces, or the controller
        manager when it runs without per-controller accounts. A tenant acts as neither: its access
        entry names no user, and its service accounts live in its own tenant namespace."""
        return (
            "request.userInfo.username == 'system:kube-controller-manager' || "
            "(request.userInfo.username.startsWith('system:serviceaccount:') && "
            f"!request.userInfo.username.startsWith('system:serviceaccount:{self.namespace_prefix}'))"
        )

    def team_objects(
        self,
        team: str,
        tenancy: KubernetesTenancy,
        priority_classes: Sequence[str],
        placement: Sequence[Manifest] = (),
    ) -> list[Manifest]:
        """Everything the team gets in its namespace, in apply order; all of it needs the namespace to
        exist first. ``priority_classes``: the names it may use (``tenancy.granted_priority_classes``);
        ``placement``: the backend's own objects that keep the team's pods on its nodes (HyperPod's
        dedicated instance groups)."""
        objects = [
            self.service_account(team),
            *self.rbac(team),
            *self.network_policies(team),
            *self.priority_class_admission(team, priority_classes),
        ]
        if tenancy.gpu_quota is not None:
            objects.append(self.gpu_quota(team, tenancy.gpu_quota))
        objects += placement
        if tenancy.pod_security is PodSecurityLevel.RESTRICTED:
            objects.append(self.restricted_binding(team))
        return objects
