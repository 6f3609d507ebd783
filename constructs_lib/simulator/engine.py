"""The replay: a job trace through the reclaim planner and two baselines.

A discrete-event simulation of one pool. Jobs arrive at their submit time and finish when their
remaining work is done; the planner runs on a fixed tick (as the controller does) whenever
something changed. The baselines replay the trace under transformed shares:

* ``static``: every team is a reserve share of exactly its quota, no in-share preemption.
* ``pooled``: everyone in one reserve share as large as the pool, no preemption; one queue,
  highest priority then oldest first, quotas ignored.

Under such shares the planner's decision is simple: a job starts when it fits the room its share's
quota leaves after the share's jobs before it in queue order. The baselines take that decision
directly (``deciders.Queues``), without the planner's fixed cost per tick; a baseline whose quotas
overbook the pool goes through the planner like the policy (``deciders.Planner``). Both keep their
state from tick to tick; tests/simulate/test_replay_reference.py proves every job's runs identical
to a replay that hands the planner the whole pool on every tick. The event loop is replay.py's;
this module runs it and reports what it measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from constructs_lib.core.errors import GovernanceError, Problem
from gpu_governance_runtime.planners.reclaim import Settings, Share, ShareGroup, Strategy
from gpu_governance_runtime.usage import kept_percent

from .deciders import Planner, Queues, independent_queues
from .replay import POOLED_SHARE, Replay
from .traces import TraceJob


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
    """The event loop (replay.py) over checked jobs, ``arrivals`` being them in arrival order."""
    decider = (
        Queues(shares)
        if not groups and independent_queues(shares, capacity)
        else Planner(shares, capacity, settings, groups, preempted=resume.preempted if resume else {})
    )
    replay = Replay(
        arrivals,
        decider,
        capacity=capacity,
        tick_s=tick_s,
        settings=settings,
        pooled=pooled,
        record_timeline=record_timeline,
        record_runs=record_runs,
        opens=resume.at if resume else None,
    )
    replay.run(resume.running if resume else ())
    return _metrics(replay, jobs, shares, capacity, pooled=pooled)


def _metrics(
    replay: Replay, jobs: Sequence[TraceJob], shares: Sequence[Share], capacity: Mapping[str, int], *, pooled: bool
) -> RunMetrics:
    """What a finished replay of ``jobs`` measured."""
    arrivals, waited, progress = replay.arrivals, replay.waited, replay.progress
    waits: dict[str, list[float]] = {}
    unfinished: dict[str, int] = {}
    for job, wait in zip(arrivals, waited, strict=False):
        if wait is None:
            unfinished[job.team] = unfinished.get(job.team, 0) + 1
        else:
            waits.setdefault(job.team, []).append(wait)
    makespan = max(0.0, replay.last_finish - replay.first_submit)
    total_capacity = sum(capacity.values())
    window = total_capacity * (replay.window_end - replay.first_submit)
    return RunMetrics(
        utilization=replay.work_done / (total_capacity * makespan) if makespan else 0.0,
        window_utilization=replay.busy / window if window else 0.0,
        goodput=replay.useful / window if window else 0.0,
        makespan_s=makespan,
        jobs_completed=replay.next_arrival + len(waited) - len(arrivals) - len(progress),
        jobs_unfinished=len(progress) + len(arrivals) - replay.next_arrival,
        never_runnable=never_runnable(jobs, shares, capacity, pooled=pooled),
        not_restartable=sum(not job.restartable for job in jobs),
        stopped_for_good=replay.stopped_for_good,
        preemptions=replay.preemptions,
        lost_work_capacity_s=replay.lost,
        team_used_capacity_s=replay.team_used,
        team_lost_capacity_s=replay.team_lost,
        guarantee_breaches=replay.breaches,
        guarantee_asked_s=replay.asked_s,
        guarantee_breached_s=replay.breached_s,
        teams=team_stats(waits, unfinished),
        reclaim_waits=tuple(replay.reclaim_waits),
        usage_timeline=tuple(replay.timeline),
        waits={team: tuple(values) for team, values in waits.items()},
        preempted_at={job_id: tuple(times) for job_id, times in replay.preempted_at.items()},
        runs={job_id: tuple(job_runs) for job_id, job_runs in replay.runs.items()},
        started=replay.started,
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
