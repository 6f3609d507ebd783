"""The replay: a job trace through the reclaim planner and two baselines.

A discrete-event simulation of one pool. Jobs arrive at their submit time and finish when their
remaining work is done; the planner runs on a fixed tick (as the controller does) whenever
something changed. The baselines replay the trace under transformed shares:

* ``static``: every team is a reserve share of exactly its quota, no in-share preemption.
* ``pooled``: everyone in one reserve share as large as the pool, no preemption; one queue,
  highest priority then oldest first, quotas ignored.

Under such shares the planner's decision is simple: a job starts when it fits the room its share's
quota leaves after the share's jobs before it in queue order. The baselines take that decision
directly (``_Queues``), without the planner's fixed cost per tick; a baseline whose quotas
overbook the pool goes through the planner like the policy (``_Planner``). Both keep their state
from tick to tick; tests/simulate/test_replay_reference.py proves every job's runs identical to
a replay that hands the planner the whole pool on every tick.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from constructs_lib.core.errors import GovernanceError, Problem
from gpu_governance_runtime.reclaim.fair_share import decayed_usage
from gpu_governance_runtime.reclaim.planner import (
    PendingJob,
    PoolState,
    RunningJob,
    Settings,
    Share,
    ShareGroup,
    Strategy,
    _started,
    apply_plan,
    asking_shares,
    breach_tolerance,
    breached_shares,
    may_borrow,
    next_change_at,
    plan_tick,
    unchecked_state,
)
from gpu_governance_runtime.usage import kept_percent

from .traces import TraceJob

POOLED_SHARE = "everyone"
COMPLETION, STOP = 0, 1  # what an event of the replay does to its job: it finishes, or its grace ends


@dataclass(frozen=True, kw_only=True)
class TeamStats:
    """A team's jobs in one run. The percentiles are over all its jobs, a job that never finished
    counting as an endless wait: None when the percentile falls among those (the wait is "never")."""

    jobs: int
    jobs_unfinished: int
    wait_p50_s: float | None
    wait_p95_s: float | None


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
    not_restartable: int  # jobs of the trace the controller cannot bring back once stopped (TraceJob.restartable false)
    stopped_for_good: int  # of those, the ones a reclaim stopped: not requeued, their work lost
    preemptions: int
    lost_work_capacity_s: float
    guarantee_breaches: int
    teams: Mapping[str, TeamStats]
    # per team: seconds it asked for its guarantee, and of those the seconds it was breached
    guarantee_asked_s: Mapping[str, float] = field(default_factory=dict)
    guarantee_breached_s: Mapping[str, float] = field(default_factory=dict)
    # how long each job whose start preempted others waited, to the moment its victims were gone
    # (their grace included): what a lender waits for capacity it is owed
    reclaim_waits: tuple[float, ...] = field(repr=False, default=())
    usage_timeline: tuple[tuple[float, Mapping[tuple[str, str], int]], ...] = field(
        repr=False, default=()
    )  # (team, instance type) -> instances
    waits: Mapping[str, tuple[float, ...]] = field(repr=False, default_factory=dict)
    preempted_at: Mapping[str, tuple[float, ...]] = field(repr=False, default_factory=dict)  # job -> times
    runs: Mapping[str, tuple[tuple[float, float], ...]] = field(
        repr=False, default_factory=dict
    )  # job -> (start, end) of each run, if recorded
    started: Mapping[str, float] = field(repr=False, default_factory=dict)  # job -> its first start, if recorded
    # per team: capacity-seconds its jobs held (work later lost included), and the work lost
    team_used_capacity_s: Mapping[str, float] = field(repr=False, default_factory=dict)
    team_lost_capacity_s: Mapping[str, float] = field(repr=False, default_factory=dict)

    def as_json(self, *, with_breaches: bool) -> dict[str, Any]:
        result = {
            "utilization": round(self.utilization, 4),
            "window_utilization": round(self.window_utilization, 4),
            "goodput": round(self.goodput, 4),
            "makespan_s": self.makespan_s,
            "jobs_completed": self.jobs_completed,
            "jobs_unfinished": self.jobs_unfinished,
            "jobs_never_runnable": len(self.never_runnable),
            "jobs_not_restartable": self.not_restartable,
            "jobs_stopped_for_good": self.stopped_for_good,
            "preemptions": self.preemptions,
            "lost_work_capacity_s": round(self.lost_work_capacity_s, 1),
            "reclaim_wait_max_s": max(self.reclaim_waits, default=0.0),
            "teams": {name: vars(stats) for name, stats in sorted(self.teams.items())},
        }
        if with_breaches:
            result["guarantee_breaches"] = self.guarantee_breaches
            result["guarantee_kept"] = self.guarantee_kept()
        return result

    def guarantee_kept(self) -> dict[str, dict[str, float | None]]:
        """Per team that asked for its guarantee: hours asked, hours breached, percent kept."""
        return {
            team: {
                "asked_h": round(asked / 3600, 2),
                "breached_h": round(self.guarantee_breached_s.get(team, 0.0) / 3600, 2),
                "kept_percent": _rounded(kept_percent(asked, self.guarantee_breached_s.get(team, 0.0))),
            }
            for team, asked in sorted(self.guarantee_asked_s.items())
        }


def _rounded(percent: float | None) -> float | None:
    return None if percent is None else round(percent, 1)


@dataclass(frozen=True, kw_only=True)
class Resume:
    """The pool a replay starts from instead of an empty one (a forecast replays the live pool)."""

    at: float  # the replay's first tick is at or after it: jobs submitted earlier wait until then
    running: Sequence[tuple[TraceJob, float]] = ()  # jobs that run then, each with its start
    # times a job was preempted before: its protection (min_run_time_s) and re-borrow backoff
    preempted: Mapping[str, int] = field(default_factory=dict)


def static_shares(shares: Sequence[Share]) -> tuple[Share, ...]:
    return tuple(
        Share(name=s.name, quota=s.quota, strategy=Strategy.RESERVE, fair_share_weight=s.fair_share_weight)
        for s in shares
    )


def pooled_share(capacity: Mapping[str, int]) -> tuple[Share, ...]:
    return (Share(name=POOLED_SHARE, quota=dict(capacity), strategy=Strategy.RESERVE),)


@dataclass(slots=True)
class _Progress:
    """A job that arrived and has not finished yet."""

    job: TraceJob
    index: int  # position in arrival order, in which the waits are reported
    share: str
    remaining: float
    waiting_since: float
    waited: float = 0.0
    started_at: float = 0.0
    useful: float = 0.0  # capacity-seconds in the window kept by checkpoints so far
    version: int = 0  # invalidates a completion event after a preemption
    stop_at: float | None = None  # preempted, it runs on until then (its grace)
    awaiting_room: bool = False  # started by the planner, it waits for victims in their grace to stop
    reclaims: bool = False  # its start preempted others


def simulate(
    jobs: Sequence[TraceJob],
    *,
    shares: Sequence[Share],
    capacity: Mapping[str, int],
    tick_s: float = 60.0,
    settings: Settings = Settings(),
    pooled: bool = False,
    record_timeline: bool = False,
    record_runs: bool = False,
    groups: Sequence[ShareGroup] = (),
    resume: Resume | None = None,
) -> RunMetrics:
    """Replay ``jobs``; with ``pooled`` every job joins the single pooled share. ``record_runs``
    keeps every job's runs and first start (``RunMetrics.runs``, ``started``): memory per job,
    for tests and small traces. ``groups``: the pool's groups of shares, planned as the controller
    plans them. ``resume``: the pool the replay starts from, instead of an empty one."""
    running = resume.running if resume else ()
    _check_jobs(
        [*jobs, *(job for job, _ in running)], [POOLED_SHARE] if pooled else [s.name for s in shares], capacity, pooled
    )
    return _replay(
        jobs,
        _arrival_order(jobs),
        resume=resume,
        shares=shares,
        capacity=capacity,
        tick_s=tick_s,
        settings=settings,
        pooled=pooled,
        record_timeline=record_timeline,
        record_runs=record_runs,
        groups=groups,
    )


def _arrival_order(jobs: Sequence[TraceJob]) -> list[TraceJob]:
    return sorted(jobs, key=lambda j: (j.submit_time, j.job_id))


def _replay(
    jobs: Sequence[TraceJob],
    arrivals: Sequence[TraceJob],
    *,
    shares: Sequence[Share],
    capacity: Mapping[str, int],
    tick_s: float,
    settings: Settings,
    pooled: bool,
    record_timeline: bool,
    record_runs: bool,
    groups: Sequence[ShareGroup] = (),
    resume: Resume | None = None,
) -> RunMetrics:
    """The event loop over checked jobs, ``arrivals`` being them in arrival order.

    With a grace (``settings.grace_s``) the plan is carried out as the controller and Slurm carry
    it out: a victim runs on for the grace (it may finish meanwhile; a checkpointing one keeps its
    work up to its stop) and the jobs the planner starts get their instances as victims stop, in
    the order they were started. Without one, victims stop and jobs start on the tick."""
    decider = (
        _Queues(shares)
        if not groups and _independent_queues(shares, capacity)
        else _Planner(shares, capacity, settings, groups, preempted=resume.preempted if resume else {})
    )
    opens = resume.at if resume else -math.inf  # no tick before it: a job submitted earlier waits for it
    grace = settings.grace_s
    progress: dict[str, _Progress] = {}
    waited: list[float | None] = [None] * len(arrivals)  # per arrival: the wait of a job that finished
    events: list[tuple[float, int, str, int]] = []  # (time, version, job id, COMPLETION or STOP)
    usage: dict[tuple[str, str], int] = {}  # instances in use per team and instance type: a p5 is not a g6e
    occupied = dict.fromkeys(capacity, 0)  # instances in use per type, victims in their grace included
    awaiting_room: dict[str, list[_Progress]] = {t: [] for t in capacity}  # started, waiting for victims to stop
    reclaim_waits: list[float] = []
    next_arrival = 0
    clock = 0.0
    changed = False
    work_done = lost = busy = useful = 0.0
    preemptions = breaches = stopped_for_good = 0
    tolerance = breach_tolerance(tick_s, settings)
    asked_s: dict[str, float] = {}  # per team: seconds it asked for its guarantee (planner.asking_shares)
    breached_s: dict[str, float] = {}  # of those, seconds its guarantee was broken (planner.breached_shares)
    asked_since: set[str] = set()
    breached_since: set[str] = set()
    since = 0.0
    first_submit = arrivals[0].submit_time if arrivals else 0.0
    last_finish = first_submit
    window_end = arrivals[-1].submit_time if arrivals else 0.0
    timeline: list[tuple[float, Mapping[tuple[str, str], int]]] = []
    preempted_at: dict[str, list[float]] = {}
    runs: dict[str, list[tuple[float, float]]] = {}
    started: dict[str, float] = {}
    team_used: dict[str, float] = {}  # per team: capacity-seconds its jobs held, work later lost included
    team_lost: dict[str, float] = {}  # of those, the work lost to preemptions
    # Usage-based fair share (Settings.usage_half_life_s): each team's decayed usage, advanced by
    # the one computation the controller uses at every moment a team's use changes, so it is exact.
    half_life = None if pooled else settings.usage_half_life_s
    past: dict[str, float] = {}
    past_at: float | None = resume.at if resume else None  # a forecast knows no usage before the live pool

    def account(at: float) -> None:
        """Advance the decayed usage to ``at`` with the use held since; call before use changes."""
        nonlocal past, past_at
        if half_life is None or (past_at is not None and at <= past_at):
            return  # a resumed job's start, before the replay opens: no history before it
        if past_at is not None:
            in_use: dict[str, int] = {}
            for (team, _), instances in usage.items():
                in_use[team] = in_use.get(team, 0) + instances
            past = decayed_usage(past, in_use, elapsed_s=at - past_at, half_life_s=half_life)
        past_at = at

    def in_window(start: float, end: float, count: int) -> float:
        return count * max(0.0, min(end, window_end) - max(start, first_submit))

    def begin(entry: _Progress, at: float) -> None:
        job = entry.job
        entry.awaiting_room = False
        if entry.reclaims:
            reclaim_waits.append(at - entry.waiting_since)
        entry.waited += at - entry.waiting_since
        entry.started_at = at
        entry.version += 1
        account(at)
        key = (job.team, job.instance_type)
        usage[key] = usage.get(key, 0) + job.count
        occupied[job.instance_type] += job.count
        heapq.heappush(events, (at + entry.remaining, entry.version, job.job_id, COMPLETION))
        if record_runs:
            runs.setdefault(job.job_id, [])
            started.setdefault(job.job_id, at)

    def begin_awaiting(instance_type: str, at: float) -> None:
        queue = awaiting_room[instance_type]
        while queue and occupied[instance_type] + queue[0].job.count <= capacity[instance_type]:
            begin(queue.pop(0), at)

    def stop(entry: _Progress, at: float) -> None:
        nonlocal busy, lost, preemptions, stopped_for_good
        job = entry.job
        elapsed = at - entry.started_at
        segment = in_window(entry.started_at, at, job.count)
        busy += segment
        entry.version += 1
        entry.stop_at = None
        entry.waiting_since = at
        account(at)
        usage[job.team, job.instance_type] -= job.count
        occupied[job.instance_type] -= job.count
        preemptions += 1
        preempted_at.setdefault(job.job_id, []).append(at)
        if record_runs:
            runs[job.job_id].append((entry.started_at, at))
        team_used[job.team] = team_used.get(job.team, 0.0) + elapsed * job.count
        if job.restartable and job.checkpointable:
            entry.remaining -= elapsed
            entry.useful += segment
            return
        # nothing requeues a job that is not restartable (planner.comes_back): it stays unfinished
        stopped_for_good += not job.restartable
        entry.remaining = job.duration
        lost += elapsed * job.count
        team_lost[job.team] = team_lost.get(job.team, 0.0) + elapsed * job.count

    for job, started_at in resume.running if resume else ():
        entry = progress[job.job_id] = _Progress(
            job, len(waited), POOLED_SHARE if pooled else job.team, job.duration, started_at
        )
        waited.append(None)  # reported with no team's waits: it did not wait in this replay
        decider.seed(entry)
        begin(entry, started_at)

    while True:
        # the next moment something happens: an arrival, a completion or a victim's stop, or a follow-up tick
        moment = max(opens, arrivals[next_arrival].submit_time) if next_arrival < len(arrivals) else math.inf
        if events and events[0][0] < moment:
            moment = events[0][0]
        if changed and clock < moment and decider.waiting():
            moment = clock
        if moment == math.inf:
            break
        tick = _tick_at_or_after(moment, tick_s)
        while events and events[0][0] <= tick:
            at, version, job_id, kind = heapq.heappop(events)
            entry = progress.get(job_id)
            if entry is None or version != entry.version:
                continue  # the run this event ended was preempted (its job may have finished since)
            job = entry.job
            if kind == STOP:
                if entry.stop_at == at:  # else the planner chose it again during its grace: it never stopped
                    stop(entry, at)
                    begin_awaiting(job.instance_type, at)
                continue
            del progress[job_id]
            work_done += job.duration * job.count
            segment = in_window(entry.started_at, at, job.count)
            busy += segment
            useful += entry.useful + segment
            last_finish = max(last_finish, at)
            waited[entry.index] = entry.waited
            team_used[job.team] = team_used.get(job.team, 0.0) + (at - entry.started_at) * job.count
            account(at)
            usage[job.team, job.instance_type] -= job.count
            occupied[job.instance_type] -= job.count
            decider.finish(entry)  # a victim that finished in its grace leaves the planner's queue
            if record_runs:
                runs[job_id].append((entry.started_at, at))
            begin_awaiting(job.instance_type, at)
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit_time <= tick:
            job = arrivals[next_arrival]
            entry = progress[job.job_id] = _Progress(
                job, next_arrival, POOLED_SHARE if pooled else job.team, job.duration, job.submit_time
            )
            decider.arrive(entry)
            next_arrival += 1
        account(tick)
        starts, preempted, reclaiming, capped = decider.plan(tick, past)
        changed = bool(starts or preempted)
        for job_id in preempted:
            entry = progress[job_id]
            if entry.awaiting_room:  # chosen before it got its instances: it never ran
                awaiting_room[entry.job.instance_type].remove(entry)
                entry.awaiting_room = False
                preemptions += 1
            elif grace:
                entry.stop_at = tick + grace
                entry.waiting_since = tick
                heapq.heappush(events, (entry.stop_at, entry.version, job_id, STOP))
            else:
                stop(entry, tick)
        for job_id in starts:
            entry = progress[job_id]
            if entry.stop_at is not None:  # chosen again during its grace: it runs on, never stopped
                entry.stop_at = None
                continue
            entry.reclaims = job_id in reclaiming
            entry.awaiting_room = True
            awaiting_room[entry.job.instance_type].append(entry)
            begin_awaiting(entry.job.instance_type, tick)  # in the plan's order
        if not pooled:
            # a lender waits a tick, and the grace of the victims it preempts, before it breaches
            breached = decider.breached(progress, tick - tolerance)
            breaches += len(breached)
            # what held since the last tick held until this one (nothing changes between ticks)
            for team in asked_since:
                asked_s[team] = asked_s.get(team, 0.0) + tick - since
            for team in breached_since:
                breached_s[team] = breached_s.get(team, 0.0) + tick - since
            # a team breached asks (a job its group's quota covers asks beyond its team's own quota)
            asked_since, breached_since, since = decider.asking() | breached, breached, tick
        # A capped plan that moved nothing looks again next tick only while a job waits inside its
        # guarantee with others borrowing (each such tick may count a breach; the borrowers end):
        # otherwise the pool is as it was and every later tick would plan the same, for ever
        # (time-bound changes come from next_change_at below).
        changed = changed or (capped and bool(decider.breached(progress, tick)))
        if record_timeline:
            timeline.append((tick, {key: used for key, used in usage.items() if used}))
        clock = tick + tick_s if changed else tick
        if not changed and decider.waiting():
            # a protected victim becomes preemptible, or a backed-off job may borrow: look again then
            expiry = decider.next_change_at()
            if expiry is not None:
                clock, changed = max(tick + tick_s, expiry), True

    waits: dict[str, list[float]] = {}
    unfinished: dict[str, int] = {}
    for job, wait in zip(arrivals, waited, strict=False):
        if wait is None:
            unfinished[job.team] = unfinished.get(job.team, 0) + 1
        else:
            waits.setdefault(job.team, []).append(wait)
    makespan = max(0.0, last_finish - first_submit)
    total_capacity = sum(capacity.values())
    window = total_capacity * (window_end - first_submit)
    return RunMetrics(
        utilization=work_done / (total_capacity * makespan) if makespan else 0.0,
        window_utilization=busy / window if window else 0.0,
        goodput=useful / window if window else 0.0,
        makespan_s=makespan,
        jobs_completed=next_arrival + len(waited) - len(arrivals) - len(progress),
        jobs_unfinished=len(progress) + len(arrivals) - next_arrival,
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
        teams=team_stats(waits, unfinished),
        reclaim_waits=tuple(reclaim_waits),
        usage_timeline=tuple(timeline),
        waits={team: tuple(values) for team, values in waits.items()},
        preempted_at={job_id: tuple(times) for job_id, times in preempted_at.items()},
        runs={job_id: tuple(job_runs) for job_id, job_runs in runs.items()},
        started=started,
    )


def _check_jobs(jobs: Sequence[TraceJob], teams: Sequence[str], capacity: Mapping[str, int], pooled: bool) -> None:
    """What the planner's state would check on every tick, once: the replay builds its states
    unchecked (planner.unchecked_state)."""
    if not pooled:
        check_trace_fits_pool(jobs, [Share(name=t, quota={}, strategy=Strategy.LEND) for t in teams], capacity)
    problems = [
        Problem(
            path=f"job {job.job_id}.count",
            wrong="not a whole number of instances >= 1",
            value=job.count,
            allowed="1 or more",
        )
        for job in jobs
        if job.count < 1
    ]
    if len({job.job_id for job in jobs}) != len(jobs):
        problems.append(
            Problem(
                path="jobs",
                wrong="duplicate job ids",
                value=len(jobs) - len({job.job_id for job in jobs}),
                allowed="unique ids",
            )
        )
    if problems:
        raise GovernanceError(problems[:20])


class _Planner:
    """The general decider: every waiting job goes to the planner on every tick (the policy, and
    a baseline whose quotas overbook the pool). The jobs are kept from tick to tick, by id in the
    order the planner's ``apply_plan`` would leave them: finished jobs leave, arrivals join."""

    def __init__(
        self,
        shares: Sequence[Share],
        capacity: Mapping[str, int],
        settings: Settings,
        groups: Sequence[ShareGroup] = (),
        *,
        preempted: Mapping[str, int] = {},
    ) -> None:
        self.preempted = preempted  # times a job was preempted before the replay (Resume.preempted)
        self.state = PoolState(
            capacity=dict(capacity), shares=tuple(shares), running=(), pending=(), now=0.0, groups=tuple(groups)
        )
        self.settings = settings
        self.running: dict[str, RunningJob] = {}
        self.pending: dict[str, PendingJob] = {}
        self.usage: dict[tuple[str, str], int] = {}  # instances in use per share and type

    def waiting(self) -> bool:
        return bool(self.pending)

    def arrive(self, entry: _Progress) -> None:
        self.pending[entry.job.job_id] = self._pending_of(entry)

    def _pending_of(self, entry: _Progress) -> PendingJob:
        job = entry.job
        return PendingJob(
            job_id=job.job_id,
            share=entry.share,
            instance_type=job.instance_type,
            count=job.count,
            priority=job.priority,
            submitted_at=job.submit_time,
            checkpointable=job.checkpointable,
            max_run_time_s=job.max_run_time,
            restartable=job.restartable,  # stopped, it is not requeued (planner.comes_back), as in the controller
            times_preempted=self.preempted.get(job.job_id, 0),
        )

    def seed(self, entry: _Progress) -> None:
        """``entry`` runs since its ``waiting_since`` when the replay starts."""
        job = entry.job
        self.running[job.job_id] = _started(self._pending_of(entry), entry.waiting_since)
        self.usage[entry.share, job.instance_type] = self.usage.get((entry.share, job.instance_type), 0) + job.count

    def finish(self, entry: _Progress) -> None:
        job = self.running.pop(entry.job.job_id, None)
        if job is None:  # a victim that finished during its grace: requeued here (if it comes back), done there
            self.pending.pop(entry.job.job_id, None)
            return
        self.usage[job.share, job.instance_type] -= job.count

    def plan(
        self, tick: float, past_usage: Mapping[str, float]
    ) -> tuple[Sequence[str], Sequence[str], frozenset[str], bool]:
        """The jobs that start and the jobs preempted at ``tick``, the jobs whose start preempts,
        and whether a cap cut the plan short. ``past_usage``: each team's decayed usage (read by a
        pool that orders by usage)."""
        if not self.pending:  # nothing waits: nothing to plan
            return (), (), frozenset(), False
        self.state = unchecked_state(
            self.state,
            running=tuple(self.running.values()),
            pending=tuple(self.pending.values()),
            now=tick,
            past_usage=dict(past_usage),
        )
        plan = plan_tick(self.state, self.settings)
        if plan.starts or plan.preemptions:
            # apply_plan on just the jobs the plan moves (a victim may start again in the same
            # tick): it makes the started jobs running and requeues the victims, the others stay
            victims = tuple(self.running.pop(p.job_id) for p in plan.preemptions)
            starting = tuple(self.pending.pop(s.job_id) for s in plan.starts if s.job_id in self.pending)
            moved = apply_plan(unchecked_state(self.state, running=victims, pending=starting, now=tick), plan)
            for job in victims:
                self.usage[job.share, job.instance_type] -= job.count
            for job in moved.running:
                self.running[job.job_id] = job
                self.usage[job.share, job.instance_type] = self.usage.get((job.share, job.instance_type), 0) + job.count
            self.pending.update((job.job_id, job) for job in moved.pending)
        return (
            [s.job_id for s in plan.starts],
            [p.job_id for p in plan.preemptions],
            frozenset(p.for_job for p in plan.preemptions),
            plan.capped,
        )

    def breached(self, progress: Mapping[str, _Progress], waited_before: float) -> set[str]:
        """Shares whose guarantee is broken (``planner.breached_shares``), a job's wait counted
        from when the replay queued it."""
        return breached_shares(
            self.state.shares,
            self.running.values(),
            self.pending.values(),
            waited_before=waited_before,
            usage=self.usage,
            waiting_since=lambda job: progress[job.job_id].waiting_since,
            groups=self.state.groups,
            borrows=lambda job: may_borrow(job, self.state.now, self.settings),  # as planned at the last tick
        )

    def asking(self) -> set[str]:
        return asking_shares(
            self.state.shares, self.usage, ((j.share, j.instance_type, j.count) for j in self.pending.values())
        )

    def next_change_at(self) -> float | None:
        state = unchecked_state(
            self.state, running=tuple(self.running.values()), pending=tuple(self.pending.values()), now=self.state.now
        )
        return next_change_at(state, self.settings)


