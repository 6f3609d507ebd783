"""Requeue the Batch jobs running on a Capacity Block before its instances terminate.

EC2 sends the block's expiration warning 40 minutes before its end, saying its instances begin
to terminate 10 minutes later, 30 minutes before the end
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html). A job must
be stopped and copied before then, and told to checkpoint first. So, per block (``drain``):

- the jobs are told to checkpoint (the drain event, ``rotation.announce_drain``, once per block,
  recorded as ``drain#<block>``) by the first run from ``SIGNAL_LEAD`` (50 minutes) before the
  end, or by the warning if that comes first; every such run also records the jobs on the block
  (``requeue``), so a job started there since is not missed;
- each job is stopped and copied from ``stop_time``: ``STOP_LEAD`` (40 minutes) before the end and
  at least ``CHECKPOINT_TIME`` after the signal. The construct runs the controller at least every
  ``SCHEDULE_LIMIT`` (5 minutes) while a window feeds a Batch compute environment, so two runs
  land between the first stop and the instances' end: a run that fails there (throttled,
  crashed) leaves the next one. Only when the first signal comes late (the warning alone, every
  earlier run failed) is the stop as late as ``LAST_STOP`` (35 minutes), with one run left.

AWS Batch does not retry a job stopped with ``TerminateJob`` (``common/batch_copy.py`` cites
the pages), so requeueing is explicit: terminate the job with a reason, then submit one copy
with everything that defined it, tagged ``gpu-governance:requeued-from=<old id>``.

Which jobs: the instances launched into the block (``DescribeInstances`` filtered on
``capacity-reservation-id``) are mapped to their ECS container instances in the compute
environment's ECS cluster, and a RUNNING job of a queue feeding the compute environment is on
the block when its ``container.containerInstanceArn`` is one of those. Array and multi-node
parallel parents and jobs of EKS compute environments carry no container instance and are left
to the drain event and to their retry strategy when the instances terminate.

Every job is claimed in the ledger at the warning (``requeue#<job id>``: claimed -> terminated
-> submitting -> requeued, or finished), so a duplicate event stops nothing twice. Before
stopping or copying, the job's state is read again: a job that SUCCEEDED or FAILED on its own
meanwhile is never copied (``finished``), and a copy is submitted only of a job the controller
stopped. The copy goes through a client that sends one request, with ``submitting`` recorded
before it; a later run finds an uncertain copy by its tag before it would submit again
(``batch_copy.submit_once``). A step that fails (throttling, a crash) stays open and the next
run resumes it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..common.batch_copy import REASON_PREFIX, SubmitRefused, copy_request, describe, stopped_by_us, submit_once
from ..contract import TAG_CHECKPOINTABLE, TAG_REQUEUED_FROM
from ..planners import market
from . import rotation
from .block_jobs import block_instances, jobs_on
from .ledger import Ledger

OPEN_STATUSES = ("claimed", "terminated", "submitting")
# Jobs are stopped from this long before the block's end: its instances go 30 minutes before the
# end (market.TERMINATION_LEAD), and with runs at most SCHEDULE_LIMIT apart two runs land in
# between, so one failed run (throttled, crashed) still leaves one to stop and copy the job.
STOP_LEAD = market.TERMINATION_LEAD + 2 * market.SCHEDULE_LIMIT
# A job is stopped at least this long after it was told to checkpoint.
CHECKPOINT_TIME = market.SCHEDULE_LIMIT
# The run that tells the jobs falls in the SCHEDULE_LIMIT from this long before the end: at the
# latest CHECKPOINT_TIME before STOP_LEAD, so the signal never delays the stop.
SIGNAL_LEAD = STOP_LEAD + CHECKPOINT_TIME + market.SCHEDULE_LIMIT
# The latest stop, whenever the signal came: one run before the instances go.
LAST_STOP = market.TERMINATION_LEAD + market.SCHEDULE_LIMIT
DRAIN_PREFIX = "drain#"
# A job is only touched with this much of the invocation left (describe, terminate, record, look
# up, submit, record); a claimed job left untouched is resumed by the next run.
JOB_SECONDS = 20


def jobs_on_block(
    *, compute_environment: str, reservation_id: str, ec2: Any, ecs: Any, batch: Any
) -> list[dict[str, Any]]:
    """RUNNING jobs (DescribeJobs details) of the compute environment's queues on the block's instances."""
    instances = block_instances(ec2, reservation_id)
    if not instances:
        return []
    return jobs_on(compute_environment=compute_environment, batch=batch, ecs=ecs, instance_ids=instances)


def _unlimited() -> float:
    return float("inf")


def stop_time(ends_at: datetime, signalled_at: datetime) -> datetime:
    """When the jobs of a block ending at ``ends_at`` are stopped, told to checkpoint at ``signalled_at``."""
    return min(max(ends_at - STOP_LEAD, signalled_at + CHECKPOINT_TIME), ends_at - LAST_STOP)


def draining(ends_at: datetime, now: datetime) -> bool:
    """Whether a block's jobs are to be signalled, recorded and stopped now (``drain`` every run)."""
    return ends_at - SIGNAL_LEAD <= now < ends_at - market.TERMINATION_LEAD


