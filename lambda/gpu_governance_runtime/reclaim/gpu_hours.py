"""GPU-hour limits where the backend has none of its own: Batch quota-share pools, HyperPod EKS
pools and EKS pools with Kueue (Slurm counts a team's GPU minutes itself, GrpTRESMins). Each reclaim tick, per team with a
``gpu_hour_limit`` in such a pool:

1. the GPU hours its running instances used over the tick (instances x GPUs per instance x the
   tick's interval) are added to the team's count for the period (``limits.period_start``), at
   most once per tick: the ledger's counter keeps the last tick counted and refuses an older or
   the same one (a retried or duplicated invocation, a concurrent run);
2. at 80 % of the limit one ``GPU-hour limit`` event (EventBridge, ``RECLAIM_EVENT_SOURCE``) per
   team and period: claimed in the ledger before it is sent and recorded sent after, so it is sent
   once, or (a tick that died between the two) once more by a later tick;
3. at 100 % the team's admission switch is turned off, as a paused team's is: the Batch quota
   share's ``state`` DISABLED, which refuses new jobs but lets the jobs already submitted start and
   finish [aws: batch.quota-share-disabled], or the HyperPod compute quota's ``ActivationState``
   Disabled, whose effect on queued and running tasks no page states [aws: hyperpod.compute-quota-disabled],
   or the Kueue ClusterQueue's ``stopPolicy`` Hold, which admits nothing new and lets admitted
   workloads finish [aws: eks.kueue-stop-policy-hold];
4. while a Batch team is over its limit, or paused, its queued service jobs (SUBMITTED, PENDING,
   RUNNABLE) are terminated (:func:`hold`): a disabled share would start them otherwise. Each is
   recorded before and after in its own ``held#`` ledger item, terminated once (a listing that shows
   it again is skipped), with a reason that tells its owner why and when to submit again, and only
   listed in dry run. Running jobs are never stopped (one that Batch starts between the listing and
   the termination is stopped as it starts: it started after the limit) [aws: batch.terminate-service-job];
5. in the next period the switch is turned back on if the controller turned it off, unless the
   team is ``paused`` in the governance file (then it stays off, as deployed).

Every change is recorded before (``disabling`` / ``enabling``) and after (``disabled`` /
``enabled``) in the team's ``hour-limit#`` ledger item, and the switch is read before it is
changed (and on every tick while the team is over its limit: a deploy puts it back ENABLED): a call refused (throttled) leaves the item in its ``-ing`` state and the next tick tries
again; a call that succeeded but whose answer was lost (a timeout) is found done by the next
read and not made twice. Dry run counts (the ledger only) and logs what it would do; it sends no
event and changes no switch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..backends.base import QueuedJobs, Switch, SwitchError
from ..common.action_ledger import Ledger
from ..common.log import write as log
from ..contract import GPU_HOUR_LIMIT_EVENT_TYPE, RECLAIM_EVENT_SOURCE
from ..limits import TRAINING_INSTANCE_GPUS, next_reset, period_start
from ..planners.reclaim import Share
from ..policy import PoolPolicy

NOTICE_FRACTION = 0.8
DISABLING, DISABLED, ENABLING, ENABLED = "disabling", "disabled", "enabling", "enabled"
LEFT_OFF = "left_off"  # a new period began while the team is paused (or was off before its limit): not turned on
TERMINATING, TERMINATED = "terminating", "terminated"


def gpus_per_instance(pool_gpus: Mapping[str, int], instance_type: str) -> int:
    gpus = pool_gpus.get(instance_type) or TRAINING_INSTANCE_GPUS.get(instance_type)
    if gpus is None:
        raise ValueError(
            f"instance type {instance_type!r}: GPUs per instance unknown; declare gpus_per_instance on the pool"
        )
    return gpus


def enforce(
    pool: PoolPolicy,
    in_use: Iterable[tuple[str, str, float]],
    *,
    ledger: Ledger,
    switch: Callable[[str], Switch],
    notify: Callable[[Mapping[str, Any]], None],
    now: float,
    tick_seconds: float,
    dry_run: bool,
    pool_gpus: Mapping[str, int] = {},
    queue: Callable[[str], QueuedJobs] | None = None,
) -> list[dict[str, Any]]:
    """Count, notify and switch every limited team of ``pool``, and hold the queued jobs of every
    team over its limit or paused where the backend has a ``queue`` (:func:`hold`). ``in_use``: (team,
    instance type, instances running; HyperPod EKS counts part-instances) as this tick read them.
    Returns one log record per limited or held team. A call that fails for one team ends only its own
    turn (a count not added, a notice not sent): every other team still gets its count, notice, switch
    and hold, and then the first failure is raised, so the pool's tick counts as failed (PoolErrors)."""
    limited = [s for s in pool.shares if s.gpu_hour_limit]
    records = [] if queue is None else _hold_paused(pool, ledger=ledger, queue=queue, now=now, dry_run=dry_run)
    if not limited:
        return records
    gpus: dict[str, float] = {}
    for team, instance_type, instances in in_use:
        gpus[team] = gpus.get(team, 0) + instances * gpus_per_instance(pool_gpus, instance_type)
    failed: list[ClientError | BotoCoreError] = []
    for share in limited:
        record = _enforce_team(
            pool,
            share,
            gpus.get(share.name, 0),
            ledger=ledger,
            switch=switch,
            notify=notify,
            now=now,
            tick_seconds=tick_seconds,
            dry_run=dry_run,
            queue=queue,
            failed=failed,
        )
        if record is not None:
            records.append(record)
    if failed:
        raise failed[0]
    return records


