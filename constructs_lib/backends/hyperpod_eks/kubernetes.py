"""Kubernetes objects that isolate one team on a HyperPod EKS cluster, generated from the model.

Plain functions returning plain dicts, so the construct applies them and the tests check every
one against the Kubernetes schema of the cluster's version. Names follow HyperPod's own tooling:
task governance creates namespace ``hyperpod-ns-<team>`` and Kueue queues
``hyperpod-ns-<team>-localqueue`` / ``-clusterqueue`` from the team's compute quota; the HyperPod
CLI binds team roles to group ``hyperpod-ns-<team>-namespace-level-group``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from constructs_lib.model import KubernetesTenancy, PodSecurityLevel
from gpu_governance_runtime.contract import EKS_USAGE_READER_GROUP

# The same key and KubernetesConfig the deploy-time handler sets on the dedicated instance groups.
from gpu_governance_runtime.dedicated_nodes import DEDICATED_NODE_KEY, dedicated_node_config  # noqa: F401

from .kueue import (
    LOCAL_QUEUE_SUFFIX,
    TENANT_NAMESPACE_PREFIX,
    cluster_queue,
    namespace,
    team_group,
    workload_priority_class,
)

Manifest = dict[str, Any]


WORKLOAD_SERVICE_ACCOUNT = "gpu-workload"
"""Service account in each team namespace bound to the team's workload IAM role (pod identity)."""

SYSTEM_NAMESPACES = (
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "aws-hyperpod",
    "kueue-system",
    "kubeflow",
    "amazon-cloudwatch",
)
"""Namespaces of cluster add-ons; their daemon sets tolerate every taint and must run on every node."""

OPERATOR_NAMESPACES = ("kueue-system", "kubeflow", "aws-hyperpod")
"""Kueue, the Kubeflow training operator and the HyperPod training operator and agents."""

POD_IDENTITY_AGENT = ("169.254.170.23/32", "fd00:ec2::23/128")
"""Link-local addresses of the EKS Pod Identity Agent on every node (IPv4, IPv6), port 80."""

_MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-governance"}
# Cost allocation by label (Kubecost, OpenCost; docs/chargeback.md): on each team namespace and on
# the workloads the member's manifests make.
TEAM_LABEL = "gpu-governance/team"
COST_CENTRE_LABEL = "gpu-governance/cost-centre"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_NAME_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace
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
# system-node-critical and system-cluster-critical ship with every cluster; no other class may take the prefix [aws: eks.pod-priority-classes]
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
_OBJECT_LABELS = "object.?metadata.?labels.orValue({})"
QUEUE_LABEL_HOLDERS: dict[str, str] = {"cronjobs": "object.spec.jobTemplate.?metadata.?labels.orValue({})"}
"""Resource -> CEL of the labels Kueue reads the queue and priority class from, where not the
object's own: a CronJob's Jobs take theirs from its job template [aws: eks.kueue-cronjob-queue-label]."""


def _meta(name: str, team: str | None, namespaced: bool = True) -> dict[str, Any]:
    """Metadata of one object; ``team`` None for the cluster-wide objects no team owns."""
    if team is None:
        return {"name": name, "labels": dict(_MANAGED_BY)}
    meta: dict[str, Any] = {"name": name, "labels": {**_MANAGED_BY, TEAM_LABEL: team}}
    if namespaced:
        meta["namespace"] = namespace(team)
    return meta


def _group_subject(team: str) -> list[dict[str, str]]:
    return [{"kind": "Group", "name": team_group(team), "apiGroup": "rbac.authorization.k8s.io"}]