def drain(
    *,
    window: str,
    compute_environment: str,
    reservation_id: str,
    ends_at: datetime,
    moved_to: str | None,
    dry_run: bool,
    ledger: Ledger,
    ec2: Any,
    ecs: Any,
    batch: Any,
    submit: Any,
    events: Any,
    now: datetime,
    time_left=_unlimited,
) -> dict[str, Any]:
    """Every run while the block is ``draining`` and at its expiration warning: tell the jobs to
    checkpoint once (a signal that failed is sent again by the next run, a repeated one is
    harmless: it asks for a checkpoint), record the jobs on the block, move every open requeue on."""
    if dry_run:
        return {
            "dry_run": True,
            "would": "announce the drain",
            "requeue": requeue(
                window=window,
                compute_environment=compute_environment,
                reservation_id=reservation_id,
                ends_at=ends_at,
                dry_run=True,
                ledger=ledger,
                ec2=ec2,
                ecs=ecs,
                batch=batch,
                submit=submit,
                now=now,
                time_left=time_left,
            ),
        }
    key = DRAIN_PREFIX + reservation_id
    announced = [details for action, _, details in ledger.actions(key, ("announced",)) if action == key]
    signal: dict[str, Any] = {}
    if announced:
        signalled_at = datetime.fromisoformat(announced[0]["at"])
    else:
        signalled_at = now
        try:
            signal = rotation.announce_drain(
                window=window, reservation_id=reservation_id, ends_at=ends_at, moved_to=moved_to, events=events
            )
            ledger.record_action(key, status="announced", details={"window": window, "at": now.isoformat()}, now=now)
        except (
            ClientError,
            BotoCoreError,
        ) as error:  # the jobs are still recorded and stopped in time; the next run signals again
            signal = {"error": f"the drain event: {error}", "retry": "next run"}
    return {
        **signal,
        "signalled_at": signalled_at.isoformat(),
        "requeue": requeue(
            window=window,
            compute_environment=compute_environment,
            reservation_id=reservation_id,
            ends_at=ends_at,
            dry_run=False,
            ledger=ledger,
            ec2=ec2,
            ecs=ecs,
            batch=batch,
            submit=submit,
            now=now,
            time_left=time_left,
            signalled_at=signalled_at,
        ),
    }


def requeue(
    *,
    window: str,
    compute_environment: str,
    reservation_id: str,
    ends_at: datetime,
    dry_run: bool,
    ledger: Ledger,
    ec2: Any,
    ecs: Any,
    batch: Any,
    submit: Any,
    now: datetime,
    time_left=_unlimited,
    signalled_at: datetime | None = None,
) -> dict[str, Any]:
    """Record every job on the block (once: a job recorded before is ``already_handled``), to be
    stopped and copied from ``stop_time`` (at once if that has come); in dry run only say which.
    ``signalled_at``: when the jobs were told to checkpoint (default ``now``)."""
    jobs = jobs_on_block(
        compute_environment=compute_environment, reservation_id=reservation_id, ec2=ec2, ecs=ecs, batch=batch
    )
    stop_at = stop_time(ends_at, signalled_at or now)
    if dry_run:
        return {"would_requeue": sorted(j["jobId"] for j in jobs), "would_stop_at": stop_at.isoformat()}
    reason = (
        f"{REASON_PREFIX} Capacity Block {reservation_id} of window {window} ends {ends_at:%Y-%m-%d %H:%M} UTC and its "
        f"instances terminate 30 minutes earlier; requeued as a new job tagged {TAG_REQUEUED_FROM}"
    )
    skipped = []
    for job in jobs:  # claimed first, all of them: what this invocation does not finish, a later run does
        if not claim(
            ledger, job["jobId"], window=window, reservation=reservation_id, reason=reason, stop_at=stop_at, now=now
        ):
            skipped.append(job["jobId"])  # handled by an earlier delivery of the same warning
    return {
        **resume(ledger=ledger, batch=batch, submit=submit, now=now, time_left=time_left),
        "already_handled": skipped,
    }


