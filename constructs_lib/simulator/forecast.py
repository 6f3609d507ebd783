"""When will my job start: the live pool replayed through the reclaim planner (docs/status.md).

The pool as ``gpu-governance status`` reads it - the running jobs with their start and declared
run time where known, the queue in order - goes through the replay ``simulate`` runs
(``engine.simulate`` with the jobs that already run), with no job arriving after now. A job's
forecast start is its first start in that replay.

What cannot be known is said, not invented:

* a run time is the job's declared one (its limit: the job may end sooner, and the forecast is
  then late); without one it is taken from history (``RunTimes``: the team's past jobs, or the
  pool's where the team has too few): the run times of past jobs that ran longer than this one
  has so far, less what it has run. Their 25th, 50th and 75th percentiles give three replays:
  the range and the likely figure. Without history the job runs "for ever" in the replay, and a
  start that waits for it is unknown;
* jobs submitted after now, and other teams' waiting jobs the reader cannot see (Batch shows a
  team only its own queue), are not in the replay: both can only make the start later.

benchmarks/forecast_error.py measures the error on the openb trace (docs/performance.md).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from constructs_lib.member.waiting import NOT_STARTABLE, RUNNING, WAITING, Observation, Status
from constructs_lib.simulator.engine import Resume, RunMetrics, simulate
from constructs_lib.simulator.traces import TraceJob
from gpu_governance_runtime.planners.reclaim import Settings
from gpu_governance_runtime.policy import PoolPolicy

LEVELS = (0.25, 0.5, 0.75)  # percentiles of an unknown run time: earliest, likely, latest
LIKELY = LEVELS[1]
MIN_HISTORY = 5  # past jobs of a team below which the pool's history stands in for it
ALTERNATIVES = 10  # waiting jobs (in queue order) a smaller size is tried for


@dataclass(frozen=True, kw_only=True)
class LiveJob:
    """One job of the live pool: running (``started_at`` known or None) or waiting."""

    job_id: str
    team: str
    instance_type: str
    count: int
    priority: int
    submitted_at: float
    running: bool
    started_at: float | None = None  # a running job's start; None: not known
    run_time_s: float | None = None  # its declared run time (limit), if any
    checkpointable: bool = False
    restartable: bool = True
    times_preempted: int = 0  # its protection and re-borrow backoff, where the reader knows them


@dataclass(frozen=True, kw_only=True)
class LivePool:
    now: float
    jobs: tuple[LiveJob, ...]
    notes: tuple[str, ...] = ()  # what the reader could not see


class RunTimes:
    """Past run times (seconds) per team: what a job without a declared run time is taken to run."""

    def __init__(self, by_team: Mapping[str, Iterable[float]]) -> None:
        self._by_team = {team: sorted(times) for team, times in by_team.items()}
        self._pool = sorted(t for times in self._by_team.values() for t in times)

    @classmethod
    def from_trace(cls, jobs: Iterable[TraceJob]) -> RunTimes:
        by_team: dict[str, list[float]] = {}
        for job in jobs:
            by_team.setdefault(job.team, []).append(job.duration)
        return cls(by_team)

    def remaining(self, team: str, elapsed: float | None, level: float) -> float | None:
        """The ``level`` percentile of what a job of ``team`` that has run ``elapsed`` seconds
        (None: not known) still runs; None when no history says."""
        times = self._by_team.get(team, ())
        times = times if len(times) >= MIN_HISTORY else self._pool
        if not times:
            return None
        if elapsed is None:
            return _residual_quantile(times, level)
        longer = times[bisect.bisect_right(times, elapsed) :]  # past jobs that ran longer than this one so far
        return None if not longer else longer[min(len(longer) - 1, int(level * len(longer)))] - elapsed


def _residual_quantile(times: Sequence[float], level: float) -> float:
    """The ``level`` quantile of the time left to a job caught running at a random moment (its
    start not known): a job of run time d is caught with weight d, at a uniform point of its run."""
    total = sum(times)
    low, high = 0.0, times[-1]
    for _ in range(50):  # bisection on sum(min(r, d)) / sum(d), which rises with r
        middle = (low + high) / 2
        low, high = (middle, high) if sum(min(middle, d) for d in times) < level * total else (low, middle)
    return float(round(high))  # to the second: a forecast is no finer, and ticks fall on whole seconds


@dataclass(frozen=True, kw_only=True)
class StartForecast:
    """Seconds from now to the job's start: earliest, likely and latest of the three replays
    (None: it does not start in that replay: it waits on a job whose run time is not known)."""

    job_id: str
    earliest_s: float | None
    likely_s: float | None
    latest_s: float | None
    unknown_run_times: int = 0  # running jobs of the replay that run "for ever": neither declared nor in history
    smaller: tuple[tuple[int, float], ...] = ()  # (instances, likely seconds) of sizes that start sooner

    def words(self) -> str:
        if self.likely_s is None:
            return (
                f"start unknown: it waits on running jobs ({self.unknown_run_times}) "
                "whose run time is neither declared nor in the history (--history)"
            )
        text = f"starts in about {duration_words(self.likely_s)}"
        if self.latest_s is None:
            text += f" (at the earliest {duration_words(self.earliest_s or 0)}, the latest not known)"
        elif (self.earliest_s, self.latest_s) != (self.likely_s, self.likely_s):
            text += f" ({duration_words(self.earliest_s or 0)} to {duration_words(self.latest_s)})"
        text += "".join(f"; {duration_words(s)} with {count} instance{'s' * (count > 1)}" for count, s in self.smaller)
        return text

    def as_json(self) -> dict[str, object]:
        return {
            "earliest_s": self.earliest_s,
            "likely_s": self.likely_s,
            "latest_s": self.latest_s,
            "unknown_run_times": self.unknown_run_times,
            "smaller": [{"count": count, "likely_s": s} for count, s in self.smaller],
            "words": self.words(),
        }


def duration_words(seconds: float) -> str:
    """About how long, in the unit a person reads it in."""
    if seconds < 90:
        return "1 min" if seconds > 0 else "now"
    if seconds < 3_600:
        return f"{round(seconds / 60)} min"
    if seconds < 36_000:
        return f"{seconds / 3_600:.1f} h".replace(".0 h", " h")
    if seconds < 172_800:
        return f"{round(seconds / 3_600)} h"
    return f"{seconds / 86_400:.1f} days".replace(".0 days", " days")


def forecast(
    pool: PoolPolicy,
    live: LivePool,
    targets: Sequence[str],
    *,
    history: RunTimes | None = None,
    tick_s: float = 60.0,
    settings: Settings | None = None,
    alternatives: bool = True,
) -> dict[str, StartForecast]:
    """The start of each waiting job of ``targets``, and (``alternatives``) of smaller sizes of
    the first ``ALTERNATIVES`` of them. ``settings``: the planner's (default: the pool's)."""
    settings = pool.settings() if settings is None else settings
    # where every run time is declared, or nothing says the missing ones, the three replays are one
    uncertain = history is not None and any(job.run_time_s is None for job in live.jobs)
    scenarios = {level: _trace(live, history, level) for level in (LEVELS if uncertain else (LIKELY,))}
    starts = {level: _replay(pool, scenario, tick_s, settings).started for level, scenario in scenarios.items()}
    unknown = sum(1 for job, _ in scenarios[LIKELY][1].running if math.isinf(job.duration))
    found = {}
    for number, job_id in enumerate(targets):
        earliest, likely, latest = (_since(live.now, starts.get(level, starts[LIKELY]).get(job_id)) for level in LEVELS)
        smaller = ()
        if alternatives and number < ALTERNATIVES and likely is not None:
            smaller = _smaller(pool, scenarios[LIKELY], live.now, job_id, likely, tick_s, settings)
        found[job_id] = StartForecast(
            job_id=job_id,
            earliest_s=earliest,
            likely_s=likely,
            latest_s=latest,
            unknown_run_times=unknown,
            smaller=smaller,
        )
    return found


def _since(now: float, start: float | None) -> float | None:
    return None if start is None else max(0.0, start - now)


Scenario = tuple[list[TraceJob], Resume]  # the waiting jobs, and the pool they wait in


def _trace(live: LivePool, history: RunTimes | None, level: float) -> Scenario:
    """The replay's jobs with every run time as this percentile takes it (inf: not known)."""
    waiting: list[TraceJob] = []
    running: list[tuple[TraceJob, float]] = []
    for job in live.jobs:
        elapsed = live.now - job.started_at if job.running and job.started_at is not None else None
        if job.run_time_s is not None:
            left = max(0.0, job.run_time_s - (elapsed or 0.0))  # an overdue job ends any moment
        else:
            known = history.remaining(job.team, elapsed if job.running else 0.0, level) if history else None
            left = math.inf if known is None else known
        started = live.now if elapsed is None else job.started_at
        traced = TraceJob(
            job_id=job.job_id,
            team=job.team,
            submit_time=started if job.running else job.submitted_at,
            duration=max(left + (live.now - started if job.running else 0.0), 1e-3),
            instance_type=job.instance_type,
            count=job.count,
            priority=job.priority,
            checkpointable=job.checkpointable,
            max_run_time=job.run_time_s,
            restartable=job.restartable,
        )
        if job.running:
            running.append((traced, started))
        else:
            waiting.append(traced)
    preempted = {job.job_id: job.times_preempted for job in live.jobs if job.times_preempted}
    return waiting, Resume(at=live.now, running=running, preempted=preempted)