def rbac(team: str) -> list[Manifest]:
    """Submit and watch training jobs and pods in the team's namespace, read its Kueue workloads
    and local queue, and read its own cluster queue. No rule names secrets, so the group cannot
    read any secret, its own or another namespace's."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta("gpu-governance-team", team),
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
        "metadata": _meta("gpu-governance-team", team),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gpu-governance-team"},
        "subjects": _group_subject(team),
    }
    # Cluster queues are cluster-scoped: a ClusterRole limited by name to the team's own queue.
    queue_reader = f"gpu-governance-{team}-clusterqueue-reader"
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(queue_reader, team, namespaced=False),
        "rules": [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["clusterqueues"],
                "resourceNames": [cluster_queue(team)],
                "verbs": _READ_VERBS,
            }
        ],
    }
    cluster_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(queue_reader, team, namespaced=False),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": queue_reader},
        "subjects": _group_subject(team),
    }
    return [role, binding, cluster_role, cluster_binding]


USAGE_READER = "gpu-governance-usage-reader"


def usage_reader_objects() -> list[Manifest]:
    """Cluster-wide, applied once per cluster: group ``EKS_USAGE_READER_GROUP`` (the reclaim
    function's role, through its EKS access entry) may get and list Kueue ClusterQueues, which
    carry each team's quota and use in GPUs, and nothing else: no workload, pod or secret."""
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(USAGE_READER, None),
        "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get", "list"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(USAGE_READER, None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USAGE_READER},
        "subjects": [{"kind": "Group", "name": EKS_USAGE_READER_GROUP, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    return [cluster_role, binding]


def _namespaces(names: Sequence[str]) -> dict[str, Any]:
    return {"namespaceSelector": {"matchExpressions": [{"key": _NAME_LABEL, "operator": "In", "values": list(names)}]}}


def _policy(team: str, name: str, spec: dict[str, Any]) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, team),
        "spec": {"podSelector": {}, **spec},
    }


def network_policies(team: str, operator_namespaces: Sequence[str] = OPERATOR_NAMESPACES) -> list[Manifest]:
    """Deny all traffic to and from the team's pods, then allow what distributed training needs.
    Policies are additive: a flow is allowed when any policy allows it. docs/hyperpod-eks.md says
    why each allow exists."""
    same_namespace = [{"podSelector": {}}]
    return [
        _policy(team, "default-deny", {"policyTypes": ["Ingress", "Egress"]}),
        # Name resolution through CoreDNS in kube-system.
        _policy(
            team,
            "allow-dns",
            {
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {**_namespaces(["kube-system"]), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
                        ],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    }
                ],
            },
        ),
        # Rendezvous, NCCL bootstrap and collective traffic between the job's own pods.
        _policy(
            team,
            "allow-same-namespace",
            {
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": same_namespace}],
                "egress": [{"to": same_namespace}],
            },
        ),
        # Kueue, the training operators and HyperPod's agents reach the job's pods (and back).
        _policy(
            team,
            "allow-operators",
            {
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [_namespaces(operator_namespaces)]}],
                "egress": [{"to": [_namespaces(operator_namespaces)]}],
            },
        ),
        # Credentials of the team's workload role come from the node-local Pod Identity Agent.
        _policy(
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
        _policy(
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


def service_account(team: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(WORKLOAD_SERVICE_ACCOUNT, team)}


def gpu_quota(team: str, gpus: int) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta("gpu-governance-gpus", team),
        # Kubernetes quota for extended resources accepts only the requests. form.
        "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}},
    }


_ADMISSION_API = "admissionregistration.k8s.io/v1"
_PODS = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}


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
        "metadata": _meta(name, team, namespaced=False),
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
        "metadata": _meta(name, team, namespaced=False),
        "spec": spec,
    }


