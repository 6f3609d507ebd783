"""Amazon EKS with Kueue (no HyperPod): the platform team's own EKS cluster running Kueue, governed
by ClusterQueues, cohorts, LocalQueues and WorkloadPriorityClasses made from the governance file
(``kueue``), with the same tenant isolation as HyperPod EKS (``constructs_lib.tenancy``)."""

from __future__ import annotations

from gpu_governance_runtime.contract import CONSUMER_EKS_NODE_GROUP, CONSUMER_KARPENTER_NODE_POOL, EKS_KUEUE

from ..base import EC2, Backend
from .pool import EksKueuePool

# Kueue: "up to 64 flavors" per resource group (ResourceGroup.flavors, kueue.x-k8s.io/v1beta2);
# each instance type of a team's quota is one flavor of its ClusterQueue's one group.
MAX_KUEUE_FLAVORS = 64

BACKEND = Backend(
    name=EKS_KUEUE,
    package=__name__,
    pool=EksKueuePool,
    exports={"pool": ("EksKueuePool",), "construct": ("EksKueueGovernance", "EksKueueGovernanceProps")},
    instance_types=EC2,
    family="eks",
    quota_noun="Kueue ClusterQueue",
    max_quota_types=MAX_KUEUE_FLAVORS,
    # Kueue takes borrowed quota back itself (ClusterQueue preemption.reclaimWithinCohort) and holds a
    # lending limit (lendingLimit) and a group's quota (a Cohort with a parent) natively.
    holds_limits_natively=True,
    # Kueue weighs ClusterQueues by fairSharing.weight only when its configuration enables fair sharing.
    # Kueue has no consumption limit: the reclaim controller sets the team's ClusterQueue's stopPolicy to Hold
    # at it and back next period (runtime backends/eks_kueue/gpu_hours.py) [aws: eks.kueue-stop-policy-hold].
    gpu_hour_switch="cluster_queue",
    # No max_run_caveat: the team's admission policy requires Kueue's maximum execution time on each of its
    # workloads, at most its limit, and Kueue deactivates a workload admitted that long (constructs_lib/tenancy/run_time.py).
    # A ClusterQueue admits from namespaces (spec.namespaceSelector); nothing in Kueue's API names a user.
    user_limit_caveat="not enforced {where}: Kueue counts the team's namespace as one (its ClusterQueue), a Kubernetes "
    "ResourceQuota limits a namespace and never a user, and every member acts in the team's group; one member may use "
    "the team's whole quota",
    # A Cohort per group, its spec.parentName its parent group's Cohort [aws: eks.kueue-cohort-tree].
    group_tree="Kueue's hierarchical cohorts (a Cohort per group under its parent group's, with the group's "
    "borrowingLimit and lendingLimit)",
    kubernetes_tenancy=True,
    window_feeds=(CONSUMER_EKS_NODE_GROUP, CONSUMER_KARPENTER_NODE_POOL),
    team_resources=6,
    shared_resources=8,
    reclaim_dashboard_widgets=6,
    pending_unit="workloads",  # Kueue's waiting workloads, not instances
    preemptions_seen=False,  # Kueue preempts natively; the reclaim controller only observes usage
    eks_access_entries=True,
    team_pod_role=True,
    submission_policy=True,
    member_tool="eks_kueue",
    stack_attribute="eks_kueue_clusters",
)