def _replay(pool: PoolPolicy, scenario: Scenario, tick_s: float, settings: Settings) -> RunMetrics:
    waiting, resume = scenario
    return simulate(
        waiting,
        shares=pool.shares,
        capacity=pool.capacity,
        tick_s=tick_s,
        settings=settings,
        groups=pool.groups,
        record_runs=True,
        resume=resume,
    )


def _smaller(
    pool: PoolPolicy, scenario: Scenario, now: float, job_id: str, likely: float, tick_s: float, settings: Settings
) -> tuple[tuple[int, float], ...]:
    """Halved sizes of the job that would start sooner in the likely replay, each sooner than the
    larger one before it: the largest first, two at most."""
    waiting, resume = scenario
    index = next(i for i, job in enumerate(waiting) if job.job_id == job_id)
    found = []
    count = waiting[index].count // 2
    while count >= 1:
        resized = [*waiting[:index], replace(waiting[index], count=count), *waiting[index + 1 :]]
        start = _since(now, _replay(pool, (resized, resume), tick_s, settings).started.get(job_id))
        if start is not None and start < (found[-1][1] if found else likely) - tick_s:  # sooner still
            found.append((count, start))
            if len(found) == 2:
                break
        count //= 2
    return tuple(found)


# --- the live pool as `gpu-governance status` reads it ---------------------------------------------

