"""Batch quota shares (register section ``batch.*``): what a DISABLED share does to a job already
queued in it (row ``batch.quota-share-disabled``). The page says "new jobs won't be accepted but
jobs already submitted can finish"; the controllers no longer rely on DISABLED holding queued jobs
(at a GPU-hour limit or a pause the reclaim controller terminates them itself), and this shows
what Batch does.

It changes the sandbox's share: the caller needs ``batch:DescribeJobQueues``,
``batch:DescribeQuotaShare`` and ``batch:UpdateQuotaShare``, and the share's state is put back by
an undo step, whatever happens.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from ..framework import Cleanup, Context, Probe, Verdict, failed, inconclusive, passed
from ._batch import (
    OPTIONS as BATCH_OPTIONS,
    STARTED,
    SUBMITS,
    as_team_a,
    cost_of_service_jobs,
    denied,
    refused,
    submit_own,
    until_started_or_failed,
)

OPTIONS = BATCH_OPTIONS


def _share_arn(context: Context, team: str) -> str:
    (queue,) = context.client("batch", None).describe_job_queues(jobQueues=[context.args.queue])["jobQueues"]
    return f"{queue['jobQueueArn']}/quota-share/{team}"


def disabled_share_queued_job(context: Context, cleanup: Cleanup) -> Verdict:
    """A job of A's queued, then A's share DISABLED: does the job still start, and is a new one refused?"""
    a = context.args.team_a
    admin, as_a = context.client("batch", None), as_team_a(context)

    try:
        share = _share_arn(context, a)
        was = admin.describe_quota_share(quotaShareArn=share)["state"]
    except ClientError as error:
        return inconclusive(f"could not read share {a}: {error}")
    if was != "ENABLED":
        return inconclusive(f"share {a} was {was} before the probe: a queued job proves nothing")
    # Registered before anything changes, so it runs last (after the jobs are terminated), and
    # also when the update's answer is lost after the share changed.
    cleanup.add(f"set share {a} ENABLED again", lambda: admin.update_quota_share(quotaShareArn=share, state="ENABLED"))
    try:
        queued = submit_own(context, cleanup, as_a, "verify-live-queued")
        admin.update_quota_share(quotaShareArn=share, state="DISABLED")
    except ClientError as error:
        return inconclusive(f"could not queue a job and disable share {a}: {error}")
    status = admin.describe_service_job(jobId=queued)["status"]
    if status in STARTED:
        return inconclusive(f"job {queued} was {status} before the share was disabled")
    try:
        late = submit_own(context, cleanup, as_a, "verify-live-late")
    except ClientError as error:
        if denied(error) or not refused(error):
            return inconclusive(f"a new submission failed for another reason: {error}")
        late = None
    job = until_started_or_failed(context, as_a, queued)
    if late is not None:
        return failed(f"the DISABLED share accepted a new job ({late}, terminated)")
    if job.get("status") in STARTED:
        return passed(
            f"the queued job {queued} reached {job['status']} in the DISABLED share (terminated); a new one was refused"
        )
    if job.get("status") == "FAILED":
        return inconclusive(f"the queued job failed: {job.get('statusReason', '')}")
    return failed(
        f"the queued job {queued} was still {job.get('status', '?')} at the timeout: Batch held it in the DISABLED share"
        " (the register row says it starts; harmless to the controllers, but the row must change)"
    )


PROBES = [
    Probe(
        name="disabled-share-queued-job",
        row="batch.quota-share-disabled",
        does=(
            "as team A's submission role, queues one job in A's share; as the caller sets the share DISABLED, submits "
            "one more as A, and waits for the first; sets the share back as it was"
        ),
        passes_when="the queued job starts and the new one is refused, as the UpdateQuotaShare page says",
        needs=SUBMITS,
        cost=cost_of_service_jobs(2, started=True),
        run=disabled_share_queued_job,
    )
]