def _independent_queues(shares: Sequence[Share], capacity: Mapping[str, int]) -> bool:
    """Whether every share is a reserve share without in-share preemption and, per instance
    type, the quotas fit the pool (both baselines). Then no share lends, borrows or preempts, a
    share's free room is exactly its quota minus its use, and the planner starts a share's job
    exactly when it fits the room left by the share's jobs before it in queue order."""
    return all(s.strategy is Strategy.RESERVE and not s.in_share_preemption for s in shares) and all(
        sum(s.quota.get(t, 0) for s in shares) <= size for t, size in capacity.items()
    )


class _Queues:
    """The decider under ``_independent_queues``: the planner's decision there, taken directly
    (tests/simulate/test_replay_reference.py proves every job's runs the same as the planner's).
    The waiting jobs wait per share, instance type and size, each bucket a heap in the planner's
    queue order (``queue_order``: priority, then age; nobody is requeued here). Walking the
    share's queue in that order and starting every job that fits its room starts, one after the
    other, the first job of the buckets that fit the room: the backlog is never walked. A share
    whose room grew by no finished job and which got no new job since the last tick starts
    nothing, and is not looked at."""

    def __init__(self, shares: Sequence[Share]) -> None:
        self._shares = tuple(shares)
        self._quota = {(s.name, t): quota for s in shares for t, quota in s.quota.items()}
        self._room = dict(self._quota)  # quota minus use
        self._buckets: dict[tuple[str, str], dict[int, list[tuple[tuple, TraceJob]]]] = {}
        self._touched: dict[tuple[str, str], None] = {}  # room freed or a job arrived since the last tick
        self._size = 0

    def waiting(self) -> bool:
        return self._size > 0

    def arrive(self, entry: _Progress) -> None:
        job = entry.job
        where = (entry.share, job.instance_type)
        heapq.heappush(
            self._buckets.setdefault(where, {}).setdefault(job.count, []),
            ((-job.priority, job.submit_time, job.job_id), job),
        )
        self._touched[where] = None
        self._size += 1

    def seed(self, entry: _Progress) -> None:
        where = (entry.share, entry.job.instance_type)
        self._room[where] = self._room.get(where, 0) - entry.job.count

    def finish(self, entry: _Progress) -> None:
        where = (entry.share, entry.job.instance_type)
        self._room[where] = self._room.get(where, 0) + entry.job.count
        self._touched[where] = None

    def plan(
        self, tick: float, past_usage: Mapping[str, float]
    ) -> tuple[Sequence[str], Sequence[str], frozenset[str], bool]:
        del past_usage  # reserve shares of their quota: nobody borrows, no order between teams to keep
        started: list[str] = []
        for where in self._touched:
            sizes = self._buckets.get(where)
            room = self._room.get(where, 0)
            while sizes:
                first = None  # the bucket whose first job comes first in queue order, among those that fit
                for size, bucket in sizes.items():
                    if size <= room and (first is None or bucket[0][0] < first[0][0]):
                        first, first_size = bucket, size
                if first is None:
                    break
                started.append(heapq.heappop(first)[1].job_id)
                room -= first_size
                if not first:
                    del sizes[first_size]
            self._room[where] = room
        self._touched.clear()
        self._size -= len(started)
        return started, (), frozenset(), False

    def breached(self, progress: Mapping[str, _Progress], waited_before: float) -> set[str]:
        return set()  # nobody borrows

    def asking(self) -> set[str]:
        waiting = (
            (share, t, size) for (share, t), sizes in self._buckets.items() for size, jobs in sizes.items() if jobs
        )
        return asking_shares(self._shares, {w: self._quota.get(w, 0) - room for w, room in self._room.items()}, waiting)

    def next_change_at(self) -> float | None:
        return None  # nobody is preempted, protected or backed off


