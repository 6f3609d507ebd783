"""AWS Batch: the quota-share job queue for SageMaker training jobs and the fair-share queue
on EC2 or EKS compute environments."""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from .queues import (
        TEAM_TAG,
        FairShareJobQueue,
        FairShareJobQueueProps,
        QuotaManagedTrainingQueue,
        QuotaManagedTrainingQueueProps,
        fair_share_weight_factor,
    )

__all__ = [
    "TEAM_TAG",
    "FairShareJobQueue",
    "FairShareJobQueueProps",
    "QuotaManagedTrainingQueue",
    "QuotaManagedTrainingQueueProps",
    "fair_share_weight_factor",
]
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "queues"))
