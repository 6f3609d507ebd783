"""Backends the reclaim controller reads and acts on. Each adapter turns a backend's queue into
the planner's :class:`PoolState` and carries out preemptions; none of them decides anything.

* :class:`BatchFairShareAdapter` - AWS Batch fair-share job queue on EC2/EKS compute
  environments. Batch never preempts there, so the controller terminates victims with a reason
  and submits each one's copy, exactly once (``common/batch_copy.py``: Batch does not retry a
  terminated job). A victim it cannot bring back as it was (an array child, a job others depend
  on) or whose instance type it cannot tell is stopped for good, its reason saying why
  (docs/reclaim.md, *Jobs that cannot come back*).
* :class:`SlurmAdapter` - SageMaker HyperPod Slurm, through SSM Run Command on the head node:
  reads ``squeue``, requeues victims (``scontrol requeue``) and re-routes borrowing starts to
  the shared ``borrow`` partition under the team's borrow QoS (the mapping in
  ``gpu_governance_runtime.slurm.plan``). Own-capacity starts are left to Slurm's scheduler.
* :class:`BatchQuotaShareObserver` - AWS Batch quota-share queue: observe only. Batch reclaims
  and preempts natively there; the controller only publishes metrics.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import re
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from botocore.exceptions import ClientError

from ..common import log
from ..common.batch_copy import (
    REASON_PREFIX,
    SubmitRefused,
    copy_request,
    describe,
    restartable,
    stopped_by_us,
    submit_once,
    times_stopped,
)
from ..contract import TAG_CHECKPOINTABLE, TAG_INSTANCE_TYPE
from ..policy import Policy, PoolPolicy
from ..slurm.plan import BORROW_PARTITION, borrow_qos_name
from ..slurm.ssm import FINAL_STATUSES, SLURM_JOB_ID, SLURM_NAME, CommandAbandoned, HeadNode, checked, if_unchanged
from .ledger import (
    ABANDONED,
    CLAIMED,
    DONE,
    FAILED,
    FUNCTION_TIMEOUT_SECONDS,
    SKIPPED,
    SUBMITTING,
    TERMINATED,
    TERMINATING,
    ActionKey,
    Ledger,
)
from .planner import ANY_TYPE, PendingJob, PoolState, Preemption, RunningJob, Start

# Longest wait for one SSM command's result; with the read and one action, within the function's
# timeout (reclaim.ledger.FUNCTION_TIMEOUT_SECONDS).
SSM_WAIT_SECONDS = 20.0


@dataclass(frozen=True, kw_only=True)
class ActionResult:
    job_id: str
    # "done", "skipped" (finished meanwhile or no longer as planned), "failed"; for a stopped job
    # not yet back: "terminated" (its copy is still to be submitted) or "submitting" (a copy may be
    # in flight); the next tick finishes it (``resume``)
    outcome: str
    detail: str = ""
    copy: str | None = None  # the job submitted in the stopped one's place


def _unrecorded(status: str, **fields: Any) -> None:
    """Progress of an action nobody records (tests, dry runs)."""


class Adapter(Protocol):
    acts: bool  # False: observe and publish metrics only
    reroutes_borrowers: bool  # True: a borrowing start needs an action (Slurm partition/QoS)
    # True: each tick's usage metrics come from the queue read; False: from the backend's own
    # accounting (Slurm: reclaim.slurm_usage, hourly), which would otherwise be counted twice
    usage_from_queue: bool
    action_seconds: float  # the longest one read or action can take: none starts with less time left
    # share -> preemptions the backend itself made over the last tick, as read by ``read``; the
    # controller's own preemptions are counted from its plan
    preemptions_seen: Mapping[str, int]

    def read(self, now: float) -> PoolState: ...

    # ``progress(status, **fields)`` records a step of the preemption in the ledger as it happens
    def preempt(self, preemption: Preemption, progress: Callable[..., None] = _unrecorded) -> ActionResult: ...

    def resume(self, ledger: Ledger, now: float) -> list[ActionResult]:
        """Finish the pool's preemptions an earlier tick left open (``Ledger.open_actions``)."""
        ...

    def start(self, start: Start, progress: Callable[..., None] = _unrecorded) -> ActionResult: ...

    def attempt_of(self, job_id: str) -> str: ...


