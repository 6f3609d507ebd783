"""Kubernetes objects that isolate one team on a HyperPod EKS cluster, generated from the model.

What every Kubernetes backend shares is ``constructs_lib.tenancy.kubernetes``; this module names
the tenants as HyperPod's own tooling does, and adds the instance groups a team may dedicate:
task governance creates namespace ``hyperpod-ns-<team>`` and Kueue queues
``hyperpod-ns-<team>-localqueue`` / ``-clusterqueue`` from the team's compute quota; the HyperPod
CLI binds team roles to group ``hyperpod-ns-<team>-namespace-level-group``.
"""

from __future__ import annotations

from collections.abc import Sequence

from constructs_lib.model import KubernetesTenancy
from constructs_lib.tenancy.kubernetes import (  # noqa: F401 - this backend's names for the shared ones
    COST_CENTRE_LABEL,
    NAME_LABEL,
    PODS,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    QUEUED_WORKLOADS,
    TEAM_LABEL,
    TEAM_WORKLOADS,
    TENANT_QUEUE_POLICY,
    USAGE_READER,
    VOLUME_BINDING_POLICY,
    WORKLOAD_SERVICE_ACCOUNT,
    Manifest,
    Tenants,
    admission_binding,
    admission_policy,
    cost_metadata,
    pod_security_labels,
    usage_reader_objects,
    workload_priority_class,
)
from constructs_lib.tenancy.run_time import ACTIVE_DEADLINE, RunTimeLimits, run_time_admission
from gpu_governance_runtime.contract import HYPERPOD_NAMESPACE_PREFIX

# The same key and KubernetesConfig the deploy-time handler sets on the dedicated instance groups.
from gpu_governance_runtime.dedicated_nodes import DEDICATED_NODE_KEY, dedicated_node_config  # noqa: F401

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

TENANTS = Tenants(
    namespace_prefix=HYPERPOD_NAMESPACE_PREFIX,  # task governance makes one namespace per team with it
    group_suffix="-namespace-level-group",
    operator_namespaces=OPERATOR_NAMESPACES,
)
# The shared objects under the names this module has always given them (kueue.py: the names of the tenants).
rbac = TENANTS.rbac
network_policies = TENANTS.network_policies
service_account = TENANTS.service_account
gpu_quota = TENANTS.gpu_quota
priority_class_admission = TENANTS.priority_class_admission
restricted_binding = TENANTS.restricted_binding
pod_security_policy = TENANTS.pod_security_policy
pod_security_objects = TENANTS.pod_security_objects
volume_binding_objects = TENANTS.volume_binding_objects
tenant_queue_objects = TENANTS.tenant_queue_objects


def dedicated_node_admission(team: str, system_namespaces: Sequence[str] = SYSTEM_NAMESPACES) -> list[Manifest]:
    """Pods of other namespaces may not tolerate the team's taint, and new pods of the team must
    select and tolerate its dedicated nodes. System namespaces are exempt because their daemon
    sets run on every node."""
    name = f"gpu-governance-dedicated-{team}"
    key, own = DEDICATED_NODE_KEY, TENANTS.namespace(team)
    policy = admission_policy(
        name,
        team,
        [{**PODS, "operations": ["CREATE", "UPDATE"]}],
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
        {"matchExpressions": [{"key": NAME_LABEL, "operator": "NotIn", "values": list(system_namespaces)}]},
    )
    return [policy, binding]


def team_objects(
    team: str, tenancy: KubernetesTenancy, priority_classes: Sequence[str], run_time: RunTimeLimits | None = None
) -> list[Manifest]:
    """Everything the team gets on the cluster, in apply order; all of it needs the team's
    namespace (created by HyperPod with the compute quota) to exist first. ``priority_classes``:
    the names it may use (``tenancy.granted_priority_classes``); ``run_time``: its run-time limits
    there, held by Kubernetes' activeDeadlineSeconds (``tenancy.run_time``)."""
    placement = dedicated_node_admission(team) if tenancy.dedicated_instance_groups else ()
    objects = TENANTS.team_objects(team, tenancy, priority_classes, placement)
    return objects + run_time_admission(TENANTS, ACTIVE_DEADLINE, team, run_time)
