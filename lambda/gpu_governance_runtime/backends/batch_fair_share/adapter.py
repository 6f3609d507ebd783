"""The adapter of an AWS Batch fair-share job queue on EC2/EKS compute environments: it turns the
queue into the planner's :class:`PoolState` and carries out preemptions; it decides nothing.

Batch never preempts there, so the controller terminates victims with a reason and submits each
one's copy, exactly once (``common/batch_copy.py``: Batch does not retry a terminated job). A
victim it cannot bring back as it was (an array child, a job others depend on) or whose instance
type it cannot tell is stopped for good, its reason saying why (docs/reclaim.md, *Jobs that cannot
come back*).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from ...common import log
from ...common.action_ledger import (
    CLAIMED,
    DONE,
    FAILED,
    FUNCTION_TIMEOUT_SECONDS,
    SKIPPED,
    STOPPED_FOR_GOOD,
    SUBMITTING,
    TERMINATED,
    TERMINATING,
    ActionKey,
    Ledger,
)
from ...common.batch_copy import (
    REASON_PREFIX,
    SubmitRefused,
    copy_request,
    describe,
    restartable,
    stopped_by_us,
    submit_once,
    times_stopped,
)
from ...common.batch_jobs import declared_seconds
from ...contract import TAG_CHECKPOINTABLE, TAG_INSTANCE_TYPE
from ...planners.reclaim import ANY_TYPE, PendingJob, PoolState, Preemption, RunningJob, Start
from ...policy import PoolPolicy
from ..base import ActionResult, pool_state, unrecorded

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
        return pool_state(self.pool, running, pending, now)

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
            max_run_time_s=declared_seconds(
                job.get("timeout", {}).get("attemptDurationSeconds")
            ),  # Batch ends an attempt then
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

    def preempt(self, preemption: Preemption, progress: Callable[..., None] = unrecorded) -> ActionResult:
        current, skipped = self._as_read(preemption.job_id)
        if skipped is not None:
            return skipped
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

    def stop(self, job: RunningJob, reason: str, progress: Callable[..., None] = unrecorded) -> ActionResult:
        """Terminate a job for good at its team's run-time limit (reclaim/run_time.py) while it is still
        the attempt the tick read; recorded ``terminating`` (with why it gets no copy) before the call.
        A failed call raises: the handler leaves the action open at that step and the next tick reads
        what happened (``resume``: stopped for good, it owes no copy) [aws: batch.terminate-job-ends-failed]."""
        _, skipped = self._as_read(job.job_id)
        if skipped is not None:
            return skipped
        progress(TERMINATING, **{STOPPED_FOR_GOOD: "it ran as long as its run-time limit allows"})
        self.batch.terminate_job(jobId=job.job_id, reason=f"{REASON_PREFIX} {reason}"[:1024])
        return ActionResult(job_id=job.job_id, outcome=DONE, detail=f"stopped for good at its run-time limit: {reason}")

    def _as_read(self, job_id: str) -> tuple[dict, ActionResult | None]:
        """The job as Batch has it now, and, unless it still runs as the attempt the tick read, the
        ``skipped`` result of an action on it."""
        (current,) = self.batch.describe_jobs(jobs=[job_id])["jobs"] or ({},)
        if current.get("status") in ("STARTING", "RUNNING") and self.attempt_of(job_id) == str(
            len(current.get("attempts", []))
        ):
            return current, None
        return current, ActionResult(job_id=job_id, outcome=SKIPPED, detail=f"now {current.get('status', 'gone')}")

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

    def start(self, start: Start, progress: Callable[..., None] = unrecorded) -> ActionResult:
        raise RuntimeError("Batch starts fair-share jobs itself")


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