# --- AWS Batch fair share -----------------------------------------------------------------------


# https://docs.aws.amazon.com/batch/latest/userguide/job_states.html: a job moves only forward.
LIFECYCLE = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED")
LISTED_STATUSES = ("STARTING", "RUNNING", "RUNNABLE", "PENDING")
# An array job's children hold its instances; its parent stays PENDING meanwhile [aws: batch.array-jobs].
CHILD_STATUSES = ("STARTING", "RUNNING", "RUNNABLE")


class BatchFairShareAdapter:
    acts = True
    reroutes_borrowers = False  # Batch's scheduler starts jobs once capacity is free
    usage_from_queue = True
    preemptions_seen: Mapping[str, int] = {}  # Batch fair share never preempts
    # DescribeJobs + TerminateJob + the copy's ListJobs, DescribeJobs and one SubmitJob, with the
    # handler's client timeouts (WITHIN_A_TICK, SUBMIT_ONCE)
    action_seconds = 30.0

    def __init__(self, batch: Any, *, job_queue: str, pool: PoolPolicy, submit: Any):
        """``submit``: the client of the copies' SubmitJob, sending one request (``clients.SUBMIT_ONCE``)."""
        self.batch, self.job_queue, self.pool, self.submit = batch, job_queue, pool, submit
        self._jobs: dict[str, dict] = {}
        self._waited_on: set[str] = set()
        self._unplaced: set[str] = set()  # jobs read as ANY_TYPE
        self._now = 0.0

    def read(self, now: float) -> PoolState:
        shares = {s.name for s in self.pool.shares}
        running, pending = [], []
        self._jobs, self._unplaced, self._now = {}, set(), now
        jobs = self._current(LISTED_STATUSES)
        jobs += self._array_children(jobs)
        # Jobs waiting on others (PENDING) name them in dependsOn: those cannot be brought back as they were.
        self._waited_on = {d["jobId"] for job in jobs if job["status"] == "PENDING" for d in job.get("dependsOn", [])}
        for job in jobs:
            if job["status"] == "PENDING" or job.get("shareIdentifier") not in shares:
                continue  # not a governed team's job: never touched
            fields = self._fields(job, running=job["status"] != "RUNNABLE")
            if fields is None:
                continue
            self._jobs[job["jobId"]] = job
            if fields["instance_type"] == ANY_TYPE:
                self._unplaced.add(job["jobId"])
            if job["status"] == "RUNNABLE":
                pending.append(PendingJob(submitted_at=job["createdAt"] / 1000, **fields))
            else:
                running.append(RunningJob(started_at=job.get("startedAt", job["createdAt"]) / 1000, **fields))
        return PoolState(
            capacity=self.pool.capacity,
            shares=self.pool.shares,
            running=tuple(running),
            pending=tuple(pending),
            now=now,
            groups=self.pool.groups,
        )

    def _current(self, statuses: Iterable[str]) -> list[dict]:
        """Each job listed under one of ``statuses``, once, as DescribeJobs has it now. Listings
        are read one status after another while jobs move on, so one job can be listed under two
        states (RUNNABLE, then STARTING a moment later): the later state wins. A job that left
        ``statuses`` between the listing and the description (it ended) is dropped."""
        ids = list(dict.fromkeys(job_id for status in statuses for job_id in self._list(status)))
        latest: dict[str, dict] = {}
        for job in describe(self.batch, ids):
            seen = latest.get(job["jobId"])
            if seen is None or LIFECYCLE.index(job.get("status", "SUBMITTED")) >= LIFECYCLE.index(
                seen.get("status", "SUBMITTED")
            ):
                latest[job["jobId"]] = job
        return [job for _, job in sorted(latest.items()) if job.get("status") in statuses]

    def _list(self, status: str, **selector: str) -> list[str]:
        """Ids of the queue's jobs of ``status``, or with ``arrayJobId=...`` that array's children."""
        ids = []
        for page in self.batch.get_paginator("list_jobs").paginate(
            **(selector or {"jobQueue": self.job_queue}), jobStatus=status
        ):
            ids += [summary["jobId"] for summary in page["jobSummaryList"]]
        return ids

    def _array_children(self, jobs: list[dict]) -> list[dict]:
        """The waiting and running children of the array jobs among ``jobs`` not among them yet,
        as DescribeJobs has them. A parent never runs: its children hold the instances, and no
        page says whether ListJobs by queue lists them, so they are listed by their parent as well
        (the statuses its ``statusSummary`` counts, or all when it has none) and each is read once
        [aws: batch.array-children-listing]. A child (id ``<parent>:<index>``, [aws: batch.array-jobs])
        lacking its parent's share or tags, however it was listed, takes them [aws: batch.array-child-fields]."""
        parents = {
            job["jobId"]: job
            for job in jobs
            if job["status"] == "PENDING" and "size" in (job.get("arrayProperties") or {})
        }
        listed = {
            child
            for parent_id, parent in parents.items()
            for status in CHILD_STATUSES
            if parent["arrayProperties"].get("statusSummary") is None
            or parent["arrayProperties"]["statusSummary"].get(status)
            for child in self._list(status, arrayJobId=parent_id)
        } - {job["jobId"] for job in jobs}
        children = [c for c in describe(self.batch, sorted(listed)) if c.get("status") in CHILD_STATUSES]
        for child in (*jobs, *children):
            parent = parents.get(child["jobId"].rpartition(":")[0])
            if parent is not None:
                child.setdefault("shareIdentifier", parent.get("shareIdentifier"))
                child.setdefault("tags", parent.get("tags", {}))
        return children

    def _fields(self, job: dict, *, running: bool) -> dict | None:
        """What the job holds, from what Batch reports about it, never from its owner's tags:
        instances = the nodes of a multi-node job (``nodeProperties.numNodes``, overrides
        applied), else 1; the instance type a multi-node job names for its nodes, else the pool's
        only type. In a pool of several types a single-node job names none (Batch places it on any
        type its compute environments have), so there the ``gpu-governance:instance-type`` tag is
        read as a hint, and only when it names one of the pool's types. A running job without one
        is of ``ANY_TYPE``: the planner counts it on every type, as the first to reclaim, so
        leaving the tag out hides no borrowing (issue 38). ``gpu-governance:checkpointable`` = true
        can only make the job a cheaper victim. A malformed tag is ignored with a log line.
        None: a waiting job whose type is unknown, which cannot be planned."""
        tags = job.get("tags", {})
        instance_type = self._instance_type(job, tags, running=running)
        if instance_type is None:
            log.write(
                {
                    "event": "job_not_planned",
                    "pool": self.pool.name,
                    "job_id": job["jobId"],
                    "reason": f"in a pool of {sorted(self.pool.capacity)} the job names no instance type",
                }
            )
            return None
        checkpointable = tags.get(TAG_CHECKPOINTABLE, "false").lower()
        if checkpointable not in ("true", "false"):
            _ignored_tag(job, TAG_CHECKPOINTABLE, "true or false")
        return dict(
            job_id=job["jobId"],
            share=job["shareIdentifier"],
            instance_type=instance_type,
            count=int(job.get("nodeProperties", {}).get("numNodes", 1)),
            priority=int(job.get("schedulingPriority", 0)),
            checkpointable=checkpointable == "true",
            # the controllers' stops along the job's chain of copies (the platform's tag,
            # batch_copy.times_stopped): the planner's protection and re-borrow backoff. Attempts
            # the job failed itself (its retry strategy) are its owner's: they protect nothing.
            times_preempted=times_stopped(job),
            max_run_time_s=_seconds(job.get("timeout", {}).get("attemptDurationSeconds")),  # Batch ends an attempt then
            restartable=restartable(job, self._waited_on) is None,
        )

    def _instance_type(self, job: dict, tags: Mapping[str, str], *, running: bool) -> str | None:
        """The type ``_fields`` plans the job on; None: not one the pool plans."""
        named = {
            c.get("container", {}).get("instanceType")
            for c in job.get("nodeProperties", {}).get("nodeRangeProperties", [])
        } - {None}
        named |= {job.get("container", {}).get("instanceType")} - {None}
        if len(named) == 1:
            (reported,) = named
            return (
                reported if reported in self.pool.capacity else None
            )  # a type the pool does not hold: not the pool's to plan
        if len(self.pool.capacity) == 1:
            return next(iter(self.pool.capacity))
        hint = tags.get(TAG_INSTANCE_TYPE)
        if hint is not None and hint not in self.pool.capacity:
            _ignored_tag(job, TAG_INSTANCE_TYPE, f"one of the pool's types {sorted(self.pool.capacity)}")
            hint = None
        return hint or (ANY_TYPE if running else None)

    def attempt_of(self, job_id: str) -> str:
        return str(len(self._jobs.get(job_id, {}).get("attempts", [])))

    def preempt(self, preemption: Preemption, progress: Callable[..., None] = _unrecorded) -> ActionResult:
        (current,) = self.batch.describe_jobs(jobs=[preemption.job_id])["jobs"] or ({},)
        if current.get("status") not in ("STARTING", "RUNNING") or self.attempt_of(preemption.job_id) != str(
            len(current.get("attempts", []))
        ):
            return ActionResult(
                job_id=preemption.job_id, outcome=SKIPPED, detail=f"now {current.get('status', 'gone')}"
            )
        for_good = self._not_brought_back(current)
        # Recorded before the call: an answer lost after Batch stopped the job (a timeout, a 5xx)
        # leaves the action open, and the next tick reads what happened (``resume``), and whether
        # a copy is owed.
        progress(TERMINATING, **({STOPPED_FOR_GOOD: for_good} if for_good else {}))
        reason = f"{REASON_PREFIX} {preemption.reason}" + (f" ({for_good})" if for_good else "")
        try:  # Batch keeps at most 1024 characters of reason: the owner reads it on the job
            self.batch.terminate_job(jobId=preemption.job_id, reason=reason[:1024])
        except ClientError as error:
            answer = error.response.get("ResponseMetadata", {})
            # A 5xx may follow a stop, and so may a refusal the SDK got after retrying: botocore reports the last
            # attempt's error only, and an earlier attempt whose answer was lost may have stopped the job. Either
            # leaves the action open (TERMINATING): the next tick reads the job and brings it back if it stopped.
            if answer.get("HTTPStatusCode", 400) >= 500 or answer.get("RetryAttempts", 0):
                raise
            return ActionResult(
                job_id=preemption.job_id, outcome=FAILED, detail=str(error)
            )  # refused at the first request (throttled): nothing stopped
        if for_good:
            return _stopped_for_good(preemption.job_id, for_good)
        progress(TERMINATED)
        return self._bring_back(current, None, progress)

    def _not_brought_back(self, job: dict) -> str | None:
        """Why ``job``, stopped, gets no copy (None: it does): it cannot be submitted again as it
        was (``batch_copy.restartable``), or its instance type is unknown in a pool of several
        types, which its copy's would be too. Such a job is reclaimable all the same (issue 38):
        its owner reads why in its status reason and resubmits it."""
        why = restartable(job, self._waited_on)
        if why is None and job["jobId"] in self._unplaced:
            why = (
                f"its instance type is unknown in a pool of several types: resubmit it with the tag {TAG_INSTANCE_TYPE}"
            )
        return why

    def _bring_back(self, job: dict, uncertain_since: float | None, progress: Callable[..., None]) -> ActionResult:
        try:
            copy = submit_once(
                batch=self.batch,
                submit=self.submit,
                request=copy_request(job),
                original=job["jobId"],
                uncertain_since=uncertain_since,
                now=self._now,
                submitting=lambda at: progress(SUBMITTING, submitting_at=int(at)),
            )
        except SubmitRefused as refused:
            progress(TERMINATED)  # nothing submitted: the next tick submits at once
            return ActionResult(job_id=job["jobId"], outcome=TERMINATED, detail=str(refused))
        if copy is None:
            return ActionResult(
                job_id=job["jobId"], outcome=SUBMITTING, detail="a copy may be in flight: looked for again next tick"
            )
        return ActionResult(job_id=job["jobId"], outcome=DONE, detail=f"requeued as {copy}", copy=copy)

    def resume(self, ledger: Ledger, now: float) -> list[ActionResult]:
        """Bring back each job an earlier tick stopped but did not see back: its copy is found or
        submitted (``submit_once``). An open claim whose job is still running (the tick died before
        terminating it) is closed as failed, so the planner decides afresh; one whose job ended on
        its own is closed as skipped. A claim younger than the function's timeout may still be
        acted on by a live invocation and is left alone."""
        self._now = now
        results = []
        for item in ledger.open_actions(self.pool.name):
            key = ActionKey(pool=item["pool"], job_id=item["job_id"], attempt=item["attempt"], action=item["action"])
            if item["status"] == CLAIMED and now - float(item["claimed_at"]) < FUNCTION_TIMEOUT_SECONDS:
                continue
            (job,) = self.batch.describe_jobs(jobs=[key.job_id])["jobs"] or ({},)

            def progress(status: str, _key: ActionKey = key, **fields: Any) -> None:
                ledger.record(_key, status=status, **fields)

            if item["status"] == DONE and item.get("new_job"):
                # Back already, only taking it off the open list was lost: the copy may not be listed yet, so
                # looking for it again could submit a second one.
                result = ActionResult(
                    job_id=key.job_id, outcome=DONE, detail=f"requeued as {item['new_job']}", copy=item["new_job"]
                )
            elif stopped_by_us(job) and item.get(STOPPED_FOR_GOOD):
                result = _stopped_for_good(key.job_id, item[STOPPED_FOR_GOOD])  # it owes no copy
            elif stopped_by_us(job):
                result = self._bring_back(
                    job, float(item["submitting_at"]) if item["status"] == SUBMITTING else None, progress
                )
            elif job.get("status") in LIFECYCLE[:5]:
                result = ActionResult(job_id=key.job_id, outcome=FAILED, detail=f"not stopped: now {job['status']}")
            else:
                result = ActionResult(
                    job_id=key.job_id, outcome=SKIPPED, detail=f"now {job.get('status', 'gone')}: ended on its own"
                )
            if result.outcome in (DONE, FAILED, SKIPPED):
                ledger.record(
                    key,
                    status=result.outcome,
                    detail=result.detail,
                    **({"new_job": result.copy} if result.copy else {}),
                )
                ledger.close(key)
            results.append(result)
        return results

    def start(self, start: Start, progress: Callable[..., None] = _unrecorded) -> ActionResult:
        raise RuntimeError("Batch starts fair-share jobs itself")