def dedicated_node_admission(team: str, system_namespaces: Sequence[str] = SYSTEM_NAMESPACES) -> list[Manifest]:
    """Pods of other namespaces may not tolerate the team's taint, and new pods of the team must
    select and tolerate its dedicated nodes. System namespaces are exempt because their daemon
    sets run on every node."""
    name = f"gpu-governance-dedicated-{team}"
    key, own = DEDICATED_NODE_KEY, namespace(team)
    policy = admission_policy(
        name,
        team,
        [{**_PODS, "operations": ["CREATE", "UPDATE"]}],
        variables=[
            ("ownNamespace", f"request.namespace == '{own}'"),
            # An empty key with operator Exists tolerates every taint, ours included.
            (
                "toleratesTaint",
                (
                    "has(object.spec.tolerations) && object.spec.tolerations.exists(t, "
                    f"(!has(t.key) || t.key == '' || t.key == '{key}') && "
                    f"((has(t.operator) && t.operator == 'Exists') || (has(t.value) && t.value == '{team}')))"
                ),
            ),
            (
                "selectsNodes",
                f"has(object.spec.nodeSelector) && '{key}' in object.spec.nodeSelector && object.spec.nodeSelector['{key}'] == '{team}'",
            ),
        ],
        validations=[
            (
                "variables.ownNamespace || !variables.toleratesTaint",
                f"only pods in namespace {own} may tolerate taint {key}={team} (nodes dedicated to team {team})",
            ),
            # nodeSelector and tolerations cannot be removed later, so checking new pods suffices.
            (
                "!variables.ownNamespace || request.operation != 'CREATE' || (variables.selectsNodes && variables.toleratesTaint)",
                f"pods of team {team} must run on its dedicated nodes: nodeSelector {key}: {team} and a toleration for {key}={team}:NoSchedule",
            ),
        ],
    )
    binding = admission_binding(
        name,
        team,
        name,
        {"matchExpressions": [{"key": _NAME_LABEL, "operator": "NotIn", "values": list(system_namespaces)}]},
    )
    return [policy, binding]


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
        {**_PODS, "operations": ["CREATE"]},
        {**_PODS, "resources": ["pods/ephemeralcontainers"], "operations": ["UPDATE"]},
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


def _workload_rules(operations: Sequence[str]) -> list[dict[str, Any]]:
    """Pods and every kind of ``QUEUED_WORKLOADS``, one rule per API group."""
    groups: dict[str, list[str]] = {}
    for group, resource in QUEUED_WORKLOADS:
        groups.setdefault(group, []).append(resource)
    return [
        {**_PODS, "operations": list(operations)},
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


def pod_security_policy(level: PodSecurityLevel) -> Manifest:
    """The policy for one level; restricted holds only what it adds, baseline applies as well.
    Baseline matches every tenant namespace HyperPod makes, declared team or not, by name: a
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
        else [("tenant-namespace", f"request.namespace.startsWith('{TENANT_NAMESPACE_PREFIX}')")],
    )


def pod_security_objects() -> list[Manifest]:
    """Cluster-wide, applied once per cluster, before any tenant namespace exists: baseline bound
    everywhere (its match condition narrows it to tenant namespaces) and restricted, bound per team
    by :func:`team_objects`; the volume binding policy (:func:`volume_binding_objects`); and the
    queue policy (:func:`tenant_queue_objects`)."""
    baseline = f"{POD_SECURITY_POLICY}-{PodSecurityLevel.BASELINE.value}"
    return [
        pod_security_policy(PodSecurityLevel.BASELINE),
        admission_binding(baseline, None, baseline),
        pod_security_policy(PodSecurityLevel.RESTRICTED),
        *volume_binding_objects(),
        *tenant_queue_objects(),
    ]


VOLUME_BINDING_POLICY = "gpu-governance-volume-binding"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"  # set by the provisioner on a volume it made for a claim


def volume_binding_objects() -> list[Manifest]:
    """A PersistentVolume may be bound to a claim of a tenant namespace ``hyperpod-ns-<team>``
    only if it is that team's storage: labelled ``gpu-governance/team: <team>`` (the platform
    labels each team's static volumes, FSx for example), or provisioned for that very claim
    (the provisioner's annotation, and the claim's namespace never changed since). Checked on the
    volume, where the binding is written (claimRef): every way to a volume (a claim's volumeName,
    an ephemeral volume, a volume whose claimRef someone cleared) passes here. Only the platform
    creates volumes (tenants' RBAC has no PersistentVolume verb)."""
    tenant_claim = f"object.spec.?claimRef.?namespace.orValue('').startsWith('{TENANT_NAMESPACE_PREFIX}')"
    labelled = (
        f"object.?metadata.?labels.orValue({{}}).exists(k, k == '{TEAM_LABEL}' && "
        f"'{TENANT_NAMESPACE_PREFIX}' + object.metadata.labels[k] == object.spec.claimRef.namespace)"
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
                f"a volume is bound to a claim of {TENANT_NAMESPACE_PREFIX}<team> only if it is labelled {TEAM_LABEL}: <team> "
                "or was provisioned for that claim",
            )
        ],
    )
    return [policy, admission_binding(VOLUME_BINDING_POLICY, None, VOLUME_BINDING_POLICY)]


