"""Kubernetes objects that isolate one team on a HyperPod EKS cluster, generated from the model.

Plain functions returning plain dicts, so the construct applies them and the tests check every
one against the Kubernetes schema of the cluster's version. Names follow HyperPod's own tooling:
task governance creates namespace ``hyperpod-ns-<team>`` and Kueue queues
``hyperpod-ns-<team>-localqueue`` / ``-clusterqueue`` from the team's compute quota; the HyperPod
CLI binds team roles to group ``hyperpod-ns-<team>-namespace-level-group``.
"""

from __future__ import annotations

from typing import Any, Sequence

# The same key and KubernetesConfig the deploy-time handler sets on the dedicated instance groups.
from gpu_governance_runtime.dedicated_nodes import DEDICATED_NODE_KEY, dedicated_node_config  # noqa: F401

from .model import KubernetesTenancy

Manifest = dict[str, Any]

WORKLOAD_SERVICE_ACCOUNT = "gpu-workload"
"""Service account in each team namespace bound to the team's workload IAM role (pod identity)."""

SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "aws-hyperpod", "kueue-system", "kubeflow", "amazon-cloudwatch")
"""Namespaces of cluster add-ons; their daemon sets tolerate every taint and must run on every node."""

OPERATOR_NAMESPACES = ("kueue-system", "kubeflow", "aws-hyperpod")
"""Kueue, the Kubeflow training operator and the HyperPod training operator and agents."""

POD_IDENTITY_AGENT = ("169.254.170.23/32", "fd00:ec2::23/128")
"""Link-local addresses of the EKS Pod Identity Agent on every node (IPv4, IPv6), port 80."""

_MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-governance"}
_NAME_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace
_SUBMIT_VERBS = ["create", "get", "list", "watch", "delete"]
_READ_VERBS = ["get", "list", "watch"]


def namespace(team: str) -> str:
    return f"hyperpod-ns-{team}"


def team_group(team: str) -> str:
    return f"hyperpod-ns-{team}-namespace-level-group"


def cluster_queue(team: str) -> str:
    return f"hyperpod-ns-{team}-clusterqueue"


def _meta(name: str, team: str, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**_MANAGED_BY, "gpu-governance/team": team}}
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
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": _SUBMIT_VERBS},
            {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "mpijobs"], "verbs": _SUBMIT_VERBS},
            {"apiGroups": ["sagemaker.amazonaws.com"], "resources": ["hyperpodpytorchjobs"], "verbs": _SUBMIT_VERBS},
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
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "resourceNames": [cluster_queue(team)], "verbs": _READ_VERBS}
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


def _namespaces(names: Sequence[str]) -> dict[str, Any]:
    return {"namespaceSelector": {"matchExpressions": [{"key": _NAME_LABEL, "operator": "In", "values": list(names)}]}}


def _policy(team: str, name: str, spec: dict[str, Any]) -> Manifest:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(name, team), "spec": {"podSelector": {}, **spec}}


def network_policies(team: str, operator_namespaces: Sequence[str] = OPERATOR_NAMESPACES) -> list[Manifest]:
    """Deny all traffic to and from the team's pods, then allow what distributed training needs.
    Policies are additive: a flow is allowed when any policy allows it. docs/hyperpod-eks.md says
    why each allow exists."""
    same_namespace = [{"podSelector": {}}]
    return [
        _policy(team, "default-deny", {"policyTypes": ["Ingress", "Egress"]}),
        # Name resolution through CoreDNS in kube-system.
        _policy(team, "allow-dns", {
            "policyTypes": ["Egress"],
            "egress": [{
                "to": [{**_namespaces(["kube-system"]), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            }],
        }),
        # Rendezvous, NCCL bootstrap and collective traffic between the job's own pods.
        _policy(team, "allow-same-namespace", {
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": same_namespace}],
            "egress": [{"to": same_namespace}],
        }),
        # Kueue, the training operators and HyperPod's agents reach the job's pods (and back).
        _policy(team, "allow-operators", {
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [_namespaces(operator_namespaces)]}],
            "egress": [{"to": [_namespaces(operator_namespaces)]}],
        }),
        # Credentials of the team's workload role come from the node-local Pod Identity Agent.
        _policy(team, "allow-pod-identity-agent", {
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in POD_IDENTITY_AGENT], "ports": [{"protocol": "TCP", "port": 80}]}],
        }),
        # The team's bucket, key and other AWS APIs over HTTPS (VPC endpoints or NAT).
        _policy(team, "allow-https-egress", {
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}], "ports": [{"protocol": "TCP", "port": 443}]}],
        }),
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


def dedicated_node_admission(team: str, system_namespaces: Sequence[str] = SYSTEM_NAMESPACES) -> list[Manifest]:
    """A ValidatingAdmissionPolicy and its binding (built into Kubernetes, no controller to
    install): pods of other namespaces may not tolerate the team's taint, and new pods of the
    team must select and tolerate its dedicated nodes. System namespaces are exempt because
    their daemon sets run on every node."""
    name = f"gpu-governance-dedicated-{team}"
    key, own = DEDICATED_NODE_KEY, namespace(team)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(name, team, namespaced=False),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]
            },
            "variables": [
                {"name": "ownNamespace", "expression": f"request.namespace == '{own}'"},
                # An empty key with operator Exists tolerates every taint, ours included.
                {"name": "toleratesTaint", "expression": (
                    "has(object.spec.tolerations) && object.spec.tolerations.exists(t, "
                    f"(!has(t.key) || t.key == '' || t.key == '{key}') && "
                    f"((has(t.operator) && t.operator == 'Exists') || (has(t.value) && t.value == '{team}')))"
                )},
                {"name": "selectsNodes", "expression": (
                    f"has(object.spec.nodeSelector) && '{key}' in object.spec.nodeSelector && "
                    f"object.spec.nodeSelector['{key}'] == '{team}'"
                )},
            ],
            "validations": [
                {
                    "expression": "variables.ownNamespace || !variables.toleratesTaint",
                    "message": f"only pods in namespace {own} may tolerate taint {key}={team} (nodes dedicated to team {team})",
                    "reason": "Forbidden",
                },
                {
                    # nodeSelector and tolerations cannot be removed later, so checking new pods suffices.
                    "expression": "!variables.ownNamespace || request.operation != 'CREATE' || (variables.selectsNodes && variables.toleratesTaint)",
                    "message": f"pods of team {team} must run on its dedicated nodes: nodeSelector {key}: {team} and a toleration for {key}={team}:NoSchedule",
                    "reason": "Forbidden",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(name, team, namespaced=False),
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchExpressions": [{"key": _NAME_LABEL, "operator": "NotIn", "values": list(system_namespaces)}]}},
        },
    }
    return [policy, binding]


def team_objects(team: str, tenancy: KubernetesTenancy) -> list[Manifest]:
    """Everything the team gets on the cluster, in apply order; all of it needs the team's
    namespace (created by HyperPod with the compute quota) to exist first."""
    objects = [service_account(team), *rbac(team), *network_policies(team)]
    if tenancy.gpu_quota is not None:
        objects.append(gpu_quota(team, tenancy.gpu_quota))
    if tenancy.dedicated_instance_groups:
        objects += dedicated_node_admission(team)
    return objects