# The ledger field of a preemption whose victim gets no copy, and why (``_not_brought_back``).
STOPPED_FOR_GOOD = "stopped_for_good"


def _stopped_for_good(job_id: str, why: str) -> ActionResult:
    return ActionResult(job_id=job_id, outcome=DONE, detail=f"stopped for good, not requeued: {why}")


def _ignored_tag(job: dict, key: str, allowed: str) -> None:
    log.write(
        {
            "event": "tag_ignored",
            "job_id": job["jobId"],
            "tag": key,
            "value": job.get("tags", {}).get(key),
            "allowed": allowed,
        }
    )


# --- Batch quota share (observe only) -----------------------------------------------------------


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
        return PoolState(
            capacity=self.pool.capacity,
            shares=self.pool.shares,
            running=tuple(running),
            pending=tuple(pending),
            now=now,
            groups=self.pool.groups,
        )

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

    def preempt(self, preemption: Preemption, progress: Callable[..., None] = _unrecorded) -> ActionResult:
        raise RuntimeError("quota-share queues are observed only")

    def resume(self, ledger: Ledger, now: float) -> list[ActionResult]:
        return []

    def start(self, start: Start, progress: Callable[..., None] = _unrecorded) -> ActionResult:
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


def job_id_of(job_arn: str) -> str:
    """``arn:aws:batch:REGION:ACCOUNT:service-job/ID`` -> ``ID``."""
    return job_arn.rsplit("/", 1)[-1]