def priority_class_admission(team: str, granted: Sequence[str]) -> list[Manifest]:
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
    return [policy, admission_binding(name, team, name, _namespaces([namespace(team)])["namespaceSelector"])]


TENANT_QUEUE_POLICY = "gpu-governance-tenant-queue"
# The cluster's own controllers make pods and child jobs from templates the policies have checked
# (job, CronJob and ReplicaSet controllers, the training operators, Kueue itself): service accounts
# of the platform's namespaces, or the controller manager when it runs without per-controller
# accounts. A tenant acts as neither: its access entry names no user, and its service accounts live
# in its own hyperpod-ns-<team> namespace.
_PLATFORM_REQUEST = (
    "request.userInfo.username == 'system:kube-controller-manager' || "
    "(request.userInfo.username.startsWith('system:serviceaccount:') && "
    f"!request.userInfo.username.startsWith('system:serviceaccount:{TENANT_NAMESPACE_PREFIX}'))"
)


def tenant_queue_objects() -> list[Manifest]:
    """Cluster-wide, in every namespace HyperPod makes for a team (declared or not, matched by
    name like pod security baseline): every workload and pod a tenant creates or changes must name
    the namespace's own Kueue local queue, ``hyperpod-ns-<team>-localqueue``, where Kueue reads it
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
        match_conditions=[("tenant-namespace", f"request.namespace.startsWith('{TENANT_NAMESPACE_PREFIX}')")],
        validations=[
            (
                f"({_PLATFORM_REQUEST}) || ('{QUEUE_LABEL}' in variables.queueLabels && variables.queueLabels['{QUEUE_LABEL}'] == {own_queue})",
                f"every workload and pod in {TENANT_NAMESPACE_PREFIX}<team> must name its team's local queue: "
                f"label {QUEUE_LABEL}: {TENANT_NAMESPACE_PREFIX}<team>{LOCAL_QUEUE_SUFFIX} "
                "(on a CronJob, in spec.jobTemplate.metadata.labels)",
            ),
            (
                f"!variables.priorityClassNames.exists(c, {system}) && "
                f"!variables.labelSets.exists(l, '{PRIORITY_CLASS_LABEL}' in l && l['{PRIORITY_CLASS_LABEL}'].startsWith('{SYSTEM_PRIORITY_CLASS_PREFIX}'))",
                "the system priority classes (system-node-critical, system-cluster-critical) are the cluster's own: "
                f"no workload or pod in {TENANT_NAMESPACE_PREFIX}<team> may name one",
            ),
        ],
    )
    return [policy, admission_binding(TENANT_QUEUE_POLICY, None, TENANT_QUEUE_POLICY)]


def restricted_binding(team: str) -> Manifest:
    policy = f"{POD_SECURITY_POLICY}-{PodSecurityLevel.RESTRICTED.value}"
    return admission_binding(f"{policy}-{team}", team, policy, _namespaces([namespace(team)])["namespaceSelector"])


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


def team_objects(team: str, tenancy: KubernetesTenancy, priority_classes: Sequence[str]) -> list[Manifest]:
    """Everything the team gets on the cluster, in apply order; all of it needs the team's
    namespace (created by HyperPod with the compute quota) to exist first. ``priority_classes``:
    the names it may use (``tenancy.granted_priority_classes``)."""
    objects = [
        service_account(team),
        *rbac(team),
        *network_policies(team),
        *priority_class_admission(team, priority_classes),
    ]
    if tenancy.gpu_quota is not None:
        objects.append(gpu_quota(team, tenancy.gpu_quota))
    if tenancy.dedicated_instance_groups:
        objects += dedicated_node_admission(team)
    if tenancy.pod_security is PodSecurityLevel.RESTRICTED:
        objects.append(restricted_binding(team))
    return objects
