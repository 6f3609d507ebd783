"""The replay as main ran it before the speed work of issue 16, kept as the obvious reference:
every tick hands the planner the whole pool state (every running and every waiting job, full
PendingJob / RunningJob objects) and applies the plan with ``planner.apply_plan``; no queues, no
incremental state, no shortcuts. The engine (constructs_lib/simulator/engine.py) must make
exactly its decisions: tests/simulate/test_replay_reference.py compares every job's runs.

It uses the planner and the engine's rules for time (ticks on arrivals, completions, a follow-up
tick after a change, ``next_change_at`` when nothing changed), so it follows the planner's rules
when they change; a change of the engine's own rules (when to tick, what a preemption costs) must
be made here too.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from constructs_lib.simulator.engine import POOLED_SHARE, RunMetrics, never_runnable, team_stats
from constructs_lib.simulator.traces import TraceJob
from gpu_governance_runtime.planners.reclaim import (
    PendingJob,
    PoolState,
    Settings,
    Share,
    apply_plan,
    asking_shares,
    in_use_by_share,
    next_change_at,
    pending_guarantee_jobs,
    plan_tick,
)


@dataclass
class _Job:
    job: TraceJob
    remaining: float
    waiting_since: float
    waited: float = 0.0
    started_at: float = 0.0
    useful: float = 0.0
    version: int = 0
    runs: list[tuple[float, float]] = field(default_factory=list)


def reference_replay(
    jobs: Sequence[TraceJob],
    *,
    shares: Sequence[Share],
    capacity: Mapping[str, int],
    tick_s: float,
    settings: Settings,
    pooled: bool = False,
) -> RunMetrics:
    """The replay's metrics (timeline and every job's runs included)."""
    share_of = (lambda job: POOLED_SHARE) if pooled else (lambda job: job.team)
    arrivals = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
    state = PoolState(capacity=dict(capacity), shares=tuple(shares), running=(), pending=(), now=0.0)
    progress: dict[str, _Job] = {}
    completions: list[tuple[float, int, str]] = []
    next_arrival, clock, changed = 0, 0.0, False
    work_done = lost = busy = useful = 0.0
    preemptions = breaches = stopped_for_good = 0
    started: dict[str, float] = {}  # each job's first start
    team_used: dict[str, float] = {}  # per team: capacity-seconds its runs held
    team_lost: dict[str, float] = {}
    asked_s: dict[str, float] = {}
    breached_s: dict[str, float] = {}
    asked_since: set[str] = set()
    breached_since: set[str] = set()
    since = 0.0
    first_submit = arrivals[0].submit_time if arrivals else 0.0
    window_end = arrivals[-1].submit_time if arrivals else 0.0
    last_finish = first_submit
    timeline = []
    preempted_at: dict[str, list[float]] = {}
    reclaim_waits: list[float] = []

    def in_window(start: float, end: float, count: int) -> float:
        return count * max(0.0, min(end, window_end) - max(start, first_submit))

    while True:
        candidates = []
        if next_arrival < len(arrivals):
            candidates.append(arrivals[next_arrival].submit_time)
        if completions:
            candidates.append(completions[0][0])
        if changed and state.pending:
            candidates.append(clock)
        if not candidates:
            break
        tick = -(-min(candidates) // tick_s) * tick_s
        running = {j.job_id: j for j in state.running}
        while completions and completions[0][0] <= tick:
            finished_at, version, job_id = heapq.heappop(completions)
            entry = progress[job_id]
            if version != entry.version or job_id not in running:
                continue
            del running[job_id]
            work_done += entry.job.duration * entry.job.count
            segment = in_window(entry.started_at, finished_at, entry.job.count)
            busy += segment
            useful += entry.useful + segment
            last_finish = max(last_finish, finished_at)
            entry.remaining = 0.0
            entry.runs.append((entry.started_at, finished_at))
            team = entry.job.team
            team_used[team] = team_used.get(team, 0.0) + (finished_at - entry.started_at) * entry.job.count
        pending = list(state.pending)
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit_time <= tick:
            job = arrivals[next_arrival]
            next_arrival += 1
            progress[job.job_id] = _Job(job=job, remaining=job.duration, waiting_since=job.submit_time)
            pending.append(
                PendingJob(
                    job_id=job.job_id,
                    share=share_of(job),
                    instance_type=job.instance_type,
                    count=job.count,
                    priority=job.priority,
                    submitted_at=job.submit_time,
                    checkpointable=job.checkpointable,
                    max_run_time_s=job.max_run_time,
                    restartable=job.restartable,
                )
            )
        state = PoolState(
            capacity=state.capacity,
            shares=state.shares,
            running=tuple(running.values()),
            pending=tuple(pending),
            now=tick,
        )
        plan = plan_tick(state, settings)
        changed = bool(plan.starts or plan.preemptions)
        for preemption in plan.preemptions:
            entry = progress[preemption.job_id]
            elapsed = tick - entry.started_at
            segment = in_window(entry.started_at, tick, entry.job.count)
            busy += segment
            entry.version += 1
            entry.waiting_since = tick
            entry.runs.append((entry.started_at, tick))
            preemptions += 1
            preempted_at.setdefault(preemption.job_id, []).append(tick)
            team = entry.job.team
            team_used[team] = team_used.get(team, 0.0) + elapsed * entry.job.count
            if not entry.job.restartable:  # not requeued: lost, unfinished
                stopped_for_good += 1
                lost += elapsed * entry.job.count
                team_lost[team] = team_lost.get(team, 0.0) + elapsed * entry.job.count
            elif entry.job.checkpointable:
                entry.remaining -= elapsed
                entry.useful += segment
            else:
                lost += elapsed * entry.job.count
                team_lost[team] = team_lost.get(team, 0.0) + elapsed * entry.job.count
                entry.remaining = entry.job.duration
        state = apply_plan(state, plan)
        reclaiming = {p.for_job for p in plan.preemptions}
        for start in plan.starts:
            entry = progress[start.job_id]
            if start.job_id in reclaiming:
                reclaim_waits.append(tick - entry.waiting_since)
            entry.waited += tick - entry.waiting_since
            entry.started_at = tick
            started.setdefault(start.job_id, tick)
            entry.version += 1
            heapq.heappush(completions, (tick + entry.remaining, entry.version, start.job_id))
        if not pooled:
            breached = _guarantee_breaches(state, {s.name: s for s in shares}, progress, tick - tick_s)
            breaches += len(breached)
            # a capped plan that moved nothing: again next tick only while a guarantee waits on borrowers
            changed = changed or (
                plan.capped and bool(_guarantee_breaches(state, {s.name: s for s in shares}, progress, tick))
            )
            # each team's asking and breached state holds from this tick to the next
            for team in asked_since:
                asked_s[team] = asked_s.get(team, 0.0) + tick - since
            for team in breached_since:
                breached_s[team] = breached_s.get(team, 0.0) + tick - since
            waiting = ((j.share, j.instance_type, j.count) for j in state.pending)
            asked_since, breached_since, since = (
                asking_shares(shares, in_use_by_share(state.running), waiting),
                breached,
                tick,
            )
        usage: dict[tuple[str, str], int] = {}
        for job in state.running:
            key = (progress[job.job_id].job.team, job.instance_type)
            usage[key] = usage.get(key, 0) + job.count
        timeline.append((tick, usage))
        clock = tick + tick_s if changed else tick
        if not changed and state.pending:
            expiry = next_change_at(state, settings)
            if expiry is not None:
                clock, changed = max(tick + tick_s, expiry), True

    waits: dict[str, list[float]] = {}
    for entry in progress.values():
        if entry.remaining <= 0:
            waits.setdefault(entry.job.team, []).append(entry.waited)
    unfinished_by_team: dict[str, int] = {}
    for entry in progress.values():
        if entry.remaining > 0:
            unfinished_by_team[entry.job.team] = unfinished_by_team.get(entry.job.team, 0) + 1
    unfinished = sum(unfinished_by_team.values())
    makespan = max(0.0, last_finish - first_submit)
    total_capacity = sum(capacity.values())
    window = total_capacity * (window_end - first_submit)
    return RunMetrics(
        utilization=work_done / (total_capacity * makespan) if makespan else 0.0,
        window_utilization=busy / window if window else 0.0,
        goodput=useful / window if window else 0.0,
        makespan_s=makespan,
        jobs_completed=len(progress) - unfinished,
        jobs_unfinished=unfinished,
        never_runnable=never_runnable(jobs, shares, capacity, pooled=pooled),
        not_restartable=sum(not job.restartable for job in jobs),
        stopped_for_good=stopped_for_good,
        preemptions=preemptions,
        lost_work_capacity_s=lost,
        team_used_capacity_s=team_used,
        team_lost_capacity_s=team_lost,
        guarantee_breaches=breaches,
        guarantee_asked_s=asked_s,
        guarantee_breached_s=breached_s,
        teams=team_stats(waits, unfinished_by_team),
        usage_timeline=tuple(timeline),
        waits={team: tuple(values) for team, values in waits.items()},
        preempted_at={job_id: tuple(times) for job_id, times in preempted_at.items()},
        runs={job_id: tuple(entry.runs) for job_id, entry in progress.items() if entry.runs},
        started=started,
        reclaim_waits=tuple(reclaim_waits),
    )


def _guarantee_breaches(
    state: PoolState, shares: Mapping[str, Share], progress: Mapping[str, _Job], waited_before: float
) -> set[str]:
    usage: dict[tuple[str, str], int] = {}
    for job in state.running:
        usage[job.share, job.instance_type] = usage.get((job.share, job.instance_type), 0) + job.count
    borrowing = {t for (name, t), used in usage.items() if used > shares[name].quota.get(t, 0)}
    waited = [
        job
        for job in state.pending
        if job.instance_type in borrowing and progress[job.job_id].waiting_since <= waited_before
    ]
    return {job.share for job in pending_guarantee_jobs(shares.values(), state.running, waited)}
