"""AWS Batch fair-share job queues on EC2 or EKS compute environments."""

from __future__ import annotations

from gpu_governance_runtime.contract import BATCH_FAIR_SHARE

from ..base import EC2, Backend, refined
from .pool import BatchFairSharePool

# AWS Batch: "There can be no more than 500 fair share identifiers active in a job queue"; each
# team of a fair-share pool is one share identifier
# (https://docs.aws.amazon.com/batch/latest/APIReference/API_ShareAttributes.html).
MAX_SHARES_PER_FAIR_SHARE_QUEUE = 500


def _never_preempts(deal, team, pool):
    return refined(deal, in_share_preemption="no (Batch fair share never preempts)")


BACKEND = Backend(
    name=BATCH_FAIR_SHARE,
    package=__name__,
    pool=BatchFairSharePool,
    exports={"pool": ("BatchFairSharePool",), "construct": ("FairShareJobQueue", "FairShareJobQueueProps")},
    instance_types=EC2,
    family="batch",
    reclaim_plans=True,
    natively_preempts=False,
    gpu_hour_limit_caveat="a fair-share queue has no consumption limit nor a per-share state, and Batch, not the reclaim controller, starts jobs there",
    lending_limit_caveat="{where} Batch may start borrowers on the part held back; the reclaim controller takes it back as soon as the team's job waits for it",
    paused_caveat="not enforced {where}: a fair-share queue has no per-share state and Batch, not the reclaim controller, starts jobs there; the team's jobs still start",
    # No max_run_caveat: Batch stops a job at its own timeout, which whoever submits it sets [aws: batch.job-timeout],
    # so the reclaim controller stops a job of a limited team at its limit, after a notice (reclaim/run_time.py).
    # Shares are by share identifier (https://docs.aws.amazon.com/batch/latest/APIReference/API_ShareAttributes.html).
    user_limit_caveat="not enforced {where}: Batch fair share schedules by share identifier (the team), and who "
    "submitted a job is no scheduling dimension there; one member may use the team's whole share",
    # Batch starts the jobs, by its own decayed usage (the queue's shareDecaySeconds):
    # https://docs.aws.amazon.com/batch/latest/userguide/fair-share-scheduling.html
    fair_share_caveat="by usage orders the teams a reclaim takes from {where}; Batch, not the reclaim controller, starts jobs "
    "there, in its own fair-share order, which decays usage over the pool's share_decay_seconds",
    # Share identifiers are flat (https://docs.aws.amazon.com/batch/latest/APIReference/API_ShareAttributes.html).
    group_tree="the reclaim controller's planner (fair-share identifiers are flat: Batch has no level above the team); "
    "in dry_run it only records what it would do",
    refine_deal=_never_preempts,
    max_teams_per_pool=MAX_SHARES_PER_FAIR_SHARE_QUEUE,
    too_many_teams="too many teams (fair-share identifiers) on pool {pool}'s Batch job queue",
    too_many_teams_advice=" (AWS Batch's active share identifiers per job queue): split the teams over more fair-share pools",
    team_resources=3,
    shared_resources=4,
    reclaim_dashboard_widgets=8,
    submission_policy=True,
    reclaim_terminates_jobs=True,
    # The queue's fair-share policy lists each team's share (its share distribution); measured.
    template_bytes_per_team=80,
    stack_attribute="queues",
)
