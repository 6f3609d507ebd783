"""AWS Batch quota-share job queues for SageMaker training jobs."""

from __future__ import annotations

from gpu_governance_runtime.contract import BATCH_QUOTA_SHARE, CONSUMER_SAGEMAKER_TRAINING_JOBS

from ..base import TRAINING, Backend
from .pool import BatchQuotaSharePool

MAX_SHARES_PER_QUOTA_QUEUE = 20  # AWS Batch: quota shares per job queue
MAX_LIMITS_PER_QUOTA_SHARE = 5  # AWS Batch: capacity limits per quota share
BACKEND = Backend(
    name=BATCH_QUOTA_SHARE,
    package=__name__,
    pool=BatchQuotaSharePool,
    exports={
        "pool": ("BatchQuotaSharePool",),
        "construct": ("QuotaManagedTrainingQueue", "QuotaManagedTrainingQueueProps"),
    },
    instance_types=TRAINING,
    family="batch",
    quota_noun="Batch quota share",
    max_quota_types=MAX_LIMITS_PER_QUOTA_SHARE,
    # Quota-share queues assign idle capacity FIFO, the only strategy
    # (https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaSharePolicy.html).
    weighs_teams=False,
    # ResourceSharingConfiguration is Strategy and BorrowLimit only
    # (https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaShareResourceSharingConfiguration.html)
    # and the reclaim controller only observes these queues.
    # Batch preempts quota-share jobs itself, with no grace: a quota share's preemption setting is
    # inSharePreemption alone (https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaSharePreemptionConfiguration.html).
    grace_caveat="not enforced {where}: Batch preempts quota-share jobs itself, at once, with no grace setting, and the reclaim controller "
    "only observes them; only `simulate` applies it",
    fair_share_caveat="by usage is not applied {where}: the reclaim controller only observes a quota-share queue, whose own "
    "order decides who borrows and who is reclaimed; `simulate` replays the order all the same",
    # No consumption limit in the API: the reclaim controller counts each team's GPU hours and disables its
    # quota share at the limit (https://docs.aws.amazon.com/batch/latest/APIReference/API_UpdateQuotaShare.html, state).
    gpu_hour_switch="quota_share",
    # CreateQuotaShare: capacityLimits, resourceSharingConfiguration, preemptionConfiguration, state; nothing above the share
    # (https://docs.aws.amazon.com/batch/latest/APIReference/API_CreateQuotaShare.html).
    group_caveat="a Batch quota share has no level above it and the reclaim controller only observes quota-share queues",
    lending_limit_caveat="not enforced {where}: Batch quota shares have no lending limit and the reclaim controller only observes them; "
    "the team lends all of its idle quota there",
    # A quota share is the team's (https://docs.aws.amazon.com/batch/latest/APIReference/API_CreateQuotaShare.html).
    user_limit_caveat="not enforced {where}: Batch schedules a quota-share queue by quota share (the team), and who "
    "submitted a job is no scheduling dimension there; one member may use the team's whole share",
    max_teams_per_pool=MAX_SHARES_PER_QUOTA_QUEUE,
    too_many_teams="too many teams (quota shares) on one Batch job queue",
    window_feeds=(CONSUMER_SAGEMAKER_TRAINING_JOBS,),
    team_resources=4,
    shared_resources=5,
    reclaim_dashboard_widgets=8,
    guards_submissions=True,
    submission_policy=True,
    reclaim_reads_snapshot=True,
    quota_raises={CONSUMER_SAGEMAKER_TRAINING_JOBS: ("batch:UpdateQuotaShare", "batch:UpdateServiceEnvironment")},
    member_tool="batch",
    stack_attribute="queues",
)
