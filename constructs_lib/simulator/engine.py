"""The replay: a job trace through the reclaim planner and two baselines.

A discrete-event simulation of one pool. Jobs arrive at their submit time and finish when their
remaining work is done; the planner runs on a fixed tick (as the controller does) whenever
something changed. The baselines run through the very same planner with transformed shares:

* ``static``: every team is a reserve share of exactly its quota, no in-share preemption.
* ``pooled``: everyone in one reserve share as large as the pool, no preemption; one queue,
  highest priority then oldest first, quotas ignored.

Both baselines hand the planner only the jobs that could start this tick (``_Queues``): a team
far over its quota otherwise builds a backlog that every tick would plan over again.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from gpu_governance_runtime.reclaim.planner import (
    PendingJob,
    Plan,
    PoolState,
    RunningJob,
    Settings,
    Share,
    Strategy,
    apply_plan,
    next_change_at,
    plan_tick,
    queue_order,
    unchecked_state,
)

from constructs_lib.core.errors import GovernanceError, Problem
from .traces import TraceJob

POOLED_SHARE = "everyone"


@dataclass(frozen=True, kw_only=True)
class TeamStats:
    jobs: int
    wait_p50_s: float
    wait_p95_s: float


@dataclass(frozen=True, kw_only=True)
class RunMetrics:
    utilization: float  # completed work / (capacity x makespan): one late job moves it
    # Over the trace window (first to last submission), which the runs share:
    window_utilization: float  # capacity-seconds in use, work later lost included
    goodput: float  # work of completed jobs done in the window, lost work excluded
    makespan_s: float
    jobs_completed: int
    jobs_unfinished: int  # jobs that never finished: the never-runnable ones below
    never_runnable: tuple[str, ...]  # jobs larger than what their team may ever hold here
    preemptions: int
    lost_work_capacity_s: float
    guarantee_breaches: int
    teams: Mapping[str, TeamStats]
    usage_timeline: tuple[tuple[float, Mapping[str, int]], ...] = field(repr=False, default=())
    waits: Mapping[str, tuple[float, ...]] = field(repr=False, default_factory=dict)
    preempted_at: Mapping[str, tuple[float, ...]] = field(repr=False, default_factory=dict)  # job -> times

    def as_json(self, *, with_breaches: bool) -> dict[str, Any]:
        result = {
            "utilization": round(self.utilization, 4),
            "window_utilization": round(self.window_utilization, 4),
            "goodput": round(self.goodput, 4),
            "makespan_s": self.makespan_s,
            "jobs_completed": self.jobs_completed,
            "jobs_unfinished": self.jobs_unfinished,
            "jobs_never_runnable": len(self.never_runnable),
            "preemptions": self.preemptions,
            "lost_work_capacity_s": round(self.lost_work_capacity_s, 1),
            "teams": {name: vars(stats) for name, stats in sorted(self.teams.items())},
        }
        if with_breaches:
            result["guarantee_breaches"] = self.guarantee_breaches
        return result


def static_shares(shares: Sequence[Share]) -> tuple[Share, ...]:
    return tuple(Share(name=s.name, quota=s.quota, strategy=Strategy.RESERVE, fair_share_weight=s.fair_share_weight) for s in shares)


def pooled_share(capacity: Mapping[str, int]) -> tuple[Share, ...]:
    return (Share(name=POOLED_SHARE, quota=dict(capacity), strategy=Strategy.RESERVE),)


@dataclass
class _Progress:
    job: TraceJob
    remaining: float
    waiting_since: float
    waited: float = 0.0
    started_at: float = 0.0
    useful: float = 0.0  # capacity-seconds in the window kept by checkpoints so far
    version: int = 0  # invalidates a completion event after a preemption


def simulate(
    jobs: Sequence[TraceJob],
    *,
    shares: Sequence[Share],
    capacity: Mapping[str, int],
    tick_s: float = 60.0,
    settings: Settings = Settings(),
    pooled: bool = False,
    record_timeline: bool = False,
) -> RunMetrics:
    """Replay ``jobs``; with ``pooled`` every job joins the single pooled share."""
    _check_jobs(jobs, [POOLED_SHARE] if pooled else [s.name for s in shares], capacity, pooled)
    share_of = (lambda job: POOLED_SHARE) if pooled else (lambda job: job.team)
    arrivals = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
    progress: dict[str, _Progress] = {}
    state = PoolState(capacity=dict(capacity), shares=tuple(shares), running=(), pending=(), now=0.0)
    completions: list[tuple[float, int, str]] = []
    next_arrival = 0
    clock = 0.0
    work_done = lost = 0.0
    preemptions = breaches = 0
    first_submit = arrivals[0].submit_time if arrivals else 0.0
    last_finish = first_submit
    window_end = arrivals[-1].submit_time if arrivals else 0.0
    busy = useful = 0.0

    def in_window(start: float, end: float, count: int) -> float:
        return count * max(0.0, min(end, window_end) - max(start, first_submit))

    queues = _Queues() if _independent_queues(shares, capacity) else None
    changed = False
    timeline: list[tuple[float, Mapping[str, int]]] = []
    guarantees = {s.name: s for s in shares}
    preempted_at: dict[str, list[float]] = {}

    while True:
        # the next moment something happens: an arrival, a completion, or a follow-up tick
        candidates = []
        if next_arrival < len(arrivals):
            candidates.append(arrivals[next_arrival].submit_time)
        if completions:
            candidates.append(completions[0][0])
        if changed and (state.pending or queues):
            candidates.append(clock)
        if not candidates:
            break
        tick = _tick_at_or_after(min(candidates), tick_s)
        running = {j.job_id: j for j in state.running}
        pending = list(state.pending)
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
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit_time <= tick:
            job = arrivals[next_arrival]
            next_arrival += 1
            progress[job.job_id] = _Progress(job=job, remaining=job.duration, waiting_since=job.submit_time)
            waiting = PendingJob(
                job_id=job.job_id, share=share_of(job), instance_type=job.instance_type, count=job.count,
                priority=job.priority, submitted_at=job.submit_time, checkpointable=job.checkpointable,
                max_run_time_s=job.max_run_time,
            )
            (queues.add if queues is not None else pending.append)(waiting)
        if queues is not None:
            pending = queues.take_candidates(state.shares, running.values())
        state = unchecked_state(state, running=tuple(running.values()), pending=tuple(pending), now=tick)
        plan = plan_tick(state, settings) if pending else _NOTHING  # nothing waits: nothing to plan
        changed = bool(plan.starts or plan.preemptions or plan.capped)
        for preemption in plan.preemptions:
            entry = progress[preemption.job_id]
            elapsed = tick - entry.started_at
            segment = in_window(entry.started_at, tick, entry.job.count)
            busy += segment
            entry.version += 1
            entry.waiting_since = tick
            preemptions += 1
            preempted_at.setdefault(preemption.job_id, []).append(tick)
            if entry.job.checkpointable:
                entry.remaining -= elapsed
                entry.useful += segment
            else:
                lost += elapsed * entry.job.count
                entry.remaining = entry.job.duration
        state = apply_plan(state, plan)
        if queues is not None:  # the candidates that did not start wait in their queues again
            for waiting in state.pending:
                queues.add(waiting)
            state = unchecked_state(state, running=state.running, pending=(), now=tick)
        for start in plan.starts:
            entry = progress[start.job_id]
            entry.waited += tick - entry.waiting_since
            entry.started_at = tick
            entry.version += 1
            heapq.heappush(completions, (tick + entry.remaining, entry.version, start.job_id))
        if not pooled and state.pending:
            breaches += _guarantee_breaches(state, guarantees, progress, tick - tick_s)
        if record_timeline:
            timeline.append((tick, _usage_by_team(state, progress)))
        clock = tick + tick_s if changed else tick
        if not changed and (state.pending or queues):
            # a protected victim becomes preemptible, or a backed-off job may borrow: look again then
            expiry = next_change_at(state, settings)
            if expiry is not None:
                clock, changed = max(tick + tick_s, expiry), True

    unfinished = [entry for entry in progress.values() if entry.remaining > 0]
    waits: dict[str, list[float]] = {}
    for entry in progress.values():
        if entry.remaining <= 0:
            waits.setdefault(entry.job.team, []).append(entry.waited)
    makespan = max(0.0, last_finish - first_submit)
    total_capacity = sum(capacity.values())
    window = total_capacity * (window_end - first_submit)
    return RunMetrics(
        utilization=work_done / (total_capacity * makespan) if makespan else 0.0,
        window_utilization=busy / window if window else 0.0,
        goodput=useful / window if window else 0.0,
        makespan_s=makespan,
        jobs_completed=len(progress) - len(unfinished),
        jobs_unfinished=len(unfinished) + len(arrivals) - next_arrival,
        never_runnable=never_runnable(jobs, shares, capacity, pooled=pooled),
        preemptions=preemptions,
        lost_work_capacity_s=lost,
        guarantee_breaches=breaches,
        teams={team: _stats(values) for team, values in waits.items()},
        usage_timeline=tuple(timeline),
        waits={team: tuple(values) for team, values in waits.items()},
        preempted_at={job_id: tuple(times) for job_id, times in preempted_at.items()},
    )


def _check_jobs(jobs: Sequence[TraceJob], teams: Sequence[str], capacity: Mapping[str, int], pooled: bool) -> None:
    """What the planner's state would check on every tick, once: the replay builds its states
    unchecked (planner.unchecked_state)."""
    if not pooled:
        check_trace_fits_pool(jobs, [Share(name=t, quota={}, strategy=Strategy.LEND) for t in teams], capacity)
    problems = [Problem(path=f"job {job.job_id}.count", wrong="not a whole number of instances >= 1", value=job.count, allowed="1 or more") for job in jobs if job.count < 1]
    if len({job.job_id for job in jobs}) != len(jobs):
        problems.append(Problem(path="jobs", wrong="duplicate job ids", value=len(jobs) - len({job.job_id for job in jobs}), allowed="unique ids"))
    if problems:
        raise GovernanceError(problems[:20])


_NOTHING = Plan(starts=(), preemptions=(), capped=False)


def _independent_queues(shares: Sequence[Share], capacity: Mapping[str, int]) -> bool:
    """Whether every share is a reserve share without in-share preemption and, per instance
    type, the quotas fit the pool (both baselines). Then no share lends, borrows or preempts, a
    share's free room is exactly its quota minus its use, and the planner starts a share's job
    exactly when it fits the room left by the share's jobs before it in queue order."""
    return all(s.strategy is Strategy.RESERVE and not s.in_share_preemption for s in shares) and all(
        sum(s.quota.get(t, 0) for s in shares) <= size for t, size in capacity.items()
    )


