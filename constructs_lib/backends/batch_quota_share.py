"""AWS Batch quota-share job queues for SageMaker training jobs."""

from __future__ import annotations

from typing import Any

from gpu_governance_runtime.contract import BATCH_QUOTA_SHARE, CONSUMER_SAGEMAKER_TRAINING_JOBS

from .base import TRAINING, Backend

MAX_SHARES_PER_QUOTA_QUEUE = 20  # AWS Batch: quota shares per job queue
MAX_LIMITS_PER_QUOTA_SHARE = 5  # AWS Batch: capacity limits per quota share
# How Batch says "borrows without limit" (the governance file's "unlimited", the policy document's
# null): https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaShareResourceSharingConfiguration.html
UNLIMITED_BORROW_LIMIT = -1

# Quota shares the reclaim controller may switch at a GPU-hour limit, named one by one up to this
# many; beyond, each queue's quota-share/* (a queue holds at most 20 shares), so the policy stays
# within IAM's inline size however many teams have a limit.
MAX_NAMED_QUOTA_SHARES = 40


def limited_quota_shares(queues: dict[str, str], model: Any) -> list[str]:
    """The quota-share ARNs (or ARN patterns) the reclaim controller may switch: ``queues`` maps a
    ``batch_quota_share`` pool to its job queue ARN (a token in a stack)."""
    limited = {pool: [t.name for t in model.teams_in(pool) if t.gpu_hour_limit] for pool in sorted(queues)}
    if sum(len(teams) for teams in limited.values()) <= MAX_NAMED_QUOTA_SHARES:
        return [f"{queues[pool]}/quota-share/{team}" for pool, teams in limited.items() for team in teams]
    return [f"{queues[pool]}/quota-share/*" for pool, teams in limited.items() if teams]


BACKEND = Backend(
    name=BATCH_QUOTA_SHARE,
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
    audit_workload="constructs_lib.organisation.audit:quota_share_place",
    discovery="constructs_lib.member.discovery:quota_share_keys",
    status_reader="constructs_lib.cli.status:read_batch",
    member_tool="batch",
    submit_example="constructs_lib.cli.member:batch_example",
    construct="constructs_lib.batch.queues:build_quota_share_pool",
    stack_attribute="queues",
)