def _enforce_team(
    pool: PoolPolicy,
    share: Share,
    gpus_in_use: float,
    *,
    ledger: Ledger,
    switch: Callable[[str], Switch],
    notify: Callable[[Mapping[str, Any]], None],
    now: float,
    tick_seconds: float,
    dry_run: bool,
    queue: Callable[[str], QueuedJobs] | None,
    failed: list[ClientError | BotoCoreError],
) -> dict[str, Any] | None:
    """One limited team's turn of :func:`enforce`: its count, notice, switch and hold. A failed call
    is added to ``failed`` and ends only this turn; None when the team's count could not be added."""
    at = datetime.fromtimestamp(now, UTC)
    tick = int(now // tick_seconds)
    hours, period = share.gpu_hour_limit
    start = period_start(period, at)
    try:
        used = ledger.add_gpu_hours(
            pool.name,
            share.name,
            start.isoformat(),
            gpus_in_use * tick_seconds / 3600,
            tick=tick,
            now=now,
        )
    except (ClientError, BotoCoreError) as error:  # this tick is not counted for the team (never twice)
        failed.append(error)
        return None
    record = {
        "event": "gpu_hour_limit",
        "pool": pool.name,
        "team": share.name,
        "used_gpu_hours": round(used, 3),
        "limit": hours,
        "period": period,
        "period_start": start.isoformat(),
        "resets": next_reset(period, at).isoformat(),
        "dry_run": dry_run,
    }
    if used >= NOTICE_FRACTION * hours and not dry_run:
        try:
            record["notice"] = _notice(ledger, pool.name, share.name, record, notify, now)
        except (ClientError, BotoCoreError) as error:  # claimed, not sent: a later tick sends it
            record["notice"], record["notice_error"] = "not_sent", f"{type(error).__name__}: {error}"
            failed.append(error)
    try:
        record["switch"] = _switch(
            ledger,
            pool.name,
            share.name,
            start.isoformat(),
            over=used >= hours,
            paused=share.paused,
            switch=switch,
            dry_run=dry_run,
            now=now,
        )
    except (
        ClientError,
        BotoCoreError,
        SwitchError,
    ) as error:  # the item stays in its -ing state: the next tick reads and tries again
        record["switch"], record["error"] = "retry_next_tick", f"{type(error).__name__}: {error}"
    if used >= hours and queue is not None and not share.paused:  # a paused team's are held above
        why = (
            f"team {share.name} reached its GPU-hour limit ({hours:g} GPU hours a {period}); "
            f"submit again from {record['resets']}"
        )
        record["held"] = _hold_logged(pool.name, share.name, queue, why=why, ledger=ledger, now=now, dry_run=dry_run)
    log(record)
    return record


def _hold_paused(
    pool: PoolPolicy, *, ledger: Ledger, queue: Callable[[str], QueuedJobs], now: float, dry_run: bool
) -> list[dict[str, Any]]:
    """Hold every paused team's queued jobs: a paused team's quota share is deployed DISABLED, which
    still starts the jobs submitted before [aws: batch.quota-share-disabled]."""
    records = []
    for share in pool.shares:
        if share.paused:
            why = f"team {share.name} is paused; submit again once it is resumed"
            record = {"event": "team_paused", "pool": pool.name, "team": share.name, "dry_run": dry_run}
            record["held"] = _hold_logged(
                pool.name, share.name, queue, why=why, ledger=ledger, now=now, dry_run=dry_run
            )
            log(record)
            records.append(record)
    return records


def _hold_logged(
    pool: str, team: str, queue: Callable[[str], QueuedJobs], *, why: str, ledger: Ledger, now: float, dry_run: bool
) -> dict[str, Any]:
    try:
        return hold(pool, team, queue(team), why=why, ledger=ledger, now=now, dry_run=dry_run)
    except (ClientError, BotoCoreError) as error:  # what was recorded stays; the next tick lists and tries again
        return {"error": f"{type(error).__name__}: {error}"}


def hold(
    pool: str, team: str, queue: QueuedJobs, *, why: str, ledger: Ledger, now: float, dry_run: bool
) -> dict[str, Any]:
    """Terminate the team's queued jobs, each once: ``held#<pool>#<job>`` is put ``terminating``
    before the call and ``terminated`` after it; a job already ``terminated`` that a lagging listing
    shows again is skipped, and one left ``terminating`` (a crash, a throttle) is terminated again by
    the next tick, which ends it or finds it ended. The reason names the team and ``why``, so the
    job's owner reads it in the job's status. Dry run only lists them."""
    jobs = queue.queued()
    if dry_run:
        return {"would_terminate": jobs}
    terminated, skipped = [], []
    for job_id in jobs:
        key = f"held#{pool}#{job_id}"
        if (ledger.get(key) or {}).get("status") == TERMINATED:
            skipped.append(job_id)
            continue
        ledger.put(key, status=TERMINATING, team=team, why=why, at=int(now))
        queue.terminate(job_id, f"gpu-governance: {why}")
        ledger.put(key, status=TERMINATED, team=team, why=why, at=int(now))
        terminated.append(job_id)
    return {"terminated": terminated, "skipped": skipped}


def _notice(
    ledger: Ledger,
    pool: str,
    team: str,
    record: Mapping[str, Any],
    notify: Callable[[Mapping[str, Any]], None],
    now: float,
) -> str:
    key = f"hour-notice#{pool}#{team}#{record['period_start']}"
    if not ledger.claim_once(key, now=now):
        return "sent_before"
    # A send that fails leaves the claim as it is: a tick after the function's timeout takes it again and sends.
    notify(
        {key_: record[key_] for key_ in ("pool", "team", "used_gpu_hours", "limit", "period", "period_start", "resets")}
    )
    ledger.done_once(key)
    return "sent"


def _switch(
    ledger: Ledger,
    pool: str,
    team: str,
    start: str,
    *,
    over: bool,
    paused: bool,
    switch: Callable[[str], Switch],
    dry_run: bool,
    now: float,
) -> str:
    """Off at the limit; on again in a later period if this controller turned it off and the team
    is not paused. Returns what was done."""
    key = f"hour-limit#{pool}#{team}"
    item = ledger.get(key) or {}
    turned_off = item.get("status") in (DISABLING, DISABLED, ENABLING)
    if over:
        if dry_run:
            return "off" if item.get("status") == DISABLED and item.get("period_start") == start else "would_disable"
        # Read on every tick while over, not only once: a deploy of the team's stack puts the
        # switch back as the template declares it (ENABLED), and the limit still holds.
        current = switch(team)
        enabled = current.enabled()
        if item.get("status") == DISABLED and item.get("period_start") == start and not enabled:
            return "off"
        # was_on: whether this controller is the one turning it off (kept from the first attempt of the period)
        was_on = item["was_on"] if item.get("period_start") == start and "was_on" in item else enabled
        ledger.put(key, status=DISABLING, period_start=start, was_on=was_on, at=int(now))
        if enabled:
            current.set(False)
        ledger.put(key, status=DISABLED, period_start=start, was_on=was_on, at=int(now))
        if not enabled:
            return "off"
        return "disabled_again" if item.get("status") == DISABLED and item.get("period_start") == start else "disabled"
    if not turned_off:
        return "as_deployed"
    if paused or not item.get("was_on"):  # paused in the governance file, or off before the limit: left as deployed
        if not dry_run:
            ledger.put(
                key,
                status=LEFT_OFF,
                period_start=start,
                was_on=False,
                at=int(now),
                detail="the team is paused" if paused else "it was off before the limit",
            )
        return LEFT_OFF
    if dry_run:
        return "would_enable"
    current = switch(team)
    ledger.put(key, status=ENABLING, period_start=start, was_on=True, at=int(now))
    if not current.enabled():
        current.set(True)
    ledger.put(key, status=ENABLED, period_start=start, was_on=True, at=int(now))
    return "enabled"


def event_sender(events: Any) -> Callable[[Mapping[str, Any]], None]:
    """Sends a team's 80 % notice to the account's default event bus, as the capacity controller sends its events.
    An entry EventBridge failed is reported in the answer, not raised [aws: events.put-events-each-entry]: raised here."""

    def send(detail: Mapping[str, Any]) -> None:
        answer = events.put_events(
            Entries=[
                {
                    "Source": RECLAIM_EVENT_SOURCE,
                    "DetailType": GPU_HOUR_LIMIT_EVENT_TYPE,
                    "Detail": json.dumps(detail, sort_keys=True),
                }
            ]
        )
        if answer.get("FailedEntryCount"):
            raise ClientError(
                {
                    "Error": {
                        "Code": answer["Entries"][0].get("ErrorCode", "Failed"),
                        "Message": "PutEvents refused the entry",
                    }
                },
                "PutEvents",
            )

    return send