class _Queues:
    """The waiting jobs under ``_independent_queues``, per share, instance type and size, each
    in the planner's queue order. A job of size c that starts with room r was preceded in its
    bucket only by jobs that started too (each fitted: the room only shrinks), so only the first
    r // c jobs of each bucket with c <= r can start this tick: the planner gets those and
    decides, and the backlog is never walked."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], dict[int, list[tuple[tuple, PendingJob]]]] = {}
        self._size = 0

    def __bool__(self) -> bool:
        return self._size > 0

    def add(self, job: PendingJob) -> None:
        sizes = self._buckets.setdefault((job.share, job.instance_type), {})
        heapq.heappush(sizes.setdefault(job.count, []), (queue_order(job), job))
        self._size += 1

    def take_candidates(self, shares: Sequence[Share], running: Iterable[RunningJob]) -> list[PendingJob]:
        """Remove and return the jobs that could start now; the caller adds back those that do not."""
        usage: dict[tuple[str, str], int] = {}
        for job in running:
            usage[job.share, job.instance_type] = usage.get((job.share, job.instance_type), 0) + job.count
        quotas = {s.name: s.quota for s in shares}
        taken: list[PendingJob] = []
        for (share, instance_type), sizes in self._buckets.items():
            room = quotas[share].get(instance_type, 0) - usage.get((share, instance_type), 0)
            for size in [c for c in sizes if c <= room]:
                bucket = sizes[size]
                taken += (heapq.heappop(bucket)[1] for _ in range(min(room // size, len(bucket))))
                if not bucket:
                    del sizes[size]
        self._size -= len(taken)
        return taken


def never_runnable(jobs: Sequence[TraceJob], shares: Sequence[Share], capacity: Mapping[str, int], *, pooled: bool = False) -> tuple[str, ...]:
    """Ids of the jobs larger than their share's ceiling: they wait for ever under these shares."""
    ceilings = {(s.name, t): s.ceiling(t, size) for s in shares for t, size in capacity.items()}
    return tuple(
        job.job_id for job in jobs
        if job.count > ceilings.get((POOLED_SHARE if pooled else job.team, job.instance_type), 0)
    )