NOT_FORECAST = (*NOT_STARTABLE, "window_not_active")  # waiting jobs that start on no capacity freeing up
FORECAST_NOTE = (
    "forecasts replay the pool through the reclaim planner with no job submitted after now and "
    "without other teams' waiting jobs, which the team is not shown: either can only make a start later"
)


def why_no_forecast(observation: Observation) -> str | None:
    """Why the pool's jobs get no forecast, if they do not."""
    if observation.unit == "GPUs":
        return "no start forecast here: Kueue counts GPUs per flavor, the governance file whole instances"
    return None


def live_pool(policy: PoolPolicy, observation: Observation, status: Status, now: float) -> LivePool:
    """What ``status`` read of the pool: the team's jobs (its waiting ones that can start on
    capacity freeing up, ``status``'s reasons say which), and what each share holds beyond them
    as one job whose start and run time are not known."""
    kept_out = {j.job_id for j in status.jobs if j.reason in NOT_FORECAST}
    listed: dict[tuple[str, str], int] = {}
    jobs = []
    for job in observation.jobs:
        if (
            job.state not in (RUNNING, WAITING)
            or job.job_id in kept_out
            or job.instance_type not in policy.capacity
            or job.count < 1
        ):
            continue
        if job.state == RUNNING:
            listed[job.team, job.instance_type] = listed.get((job.team, job.instance_type), 0) + job.count
        jobs.append(
            LiveJob(
                job_id=job.job_id,
                team=job.team,
                instance_type=job.instance_type,
                count=job.count,
                priority=job.priority,
                submitted_at=job.submitted_at,
                running=job.state == RUNNING,
                started_at=job.started_at,
                run_time_s=job.run_time_s,
                restartable=job.restartable,
            )
        )
    shares = {s.name for s in policy.shares}
    for share, by_type in observation.in_use.items():
        for instance_type, used in by_type.items():
            rest = used - listed.get((share, instance_type), 0)
            if rest > 0 and share in shares and instance_type in policy.capacity:
                jobs.append(
                    LiveJob(
                        job_id=f"{share}/{instance_type} (not listed)",
                        team=share,
                        instance_type=instance_type,
                        count=rest,
                        priority=0,
                        submitted_at=now,
                        running=True,
                    )
                )
    return LivePool(now=now, jobs=tuple(jobs), notes=(FORECAST_NOTE,))