def service_job_usage(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(instance type, instances) a service job asks for: its ``capacityUsage`` when Batch gives
    one (for service jobs the unit is the instance type), else the training job request it
    carries (``DescribeServiceJob`` only); empty when the record says neither."""
    usage = [
        (u["capacityUnit"], int(u["quantity"])) for u in job.get("capacityUsage") or [] if u.get("quantity", 0) >= 1
    ]
    if not usage and job.get("serviceRequestPayload"):
        try:
            resources = json.loads(job["serviceRequestPayload"]).get("ResourceConfig", {})
            usage = [(resources["InstanceType"], int(resources.get("InstanceCount", 1)))]
        except (ValueError, KeyError, TypeError, AttributeError):
            usage = []
    return usage


def service_job_size(job: dict, capacity: Mapping[str, int]) -> tuple[str, int] | None:
    """The :func:`service_job_usage` of a type the pool holds; None when it asks for another type
    (Batch never runs it there)."""
    return next(((t, n) for t, n in service_job_usage(job) if t in capacity), None)


def service_job_time_limit(job: dict) -> float | None:
    """Seconds a service job may run at most (``DescribeServiceJob`` only; listings carry neither):
    the shorter of the Batch attempt timeout (``timeoutConfig``) and the training job's own
    ``StoppingCondition.MaxRuntimeInSeconds`` in its request; None when neither is given."""
    limits = [_seconds(job.get("timeoutConfig", {}).get("attemptDurationSeconds"))]
    with contextlib.suppress(ValueError, TypeError, AttributeError):  # an unreadable request declares nothing
        limits.append(
            _seconds(
                json.loads(job.get("serviceRequestPayload") or "{}")
                .get("StoppingCondition", {})
                .get("MaxRuntimeInSeconds")
            )
        )
    return min((limit for limit in limits if limit is not None), default=None)


def _seconds(value: Any) -> float | None:
    """A declared limit in seconds; None unless a positive whole number."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# --- Slurm on HyperPod through SSM ----------------------------------------------------------------

# One line per job (per array task with --array, so every id is one scontrol can name), fields
# '|'-separated and unpadded (size 0).
SQUEUE_FORMAT = "JobArrayID:0|,Account:0|,QOS:0|,State:0|,NumNodes:0|,StartTime:0|,SubmitTime:0|,RestartCnt:0|,TimeLimit:0|,Reason:0"
# SSM returns only the first 24,000 characters of output: this last line proves the queue was read whole.
END_OF_QUEUE = "gg-end-of-queue"
# Pending for these reasons a job cannot start however much capacity is free (held, waiting on
# another job or on its begin time; a requeued job waits about two minutes with BeginTime), so
# nothing is preempted or moved for it.
NOT_STARTABLE = frozenset({"JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied", "BeginTime"})


def squeue_command(accounts: Iterable[str]) -> str:
    """The queue of the governed accounts, times in UTC ISO format whatever the head node's time
    zone or ``SLURM_TIME_FORMAT``."""
    names = ",".join(checked(a, SLURM_NAME) for a in sorted(accounts))
    return (
        f"TZ=UTC SLURM_TIME_FORMAT=standard squeue --noheader --array --states=RUNNING,PENDING "
        f"--account={shlex.quote(names)} --Format='{SQUEUE_FORMAT}' && echo {END_OF_QUEUE}"
    )


class SlurmAdapter:
    acts = True
    reroutes_borrowers = True
    usage_from_queue = False
    preemptions_seen: Mapping[str, int] = {}  # not read yet: Slurm's own QoS preemptions (docs/reclaim.md)

    def __init__(
        self,
        ssm: Any,
        *,
        instance_id: str,
        instance_type: str,
        pool: PoolPolicy,
        policy: Policy,
        poll_seconds: float = 1.0,
        timeout_seconds: float = SSM_WAIT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        time_left: Callable[[], float] = lambda: float("inf"),
    ):
        self.instance_id, self.instance_type = instance_id, instance_type
        self.pool, self.policy = pool, policy
        self.timeout_seconds = timeout_seconds
        self.head_node = HeadNode(
            ssm,
            instance_id=instance_id,
            comment="gpu-governance reclaim controller",
            poll_seconds=poll_seconds,
            timeout_seconds=timeout_seconds,
            sleep=sleep,
            time_left=time_left,
        )
        self.action_seconds = timeout_seconds + 5  # the wait plus sending the command
        self._restarts: dict[str, int] = {}

    def run(self, commands: list[str]) -> str:
        """Run shell commands on the head node (``slurm.ssm.HeadNode``) and return their output."""
        return self.head_node.run(commands)

    def read(self, now: float) -> PoolState:
        output = self.run([squeue_command(s.name for s in self.pool.shares)])
        running, pending = parse_squeue(output, self.pool, self.policy, self.instance_type)
        self._restarts = {job.job_id: job.times_preempted for job in (*running, *pending)}
        return PoolState(
            capacity=self.pool.capacity,
            shares=self.pool.shares,
            running=tuple(running),
            pending=tuple(pending),
            now=now,
            groups=self.pool.groups,
        )

    def attempt_of(self, job_id: str) -> str:
        return str(self._restarts.get(job_id, 0))

    def resume(self, ledger: Ledger, now: float) -> list[ActionResult]:
        """Read back the commands earlier ticks stopped waiting for and cancelled (``abandoned``):
        each one's outcome closes its action (``done``/``skipped`` if it ran, ``failed`` if not,
        so a later tick may act again); one still in SSM's hands stays open. ``scontrol requeue``
        puts a job itself back in the queue: nothing else is ever left open."""
        results = []
        for item in ledger.open_actions(self.pool.name):
            if item["status"] != ABANDONED:
                continue
            key = ActionKey(pool=item["pool"], job_id=item["job_id"], attempt=item["attempt"], action=item["action"])
            invocation = self.head_node.outcome(item["command_id"])
            if invocation["Status"] not in FINAL_STATUSES:
                continue
            output = invocation.get("StandardOutputContent", "").strip()
            outcome = (DONE if output == "done" else SKIPPED) if invocation["Status"] == "Success" else FAILED
            result = ActionResult(
                job_id=key.job_id,
                outcome=outcome,
                detail=f"command {item['command_id']}: {invocation['Status']} {output}"[:500],
            )
            ledger.record(key, status=outcome, detail=result.detail)
            ledger.close(key)
            results.append(result)
        return results

    def preempt(self, preemption: Preemption, progress: Callable[..., None] = _unrecorded) -> ActionResult:
        job_id = checked(preemption.job_id, SLURM_JOB_ID)
        return self._if_unchanged(job_id, "RUNNING", f"scontrol requeue {shlex.quote(job_id)}", progress)

    def start(self, start: Start, progress: Callable[..., None] = _unrecorded) -> ActionResult:
        """Only borrowing starts come here: inside its own nodes Slurm starts a job by itself."""
        job_id = checked(start.job_id, SLURM_JOB_ID)
        qos = checked(borrow_qos_name(start.share), SLURM_NAME)
        result = self._if_unchanged(
            job_id,
            "PENDING",
            f"scontrol update {shlex.quote(f'JobId={job_id}')} {shlex.quote(f'Partition={BORROW_PARTITION}')} {shlex.quote(f'QOS={qos}')}",
            progress,
        )
        return replace(result, detail=f"moved to {BORROW_PARTITION} as {qos}") if result.outcome == "done" else result

    def _if_unchanged(self, job_id: str, state: str, command: str, progress: Callable[..., None]) -> ActionResult:
        """Run ``command`` only while the job is as read (state and restart count): a job that
        ended, started or was requeued since is left alone and reported ``skipped``. A command
        given up on (and cancelled) is recorded ``abandoned`` with its id, for ``resume``."""
        expected = f"{state}|{self.attempt_of(job_id)}"
        try:
            output = self.run([if_unchanged(job_id, expected, command)])
        except CommandAbandoned as abandoned:
            progress(ABANDONED, command_id=abandoned.command_id)
            raise
        if output.strip() == "done":
            return ActionResult(job_id=job_id, outcome="done")
        return ActionResult(job_id=job_id, outcome="skipped", detail=f"{output.strip()}, read as {expected}")


def parse_squeue(
    output: str, pool: PoolPolicy, policy: Policy, instance_type: str
) -> tuple[list[RunningJob], list[PendingJob]]:
    """The governed accounts' jobs in the output of :func:`squeue_command`, as planner jobs. The
    QoS ``<team>.<class>`` gives the priority; a borrow QoS job runs at priority 0. Slurm's
    restart count is the number of times a job was preempted (requeued); its time limit is the
    job's declared maximum run time (``--time``), which the planner's borrow horizon reads."""
    lines = output.splitlines()
    if not lines or lines[-1].strip() != END_OF_QUEUE:
        raise RuntimeError(
            f"squeue output ends without {END_OF_QUEUE!r}: more than SSM's 24,000 characters, or cut short; not planning on part of the queue"
        )
    shares = {s.name for s in pool.shares}
    weights = {p.name: p.weight for p in policy.priority_classes}
    running, pending = [], []
    for line in lines[:-1]:
        parts = line.strip().split("|", 9)
        if len(parts) != 10 or parts[1] not in shares:
            continue
        job_id, account, qos, state, nodes, start, submit, restarts, limit, reason = parts
        priority_class = qos.split(".", 1)[1] if qos.startswith(account + ".") else ""
        try:
            fields = dict(
                job_id=job_id,
                share=account,
                instance_type=instance_type,
                count=int(nodes),
                priority=weights.get(priority_class, 0),
                checkpointable=False,
                times_preempted=int(restarts),
                max_run_time_s=slurm_time_limit(limit),
            )
            if state == "RUNNING":
                running.append(RunningJob(started_at=_utc(start), **fields))
            elif reason not in NOT_STARTABLE:
                pending.append(PendingJob(submitted_at=_utc(submit), **fields))
        except ValueError as error:
            raise RuntimeError(f"squeue line {line!r}: {error}") from None
    return running, pending


# Time limits that are no limit, or none set: the job declares no run time.
NO_TIME_LIMIT = frozenset({"", "UNLIMITED", "INFINITE", "NOT_SET", "N/A", "NONE", "PARTITION_LIMIT"})
_SLURM_TIME = re.compile(r"(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?")


def slurm_time_limit(text: str) -> float | None:
    """Seconds of a Slurm time limit as squeue / scontrol / sacct print it or ``--time`` takes it:
    "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S"; None for no limit ("UNLIMITED", "NOT_SET",
    "Partition_Limit", ...). Anything else raises ValueError."""
    text = text.strip()
    if text.upper() in NO_TIME_LIMIT:
        return None
    match = _SLURM_TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"time limit {text!r} is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED)")
    days, a, b, c = (int(part) if part is not None else None for part in match.group("days", "a", "b", "c"))
    if days is None:  # M, M:S, H:M:S
        hours, minutes, seconds = (0, a, b or 0) if c is None else (a, b, c)
    else:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = a, b or 0, c or 0
    return float((((days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds)


def _utc(text: str) -> float:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))  # squeue_command asks for UTC
