"""Run-time limits where the backend stops no job for the library: Batch fair-share pools (issue 43
item 3). Batch ends a job at its own timeout (``timeout.attemptDurationSeconds``), which whoever
submits it sets [aws: batch.job-timeout], so the reclaim controller holds a team's ``max_run_minutes``
there itself. Each tick, per running job of a team with a limit (``Share.max_run_of`` its
scheduling priority; the policy document's ``max_run``), from the job's start:

1. at the limit minus the pool's grace (``reclaim.grace_seconds``) a notice is recorded in the
   ledger (action ``run-time-notice``) and emitted (event ``run_time_limit``, outcome ``in_grace``,
   with ``stop_after``), as a preemption's grace is (handler._grace_ends): a duplicate or retried tick
   neither restarts nor skips it;
2. at the limit, and never before its notice's full grace, the job is stopped for good, as a
   preemption is: claimed in the ledger (action ``run-time-stop``) before anything is done, recorded
   ``terminating`` with ``stopped_for_good`` before TerminateJob and ``done`` after, kept open until
   then, so a stop whose answer was lost is read back by the next tick (``adapter.resume``: stopped,
   it owes no copy; still running, the claim fails and the next tick stops it again) and a listing
   that still shows the stopped job finds the claim taken. Its copy is never submitted: the job ran
   as long as it may. TerminateJob's reason tells its owner why [aws: batch.terminate-job-ends-failed].

A dry run records nothing and stops nothing; it emits ``would_notify`` / ``would_stop``. The jobs
stopped (or being stopped) are taken out of the state the tick plans with, so no preemption of the
same tick takes one of them and brings back a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..backends.base import ActionResult
from ..common.action_ledger import DONE, IN_GRACE, TERMINATING, ActionKey, Ledger
from ..planners.reclaim import PoolState

NOTICE_ACTION, STOP_ACTION = "run-time-notice", "run-time-stop"
STOPPING = frozenset({DONE, TERMINATING, "already_claimed"})
"""Outcomes after which the job is stopped, or being stopped by this tick or another one."""

Act = Callable[[str, str, str, Callable[[Callable[..., None]], ActionResult]], str]
"""``(job_id, action, reason, call) -> outcome``: the handler's claim, act and record (``handler._act``)."""


def enforce(
    pool: str,
    state: PoolState,
    adapter: Any,  # the pool's adapter: one that stops a job for good (``stop``), where a team has a limit
    ledger: Ledger,
    *,
    grace_s: float,
    acting: bool,
    act: Act,
    emit: Callable[[Mapping[str, Any]], None],
) -> PoolState:
    """Notify and stop each running job of ``state`` past its team's run-time limit; returns the
    state without the jobs stopped or being stopped."""
    limits = {share.name: share for share in state.shares}
    stopping = set()
    for job in state.running:
        share = limits.get(job.share)
        limit = share.max_run_of(job.priority) if share is not None else None
        if limit is None or state.now < job.started_at + limit - grace_s:
            continue
        reason = (
            f"run-time limit: job {job.job_id} of team {job.share} ran past {limit / 60:g} min, the longest its "
            f"jobs of priority {job.priority} may run in pool {pool} (max_run_minutes); it is not requeued"
        )
        stop_after = job.started_at + limit
        if acting and grace_s:
            key = ActionKey(pool=pool, job_id=job.job_id, attempt=adapter.attempt_of(job.job_id), action=NOTICE_ACTION)
            noticed = ledger.give_notice(key, now=state.now, grace=grace_s, reason=reason)
            stop_after = max(stop_after, noticed + grace_s)  # never stopped without its full notice
        if state.now < stop_after:
            outcome = IN_GRACE if acting else "would_notify"
        elif not acting:
            outcome = "would_stop"
        else:
            outcome = act(
                job.job_id, STOP_ACTION, reason, lambda progress, j=job, r=reason: adapter.stop(j, r, progress)
            )
        if outcome in STOPPING:
            stopping.add(job.job_id)
        emit(
            {
                "event": "run_time_limit",
                "pool": pool,
                "job_id": job.job_id,
                "share": job.share,
                "priority": job.priority,
                "limit_s": limit,
                "started_at": job.started_at,
                "stop_after": int(stop_after),
                "grace_s": grace_s,
                "dry_run": not acting,
                "outcome": outcome,
            }
        )
    if not stopping:
        return state
    return replace(state, running=tuple(j for j in state.running if j.job_id not in stopping))
