"""SageMaker HyperPod on EKS: task governance (compute quotas, Kueue underneath)."""

from __future__ import annotations

from gpu_governance_runtime.contract import CONSUMER_HYPERPOD_INSTANCE_GROUP, HYPERPOD_EKS, SharingStrategy

from .base import CLUSTER, Backend, refined

MAX_HYPERPOD_QUOTA_RESOURCES = 15  # SageMaker ComputeQuotaResources per compute quota


def _task_governance(deal, team, pool):
    """HyperPod semantics that differ from the model (docs/hyperpod-eks.md)."""
    sharing = team.sharing
    changes = {"in_share_preemption": f"{deal.in_share_preemption} (PreemptTeamTasks {'LowerPriority' if sharing.in_share_preemption else 'Never'})"}
    if not pool.idle_resource_sharing:
        changes.update(max_with_borrowing=deal.guaranteed, lends_idle="no (idle resource sharing off on the cluster)",
                       reclaimable="no (idle resource sharing off on the cluster)")
    elif sharing.strategy is SharingStrategy.RESERVE:
        changes["lends_idle"] = "no (DontLend: HyperPod documents only that it does not lend)"
    return refined(deal, **changes)


BACKEND = Backend(
    name=HYPERPOD_EKS,
    instance_types=CLUSTER,
    family="hyperpod",
    quota_noun="HyperPod compute quota",
    max_quota_types=MAX_HYPERPOD_QUOTA_RESOURCES,
    # ResourceSharingConfig is Strategy, BorrowLimit and AbsoluteBorrowLimits only
    # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceSharingConfig.html)
    # and Kueue, not the reclaim controller, reclaims there.
    gpu_hour_limit_caveat="HyperPod compute quotas have no consumption limit (AWS Budgets only notify)",
    lending_limit_caveat="not enforced {where}: HyperPod compute quotas have no lending limit and Kueue, not the reclaim controller, schedules there; "
                         "the team lends all of its idle quota there",
    refine_deal=_task_governance,
    window_feeds=(CONSUMER_HYPERPOD_INSTANCE_GROUP,),
    team_resources=7,
    shared_resources=11,
    reclaim_dashboard_widgets=6,
    quota_raises={CONSUMER_HYPERPOD_INSTANCE_GROUP: ("sagemaker:UpdateComputeQuota",)},
    construct="constructs_lib.hyperpod_eks.governance:build_pool",
    stack_attribute="hyperpod_eks_clusters",
)