def checkpoints(job: dict[str, Any]) -> bool:
    """Whether the job's team tagged it as checkpointing: told before it is stopped, it loses nothing."""
    return (job.get("tags") or {}).get(TAG_CHECKPOINTABLE, "").lower() == "true"


def cut_hours(job: dict[str, Any], now: datetime) -> float:
    """The work a job stopped now loses: none for one that checkpoints (it was told first, ``CHECKPOINT_TIME`` or more
    before), else all it did since it started (the usage report's work cut at a block's end)."""
    if checkpoints(job) or not job.get("startedAt"):
        return 0.0
    return round(max(0.0, now.timestamp() - job["startedAt"] / 1000) / 3600, 4)


def claim(
    ledger: Ledger, job_id: str, *, window: str, reservation: str, reason: str, stop_at: datetime, now: datetime
) -> bool:
    """Record that the job is to be stopped from ``stop_at`` and copied (``resume`` does it); False when it was
    recorded before: each job is stopped and copied once."""
    details = {
        "window": window,
        "reservation": reservation,
        "job": job_id,
        "reason": reason,
        "stop_at": stop_at.isoformat(),
    }
    return ledger.claim_action(f"requeue#{job_id}", status="claimed", details=details, now=now)


def resume(*, ledger: Ledger, batch: Any, submit: Any, now: datetime, time_left=_unlimited) -> dict[str, Any]:
    """Move every open requeue one step on: stop the jobs whose time has come, copy the stopped
    ones, close the ones that ended on their own."""
    done, finished, waiting, errors, deferred = [], [], [], [], []
    for action_id, status, details in ledger.actions("requeue#", OPEN_STATUSES):
        if status == "claimed" and "stop_at" in details and now < datetime.fromisoformat(details["stop_at"]):
            waiting.append(details["job"])  # checkpointing: the drain event told it to
            continue
        if time_left() < JOB_SECONDS:
            deferred.append(details["job"])
            continue
        try:
            outcome = _advance(action_id, status, details, ledger=ledger, batch=batch, submit=submit, now=now)
        except (ClientError, BotoCoreError, SubmitRefused) as error:
            code = (
                error.code
                if isinstance(error, SubmitRefused)
                else error.response.get("Error", {}).get("Code", "")
                if isinstance(error, ClientError)
                else type(error).__name__
            )
            errors.append({"job": details["job"], "error": code, "retry": "next run"})
            continue
        if outcome is None:
            waiting.append(details["job"])  # a copy may be in flight: looked for again next run
        elif outcome == "finished":
            finished.append(details["job"])
        else:
            done.append({"job": details["job"], "new_job": outcome})
    return {"requeued": done, "finished": finished, "waiting": waiting, "errors": errors, "deferred": deferred}


def _advance(
    action_id: str, status: str, details: dict[str, Any], *, ledger: Ledger, batch: Any, submit: Any, now: datetime
) -> str | None:
    """The copy's id, "finished" (the job ended on its own: nothing to copy) or None (not known yet)."""
    old = details["job"]
    (job,) = describe(batch, [old]) or ({"jobId": old, "status": "gone"},)
    if not stopped_by_us(job):
        if job["status"] in ("STARTING", "RUNNING") and status == "claimed":
            batch.terminate_job(jobId=old, reason=details["reason"])
            details = {**details, "cut_hours": cut_hours(job, now)}
            ledger.record_action(action_id, status="terminated", details=details, now=now)
            (job,) = describe(batch, [old]) or (job,)
        if not stopped_by_us(job):  # SUCCEEDED, FAILED on its own, or gone: never copied
            ledger.record_action(action_id, status="finished", details={**details, "found": job["status"]}, now=now)
            return "finished"
    uncertain = datetime.fromisoformat(details["submitting_at"]).timestamp() if status == "submitting" else None
    try:
        new = submit_once(
            batch=batch,
            submit=submit,
            request=copy_request(job),
            original=old,
            uncertain_since=uncertain,
            now=now.timestamp(),
            submitting=lambda _: ledger.record_action(
                action_id, status="submitting", details={**details, "submitting_at": now.isoformat()}, now=now
            ),
        )
    except SubmitRefused:
        ledger.record_action(
            action_id, status="terminated", details=details, now=now
        )  # nothing submitted: the next run submits at once
        raise
    if new is not None:
        ledger.record_action(action_id, status="requeued", details={**details, "new_job": new}, now=now)
    return new
