"""AWS Batch: the quota-share job queue for SageMaker training jobs and the fair-share queue
on EC2 or EKS compute environments."""

from .queues import TEAM_TAG, FairShareJobQueue, QuotaManagedTrainingQueue, fair_share_weight_factor

__all__ = ["TEAM_TAG", "FairShareJobQueue", "QuotaManagedTrainingQueue", "fair_share_weight_factor"]