def _tick_at_or_after(time: float, tick_s: float) -> float:
    ticks = -(-time // tick_s)
    return ticks * tick_s


def _guarantee_breaches(state: PoolState, shares: Mapping[str, Share], progress: Mapping[str, _Progress], waited_before: float) -> int:
    """Teams with a job inside their guarantee that has waited longer than a tick while another
    team still runs on borrowed capacity of the same type: lent capacity not reclaimed in time."""
    usage: dict[tuple[str, str], int] = {}
    for job in state.running:
        usage[job.share, job.instance_type] = usage.get((job.share, job.instance_type), 0) + job.count
    borrowing = {t for (name, t), used in usage.items() if used > shares[name].quota.get(t, 0)}
    breached = set()
    for job in state.pending:
        if job.instance_type not in borrowing or progress[job.job_id].waiting_since > waited_before:
            continue
        quota = shares[job.share].quota.get(job.instance_type, 0)
        if usage.get((job.share, job.instance_type), 0) + job.count <= quota:
            breached.add(job.share)
    return len(breached)


def _usage_by_team(state: PoolState, progress: Mapping[str, _Progress]) -> dict[str, int]:
    usage: dict[str, int] = {}
    for job in state.running:
        team = progress[job.job_id].job.team
        usage[team] = usage.get(team, 0) + job.count
    return usage


def _stats(values: Sequence[float]) -> TeamStats:
    return TeamStats(jobs=len(values), wait_p50_s=_percentile(values, 50), wait_p95_s=_percentile(values, 95))


def _percentile(values: Sequence[float], percent: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, -(-len(ordered) * percent // 100) - 1))
    return float(ordered[int(index)])


# --- the comparison ---------------------------------------------------------------------------


def compare(
    jobs: Sequence[TraceJob], *, shares: Sequence[Share], capacity: Mapping[str, int], tick_s: float, settings: Settings, record_timeline: bool = False
) -> dict[str, RunMetrics]:
    """The policy and both baselines over the same trace."""
    check_trace_fits_pool(jobs, shares, capacity)
    run = lambda **how: simulate(jobs, capacity=capacity, tick_s=tick_s, settings=settings, record_timeline=record_timeline, **how)  # noqa: E731
    return {
        "policy": run(shares=shares),
        "static": run(shares=static_shares(shares)),
        "pooled": run(shares=pooled_share(capacity), pooled=True),
    }


def check_trace_fits_pool(jobs: Sequence[TraceJob], shares: Sequence[Share], capacity: Mapping[str, int]) -> None:
    teams = {s.name for s in shares}
    problems: list[Problem] = []
    for job in jobs:
        if job.team not in teams:
            problems.append(Problem(path=f"job {job.job_id}.team", wrong="team has no quota in the pool", value=job.team, allowed=f"one of {sorted(teams)}"))
        if job.instance_type not in capacity:
            problems.append(Problem(path=f"job {job.job_id}.instance_type", wrong="not in the pool", value=job.instance_type, allowed=f"one of {sorted(capacity)}"))
        elif job.count > capacity[job.instance_type]:
            problems.append(Problem(path=f"job {job.job_id}.count", wrong="larger than the pool", value=job.count, allowed=f"at most {capacity[job.instance_type]}"))
        if len(problems) >= 20:
            break
    if problems:
        raise GovernanceError(problems)
