"""SageMaker HyperPod on EKS: Kueue reclaims natively; the reclaim controller only reads the
teams' usage from the cluster and switches a team's compute quota at its GPU-hour limit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...contract import CONSUMER_HYPERPOD_INSTANCE_GROUP, HYPERPOD_EKS, hyperpod_cluster_queue
from ..base import Backend, GpuHourLimits, ReclaimClients, Target, kueue_observer, kueue_rows

if TYPE_CHECKING:
    from .gpu_hours import ComputeQuotaSwitch


def _switch(clients: ReclaimClients, target: Target, team: str) -> ComputeQuotaSwitch:
    from .gpu_hours import ComputeQuotaSwitch

    return ComputeQuotaSwitch(clients.sagemaker, target["cluster_arn"], team)


BACKEND = Backend(
    name=HYPERPOD_EKS,
    # Task governance's Kueue preempts borrowers itself: a borrowed pod is evicted when the lender reclaims
    # (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-model-deployment-task-gov.html).
    observe_usage=kueue_observer(hyperpod_cluster_queue),
    why_no_adapter="HyperPod EKS reclaims natively (Kueue)",
    # No consumption limit in the API: the reclaim controller deactivates the team's compute quota at its limit
    # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateComputeQuota.html, ActivationState).
    gpu_hour_limits=GpuHourLimits(
        switch=_switch,
        in_use=kueue_rows,
        pool_gpus=lambda target: target["gpus_per_instance"],
    ),
    quota_raised_by=CONSUMER_HYPERPOD_INSTANCE_GROUP,
)
