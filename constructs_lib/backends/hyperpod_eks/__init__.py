"""SageMaker HyperPod on EKS: task governance (compute quotas, Kueue underneath)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_governance_runtime.contract import CONSUMER_HYPERPOD_INSTANCE_GROUP, HYPERPOD_EKS, SharingStrategy

from ..base import CLUSTER, Backend, refined
from .pool import HyperPodEksPool

MAX_HYPERPOD_QUOTA_RESOURCES = 15  # SageMaker ComputeQuotaResources per compute quota


def compute_quota_resource(instance_type: str, entry: Any) -> dict:
    """One ``ComputeQuotaResourceConfig`` of a HyperPod EKS compute quota from a team's quota entry
    (a count of instances or a ``model.quota.ResourceQuota``), in the declared unit:
    ``Count`` for instances, else ``Accelerators`` / ``AcceleratorPartition`` with ``VCpu`` and
    ``MemoryInGiB`` when declared (SageMaker derives them otherwise). Property names as CloudFormation's
    AWS::SageMaker::ComputeQuota takes them (cfn-lint's schema; botocore's ComputeQuotaResourceConfig)."""
    if isinstance(entry, int) or entry.instances is not None:
        return {"InstanceType": instance_type, "Count": entry if isinstance(entry, int) else entry.instances}
    resource: dict = {"InstanceType": instance_type}
    if entry.accelerators is not None:
        resource["Accelerators"] = entry.accelerators
    if entry.accelerator_partition is not None:
        resource["AcceleratorPartition"] = {
            "Type": entry.accelerator_partition.type,
            "Count": entry.accelerator_partition.count,
        }
    if entry.vcpu is not None:
        resource["VCpu"] = entry.vcpu
    if entry.memory_gib is not None:
        resource["MemoryInGiB"] = entry.memory_gib
    return resource


def absolute_borrow_limits(entries: Mapping[str, Any]) -> list[dict]:
    """``ResourceSharingConfig.AbsoluteBorrowLimits``: GPUs per instance type, for the types that declare one."""
    return [
        {"InstanceType": t, "Accelerators": e.borrow_accelerators}
        for t, e in sorted(entries.items())
        if not isinstance(e, int) and e.borrow_accelerators is not None
    ]


def _task_governance(deal, team, pool):
    """HyperPod semantics that differ from the model (docs/hyperpod-eks.md)."""
    sharing = team.sharing
    changes = {
        "in_share_preemption": f"{deal.in_share_preemption} (PreemptTeamTasks {'LowerPriority' if sharing.in_share_preemption else 'Never'})"
    }
    if not pool.idle_resource_sharing:
        changes.update(
            max_with_borrowing=deal.guaranteed,
            lends_idle="no (idle resource sharing off on the cluster)",
            reclaimable="no (idle resource sharing off on the cluster)",
        )
    elif sharing.strategy is SharingStrategy.RESERVE:
        changes["lends_idle"] = "no (DontLend: HyperPod documents only that it does not lend)"
    return refined(deal, **changes)


BACKEND = Backend(
    name=HYPERPOD_EKS,
    package=__name__,
    pool=HyperPodEksPool,
    exports={"pool": ("HyperPodEksPool",), "construct": ("HyperPodEksGovernance", "HyperPodEksGovernanceProps")},
    instance_types=CLUSTER,
    family="hyperpod",
    quota_noun="HyperPod compute quota",
    max_quota_types=MAX_HYPERPOD_QUOTA_RESOURCES,
    # ComputeQuotaResourceConfig takes Accelerators, VCpu, MemoryInGiB and AcceleratorPartition
    # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ComputeQuotaResourceConfig.html).
    part_instance_quotas=True,
    # ResourceSharingConfig is Strategy, BorrowLimit and AbsoluteBorrowLimits only
    # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceSharingConfig.html)
    # and Kueue, not the reclaim controller, reclaims there.
    # No consumption limit in the API: the reclaim controller counts each team's GPU hours and deactivates its
    # compute quota at the limit (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateComputeQuota.html, ActivationState).
    gpu_hour_switch="compute_quota",
    # ComputeQuotaTarget is TeamName and FairShareWeight only
    # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ComputeQuotaTarget.html).
    group_caveat="a HyperPod compute quota targets one team (ComputeQuotaTarget: TeamName, FairShareWeight) and Kueue, not the reclaim controller, schedules there",
    lending_limit_caveat="not enforced {where}: HyperPod compute quotas have no lending limit and Kueue, not the reclaim controller, schedules there; "
    "the team lends all of its idle quota there",
    # SchedulerConfig is PriorityClasses, FairShare and IdleResourceSharing, ComputeQuotaConfig ComputeQuotaResources,
    # ResourceSharingConfig and PreemptTeamTasks (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_SchedulerConfig.html,
    # https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ComputeQuotaConfig.html): no run time
    # [aws: hyperpod.no-run-time-setting].
    # The team's admission policy requires activeDeadlineSeconds, at most the limit, where Kubernetes stops the
    # whole workload at it (constructs_lib/tenancy/run_time.py, ACTIVE_DEADLINE); the other kinds have no such field.
    max_run_caveat="not enforced {where} for a HyperPodPyTorchJob, a JobSet, a Deployment or a StatefulSet: task "
    "governance has no run-time setting and those kinds no deadline that stops the whole workload; the team's Jobs, "
    "CronJobs, pods and Kubeflow jobs must declare activeDeadlineSeconds at most their limit",
    max_run_held_for="Jobs, CronJobs, pods and Kubeflow jobs",
    user_limit_caveat="not enforced {where}: task governance and Kueue count the team's namespace as one (its compute "
    "quota, its ClusterQueue), a Kubernetes ResourceQuota limits a namespace and never a user, and every member acts "
    "in the team's group; one member may use the team's whole quota",
    refine_deal=_task_governance,
    # BorrowLimit: a percent, 1 to 500 (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceSharingConfig.html).
    bounds_borrow_limit=True,
    kubernetes_tenancy=True,
    window_feeds=(CONSUMER_HYPERPOD_INSTANCE_GROUP,),
    team_resources=7,
    shared_resources=11,
    reclaim_dashboard_widgets=6,
    pending_unit="workloads",  # Kueue's waiting workloads, not instances
    preemptions_seen=False,  # Kueue preempts natively; the reclaim controller only observes usage
    guarantee_recorded=False,  # ClusterQueues count waiting workloads: neither their size nor their age
    eks_access_entries=True,
    team_pod_role=True,
    submission_policy=True,
    quota_raises={CONSUMER_HYPERPOD_INSTANCE_GROUP: ("sagemaker:UpdateComputeQuota",)},
    member_tool="hyperpod_eks",
    stack_attribute="hyperpod_eks_clusters",
)
