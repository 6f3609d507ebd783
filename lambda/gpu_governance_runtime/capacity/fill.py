"""Fill a Batch window's Capacity Block while it runs (issue 40, item 3), every run from its start until it drains.

Batch places each job on the first compute environment of the queue that can take it, and nothing finer: the
controller cannot choose which job goes to the block. What it can do, with the calls the requeue already makes:

- **Near the end, only what fits or checkpoints.** A job fits when its declared run time
  (``timeout.attemptDurationSeconds``) ends before the block's instances do (30 minutes before its end); it
  checkpoints when tagged ``gpu-governance:checkpointable=true``. A job Batch put on the block that does neither
  would be cut when the instances end [aws: batch-ce.jobs-fail-with-block-instances]: it is stopped and requeued at
  once (claimed here, stopped and copied by ``requeue.resume``), having run at most one schedule; its copy goes
  behind the jobs waiting, which may fit. The block is *closing* (the rotation DISABLEs it; running jobs go on
  [aws: batch.compute-environment-disabled]) while the job Batch would place on a free instance next (the oldest
  waiting) is such a copy: it then starts elsewhere, and no job is tried on the block twice. A job that declares no
  run time is taken to fit.
- **Waiting work first, then moves.** When the block has instances free and no job waits, jobs running on demand
  that checkpoint are told (a ``Capacity Jobs Moving`` event), then stopped and copied from ``CHECKPOINT_TIME``
  later; the copy goes to the queue, where the block comes first, and resumes from its checkpoint on the block
  [aws: batch.job-queue-environment-order]. Only while the block runs ``MOVE_MIN_LEFT`` longer.

Everything that stops a job goes through the requeue's ledger claims (``requeue#<job id>``: each job once, recorded
before and after, a copy never submitted twice). In dry run the result only says what would be done.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from ..common.batch_copy import REASON_PREFIX, restartable
from ..contract import CAPACITY_EVENT_SOURCE, TAG_REQUEUED_FROM
from ..planners import market
from ..planners.offers import Reservation
from ..planners.window import Window
from . import requeue
from .block_jobs import ON_AN_INSTANCE, block_instances, container_instances, jobs_in
from .ledger import Ledger

MOVE_EVENT_TYPE = "Capacity Jobs Moving"
# A job is moved onto a block only while the block's instances run at least this much longer: less, and the move's
# checkpoint and restart cost more than the block gives before its own drain moves the job back.
MOVE_MIN_LEFT = timedelta(hours=1)


def _declared(job: dict[str, Any]) -> timedelta | None:
    seconds = (job.get("timeout") or {}).get("attemptDurationSeconds")
    return None if seconds is None else timedelta(seconds=seconds)


def fits(job: dict[str, Any], *, starts: datetime, instances_end: datetime) -> bool:
    """Whether the job, started at ``starts``, ends by its declared run time before the instances do."""
    declared = _declared(job)
    return declared is None or starts + declared <= instances_end


def _started(job: dict[str, Any], now: datetime) -> datetime:
    return datetime.fromtimestamp(job["startedAt"] / 1000, now.tzinfo) if job.get("startedAt") else now


def fill(
    *,
    window: Window,
    block: Reservation,
    dry_run: bool,
    ledger: Ledger,
    ec2: Any,
    ecs: Any,
    batch: Any,
    events: Any,
    now: datetime,
) -> dict[str, Any]:
    """One run's look at the block: what to take off it, whether it is closing, what to move onto it."""
    result, misplaced, movable = _look(
        window=window, block=block, ledger=ledger, ec2=ec2, ecs=ecs, batch=batch, now=now
    )
    if dry_run:
        return {
            **result,
            "dry_run": True,
            "would_take_off": [j["jobId"] for j in misplaced],
            "would_move": [j["jobId"] for j in movable],
        }
    instances_end = block.end - market.TERMINATION_LEAD
    stop_at = now + requeue.CHECKPOINT_TIME
    if movable:  # told first: a job stopped without it loses the work since its last checkpoint
        events.put_events(
            Entries=[
                {
                    "Source": CAPACITY_EVENT_SOURCE,
                    "DetailType": MOVE_EVENT_TYPE,
                    "Detail": json.dumps(
                        {
                            "window": window.name,
                            "capacity_reservation_id": block.id,
                            "jobs": [j["jobId"] for j in movable],
                            "stop_at": stop_at.isoformat(),
                        }
                    ),
                }
            ]
        )
    ends = f"{instances_end:%Y-%m-%d %H:%M} UTC"

    def claimed(jobs: list[dict[str, Any]], reason: str, stop_at: datetime) -> list[str]:
        """The jobs claimed for the requeue now (a job claimed before, by another run, is not again)."""
        return [
            j["jobId"]
            for j in jobs
            if requeue.claim(
                ledger, j["jobId"], window=window.name, reservation=block.id, reason=reason, stop_at=stop_at, now=now
            )
        ]

    taken_off = claimed(
        misplaced,
        f"{REASON_PREFIX} placed on Capacity Block {block.id} of window {window.name}, whose instances end {ends}, "
        "before its declared run time ends, and it does not checkpoint; requeued to run elsewhere",
        now,
    )
    moving = claimed(
        movable,
        f"{REASON_PREFIX} moved from on demand onto Capacity Block {block.id} of window {window.name} (it checkpoints); "
        "requeued as a new job",
        stop_at,
    )
    return {**result, "taken_off": taken_off, "moving": moving}