def never_runnable(
    jobs: Sequence[TraceJob], shares: Sequence[Share], capacity: Mapping[str, int], *, pooled: bool = False
) -> tuple[str, ...]:
    """Ids of the jobs larger than their share can ever hold: its ceiling, and at most the pool
    less what other shares reserve (a reserve is never lent): they wait for ever under these shares."""
    reserved = {t: sum(s.quota.get(t, 0) for s in shares if s.strategy is Strategy.RESERVE) for t in capacity}
    ceilings = {
        (s.name, t): min(
            s.ceiling(t, size), size - reserved[t] + (s.quota.get(t, 0) if s.strategy is Strategy.RESERVE else 0)
        )
        for s in shares
        for t, size in capacity.items()
    }
    return tuple(
        job.job_id
        for job in jobs
        if job.count > ceilings.get((POOLED_SHARE if pooled else job.team, job.instance_type), 0)
    )


def _tick_at_or_after(time: float, tick_s: float) -> float:
    ticks = -(-time // tick_s)
    return ticks * tick_s


def team_stats(waits: Mapping[str, Sequence[float]], unfinished: Mapping[str, int]) -> dict[str, TeamStats]:
    """Per team with any job: its finished jobs' waits and how many never finished."""
    return {
        team: TeamStats(
            jobs=len(waits.get(team, ())) + unfinished.get(team, 0),
            jobs_unfinished=unfinished.get(team, 0),
            wait_p50_s=_percentile(waits.get(team, ()), unfinished.get(team, 0), 50),
            wait_p95_s=_percentile(waits.get(team, ()), unfinished.get(team, 0), 95),
        )
        for team in sorted(waits.keys() | unfinished.keys())
    }


def _percentile(values: Sequence[float], endless: int, percent: float) -> float | None:
    """Nearest-rank percentile of ``values`` and ``endless`` waits that never end (None if it is one)."""
    ordered = sorted(values)
    rank = max(1, -(-(len(ordered) + endless) * percent // 100))
    return float(ordered[int(rank) - 1]) if rank <= len(ordered) else None


# --- the comparison ---------------------------------------------------------------------------


def compare(
    jobs: Sequence[TraceJob],
    *,
    shares: Sequence[Share],
    capacity: Mapping[str, int],
    tick_s: float,
    settings: Settings,
    record_timeline: bool = False,
    groups: Sequence[ShareGroup] = (),
) -> dict[str, RunMetrics]:
    """The policy (with the pool's ``groups``) and both baselines over the same trace, checked and ordered once."""
    _check_jobs(jobs, [s.name for s in shares], capacity, pooled=False)  # the pooled run's checks included
    arrivals = _arrival_order(jobs)
    run = lambda shares, pooled=False, groups=(): _replay(  # noqa: E731
        jobs,
        arrivals,
        shares=shares,
        capacity=capacity,
        tick_s=tick_s,
        settings=settings,
        pooled=pooled,
        record_timeline=record_timeline,
        record_runs=False,
        groups=groups,
    )
    return {
        "policy": run(shares, groups=groups),
        "static": run(static_shares(shares)),
        "pooled": run(pooled_share(capacity), pooled=True),
    }


def check_trace_fits_pool(jobs: Sequence[TraceJob], shares: Sequence[Share], capacity: Mapping[str, int]) -> None:
    teams = {s.name for s in shares}
    problems: list[Problem] = []
    for job in jobs:
        if job.team not in teams:
            problems.append(
                Problem(
                    path=f"job {job.job_id}.team",
                    wrong="team has no quota in the pool",
                    value=job.team,
                    allowed=f"one of {sorted(teams)}",
                )
            )
        if job.instance_type not in capacity:
            problems.append(
                Problem(
                    path=f"job {job.job_id}.instance_type",
                    wrong="not in the pool",
                    value=job.instance_type,
                    allowed=f"one of {sorted(capacity)}, or leave such jobs out: simulate --skip-other-types",
                )
            )
        elif job.count > capacity[job.instance_type]:
            problems.append(
                Problem(
                    path=f"job {job.job_id}.count",
                    wrong="larger than the pool",
                    value=job.count,
                    allowed=f"at most {capacity[job.instance_type]}",
                )
            )
        if len(problems) >= 20:
            break
    if problems:
        raise GovernanceError(problems)
