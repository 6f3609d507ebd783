"""The observer of an AWS Batch quota-share queue: observe only. Batch reclaims and preempts
natively there; the controller only publishes metrics (and counts the teams' GPU hours)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from ...common import log
from ...common.action_ledger import Ledger
from ...common.batch_jobs import job_id_of, service_job_size, service_job_time_limit
from ...planners.reclaim import PendingJob, PoolState, Preemption, RunningJob, Start
from ...policy import PoolPolicy
from ..base import ActionResult, pool_state, unrecorded


class BatchQuotaShareObserver:
    """Reads use per share from the queue snapshot and each share's waiting work from
    ``ListServiceJobs`` (RUNNABLE, filtered by quota share), so ``Pending`` and
    ``StarvedBelowGuarantee`` are real; Batch reclaims and preempts natively on these queues, and
    its preemptions are read back from the service jobs' ``preemptionSummary``: a listed job that
    started before and waits again is described (a few per share and tick) and its preempted
    attempts that stopped during the last tick count (``preemptions_seen``).

    A share's listing can lag or fail where the snapshot did not: its front job
    (``frontOfQuotaShares``) is then counted as waiting, so one throttled listing neither hides a
    starved share nor breaks its alarm's run of ticks (missing data does not breach)."""

    acts = False
    reroutes_borrowers = False
    usage_from_queue = True
    action_seconds = 15.0

    def __init__(self, batch: Any, *, job_queue: str, pool: PoolPolicy, tick_seconds: float = 60.0):
        self.batch, self.job_queue, self.pool, self.tick_seconds = batch, job_queue, pool, tick_seconds
        self.preemptions_seen: dict[str, int] = {}

    def read(self, now: float) -> PoolState:
        self.preemptions_seen = {}
        # use per share and each share's first waiting job [aws: batch.job-queue-snapshot-quota-shares]
        snapshot = self.batch.get_job_queue_snapshot(jobQueue=self.job_queue)
        utilization = (
            snapshot.get("queueUtilization", {}).get("quotaShareUtilization", {}).get("topCapacityUtilization", [])
        )
        fronts = snapshot.get("frontOfQuotaShares", {}).get("quotaShares", {})
        shares = {s.name for s in self.pool.shares}
        running = []
        for entry in utilization:
            if entry["quotaShareName"] not in shares:
                continue
            for usage in entry.get("capacityUsage", []):
                if usage["capacityUnit"] in self.pool.capacity and usage["quantity"] >= 1:
                    # the snapshot gives totals, not jobs: one aggregate "job" per share and type
                    running.append(
                        RunningJob(
                            job_id=f"{entry['quotaShareName']}/{usage['capacityUnit']}",
                            share=entry["quotaShareName"],
                            instance_type=usage["capacityUnit"],
                            count=int(usage["quantity"]),
                            priority=0,
                            started_at=now,
                        )
                    )
        pending = []
        for share in sorted(shares):
            jobs = self._runnable(share)
            front_ids = [job_id_of(f["jobArn"]) for f in fronts.get(share, []) if f.get("jobArn")]
            listed = {j["jobId"] for j in jobs}
            # listing behind the snapshot (or failed): the front job is waiting all the same
            jobs = [self.batch.describe_service_job(jobId=i) for i in front_ids if i not in listed] + sorted(
                jobs, key=lambda j: (j["jobId"] not in front_ids, j.get("createdAt", 0))
            )
            described = requeued = 0
            for job in jobs:
                if "preemptionSummary" not in job and job.get("startedAt") and requeued < DESCRIBED_PER_SHARE:
                    # ran before and waits again: preempted (or retried); its summary says which
                    job, requeued = self.batch.describe_service_job(jobId=job["jobId"]), requeued + 1
                seen = preemptions_between(job, now - self.tick_seconds, now)
                if seen:
                    self.preemptions_seen[share] = self.preemptions_seen.get(share, 0) + seen
                size = service_job_size(job, self.pool.capacity)
                if (
                    size is None
                    and not job.get("capacityUsage")
                    and "serviceRequestPayload" not in job
                    and described < DESCRIBED_PER_SHARE
                ):
                    # a listing that gives no size: the job's request says it (front and oldest first, a few per tick)
                    job, described = self.batch.describe_service_job(jobId=job["jobId"]), described + 1
                    size = service_job_size(job, self.pool.capacity)
                if size is not None:
                    # ListServiceJobs has no priority; the metrics this observer feeds do not use it
                    pending.append(
                        PendingJob(
                            job_id=job["jobId"],
                            share=share,
                            instance_type=size[0],
                            count=size[1],
                            priority=0,
                            submitted_at=job.get("createdAt", now * 1000) / 1000,
                            max_run_time_s=service_job_time_limit(job),
                        )
                    )
        return pool_state(self.pool, running, pending, now)

    def _runnable(self, share: str) -> list[dict]:
        """The share's RUNNABLE jobs, each once: newest first, so a job submitted while paging
        pushes older ones onto the next page and one can be listed twice. A listing that fails
        part-way (throttled past the client's retries) gives what was read."""
        jobs: dict[str, dict] = {}
        pages = self.batch.get_paginator("list_service_jobs").paginate(  # [aws: batch.list-service-jobs-by-share]
            jobQueue=self.job_queue, jobStatus="RUNNABLE", filters=[{"name": "QUOTA_SHARE_NAME", "values": [share]}]
        )
        try:
            for page in pages:
                for summary in page["jobSummaryList"]:
                    if summary.get("quotaShareName", share) == share:
                        jobs.setdefault(summary["jobId"], summary)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in THROTTLING_CODES:
                raise
            log.write(
                {
                    "event": "listing_incomplete",
                    "queue": self.job_queue,
                    "share": share,
                    "read": len(jobs),
                    "error": str(error),
                }
            )
        return list(jobs.values())

    def preempt(self, preemption: Preemption, progress: Callable[..., None] = unrecorded) -> ActionResult:
        raise RuntimeError("quota-share queues are observed only")

    def resume(self, ledger: Ledger, now: float) -> list[ActionResult]:
        return []

    def start(self, start: Start, progress: Callable[..., None] = unrecorded) -> ActionResult:
        raise RuntimeError("quota-share queues are observed only")

    def attempt_of(self, job_id: str) -> str:
        return "0"


# Listed jobs without a size described per share and tick: bounds the calls within action_seconds;
# the front and oldest come first, and starvation needs only one waiting job that fits.
DESCRIBED_PER_SHARE = 10
# Errors after which a partial listing is still worth using: the service asked us to slow down.
THROTTLING_CODES = frozenset({"TooManyRequestsException", "ThrottlingException", "Throttling"})


def preemptions_between(job: Mapping[str, Any], since: float, until: float) -> int:
    """Preempted attempts of a described service job that stopped in (since, until] (seconds;
    the service gives milliseconds). Batch keeps the most recent ones in ``preemptionSummary``
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_DescribeServiceJob.html)."""
    attempts = (job.get("preemptionSummary") or {}).get("recentPreemptedAttempts") or ()
    return sum(1 for attempt in attempts if since < (attempt.get("stoppedAt") or 0) / 1000 <= until)