def with_forecasts(
    policy: PoolPolicy, observation: Observation, status: Status, *, now: float, history: RunTimes | None = None
) -> Status:
    """``status`` with a forecast for each waiting job of the team that can start (and a note)."""
    why_not = why_no_forecast(observation)
    if why_not is not None:
        return replace(status, notes=(*status.notes, why_not))
    live = live_pool(policy, observation, status, now)
    waiting = [j.job_id for j in sorted(status.jobs, key=lambda j: j.position or 0) if j.state == WAITING]
    queued = {job.job_id for job in live.jobs if not job.running}
    found = forecast(policy, live, [j for j in waiting if j in queued], history=history)
    jobs = tuple(replace(j, forecast=found[j.job_id].as_json()) if j.job_id in found else j for j in status.jobs)
    return replace(status, jobs=jobs, notes=(*status.notes, *live.notes) if found else status.notes)


def live_pool_at(jobs: Sequence[TraceJob], replay: RunMetrics, moment: float, *, declared: bool) -> LivePool:
    """The pool at ``moment`` of a recorded replay (``record_runs``) of ``jobs``, as a live reader
    would see it: what runs then (since its run's start), what waits (submitted, not running,
    not done). ``declared``: every job declares its true run time (what is left of its work, for
    a checkpointing job resumed); else none does. What error a forecast from here makes is
    benchmarks/forecast_error.py's measure."""
    live = []
    for job in jobs:
        if job.submit_time > moment:
            continue
        runs = replay.runs.get(job.job_id, ())
        current = next(((start, end) for start, end in runs if start <= moment < end), None)
        if current is None and not any(start > moment for start, _ in runs) and runs:
            continue  # finished by then
        ended = [(start, end) for start, end in runs if end <= moment]  # each ended run before it: a preemption
        done_before = sum(end - start for start, end in ended) if job.checkpointable else 0.0
        live.append(
            LiveJob(
                job_id=job.job_id,
                team=job.team,
                instance_type=job.instance_type,
                count=job.count,
                priority=job.priority,
                submitted_at=ended[-1][1] if ended and not current else job.submit_time,  # requeued then
                running=current is not None,
                started_at=current[0] if current else None,
                run_time_s=job.duration - done_before if declared else None,
                checkpointable=job.checkpointable,
                restartable=job.restartable,
                times_preempted=len(ended),
            )
        )
    return LivePool(now=moment, jobs=tuple(live))


def next_start(replay: RunMetrics, job_id: str, moment: float) -> float | None:
    """When a job waiting at ``moment`` started next in a recorded replay (None: never)."""
    starts = [start for start, _ in replay.runs.get(job_id, ()) if start >= moment]
    started = replay.started.get(job_id)
    if started is not None and started >= moment:
        starts.append(started)
    return min(starts, default=None)