def _look(
    *, window: Window, block: Reservation, ledger: Ledger, ec2: Any, ecs: Any, batch: Any, now: datetime
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """What the block and its queue show: the run's findings, the jobs on it that would be cut (to take off), and the
    jobs on demand that checkpoint to move onto its free instances."""
    consumer = window.consumer
    instances_end = block.end - market.TERMINATION_LEAD
    on_block_instances = container_instances(
        ecs, batch, consumer["block_compute_environment"], block_instances(ec2, block.id)
    )
    on_demand_instances = container_instances(ecs, batch, consumer["compute_environment"])
    queued = jobs_in(batch, [consumer["job_queue"]], ("RUNNABLE", *ON_AN_INSTANCE))
    on_block = [j for j in queued if j.get("container", {}).get("containerInstanceArn") in on_block_instances]
    on_demand = [
        j
        for j in queued
        if j["status"] == "RUNNING" and j.get("container", {}).get("containerInstanceArn") in on_demand_instances
    ]
    waiting = [j for j in queued if j["status"] == "RUNNABLE"]
    handled = {details["job"] for _, _, details in ledger.actions("requeue#", requeue.OPEN_STATUSES)}
    misplaced = [
        j
        for j in on_block
        if not requeue.checkpoints(j)
        and not fits(j, starts=_started(j, now), instances_end=instances_end)
        and j["jobId"] not in handled
    ]
    # Batch says not which waiting job it places next: taken as the oldest (a FIFO queue's order, and a fair-share
    # queue's within a share). A job that would be cut is tried on the block once: taken off at the next run, its copy
    # (tagged requeued-from) goes behind the others, and the block closes while that copy is next, so it runs elsewhere.
    free = block.count - len(on_block)
    next_up = sorted(waiting, key=lambda j: (j.get("createdAt", 0), j["jobId"]))[: 1 if free > 0 else 0]
    unfit = [
        j
        for j in next_up
        if TAG_REQUEUED_FROM in (j.get("tags") or {})
        and not requeue.checkpoints(j)
        and not fits(j, starts=now, instances_end=instances_end)
    ]
    result: dict[str, Any] = {
        "window": window.name,
        "capacity_reservation_id": block.id,
        "block_window": block.window,  # the window that bought it: a request's block feeds its declared window's consumer
        "instances": block.count,
        "on_block": len(on_block),
        "waiting": len(waiting),
        "on_demand": len(on_demand),
        "closing": bool(misplaced or unfit),
        **({"closing_for": sorted(j["jobId"] for j in misplaced + unfit)} if misplaced or unfit else {}),
    }
    movable = []
    if not result["closing"] and not waiting and free > 0 and instances_end - now >= MOVE_MIN_LEFT:
        movable = sorted(
            (j for j in on_demand if requeue.checkpoints(j) and restartable(j) is None and j["jobId"] not in handled),
            key=lambda j: (j.get("startedAt", 0), j["jobId"]),
        )[:free]
    return result, misplaced, movable
