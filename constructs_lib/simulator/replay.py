"""The replay's event loop (engine.py runs it and reports it; docs/simulator.md).

Time moves from one moment something happens to the next: a job's arrival, the end of a run (its
completion, or a victim's stop at the end of its grace), or a follow-up tick. At each it moves to
the tick at or after that moment, as the controller runs on a fixed tick: the runs that ended by
then end, the jobs submitted by then arrive, and the decider (deciders.py) plans; its victims stop
(or start their grace) and the jobs it starts get their instances as soon as the victims free them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpu_governance_runtime.planners.reclaim import Settings, breach_tolerance
from gpu_governance_runtime.reclaim.fair_share import decayed_usage

from .traces import TraceJob

POOLED_SHARE = "everyone"
COMPLETION, STOP = 0, 1  # what an event of the replay does to its job: it finishes, or its grace ends


@dataclass(slots=True)
class Progress:
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


class Decider(Protocol):
    """What decides, tick by tick, which jobs start and which are preempted (deciders.py)."""

    def waiting(self) -> bool: ...
    def arrive(self, entry: Progress) -> None: ...
    def seed(self, entry: Progress) -> None: ...
    def finish(self, entry: Progress) -> None: ...
    def plan(
        self, tick: float, past_usage: Mapping[str, float]
    ) -> tuple[Sequence[str], Sequence[str], frozenset[str], bool]: ...
    def breached(self, progress: Mapping[str, Progress], waited_before: float) -> set[str]: ...
    def asking(self) -> set[str]: ...
    def next_change_at(self) -> float | None: ...


class Replay:
    """One replay of checked jobs (``arrivals``, in arrival order) through ``decider``: call
    :meth:`run`, then read the tallies (engine.py makes them a ``RunMetrics``).

    With a grace (``settings.grace_s``) the plan is carried out as the controller and Slurm carry
    it out: a victim runs on for the grace (it may finish meanwhile; a checkpointing one keeps its
    work up to its stop) and the jobs the planner starts get their instances as victims stop, in
    the order they were started. Without one, victims stop and jobs start on the tick."""

    def __init__(
        self,
        arrivals: Sequence[TraceJob],
        decider: Decider,
        *,
        capacity: Mapping[str, int],
        tick_s: float,
        settings: Settings,
        pooled: bool,
        record_timeline: bool,
        record_runs: bool,
        opens: float | None = None,
    ) -> None:
        self.arrivals, self.decider, self.capacity, self.tick_s = arrivals, decider, capacity, tick_s
        self.pooled, self.record_timeline, self.record_runs = pooled, record_timeline, record_runs
        self.grace = settings.grace_s
        self.tolerance = breach_tolerance(tick_s, settings)
        # no tick before ``opens`` (a resumed pool's): a job submitted earlier waits for it
        self.opens = -math.inf if opens is None else opens
        self.progress: dict[str, Progress] = {}
        self.waited: list[float | None] = [None] * len(arrivals)  # per arrival: the wait of a job that finished
        self.events: list[tuple[float, int, str, int]] = []  # (time, version, job id, COMPLETION or STOP)
        self.usage: dict[tuple[str, str], int] = {}  # instances in use per team and instance type: a p5 is not a g6e
        self.occupied = dict.fromkeys(capacity, 0)  # instances in use per type, victims in their grace included
        self.awaiting_room: dict[str, list[Progress]] = {t: [] for t in capacity}  # started, waiting for victims
        self.reclaim_waits: list[float] = []
        self.next_arrival = 0
        self.clock = 0.0
        self.changed = False
        self.work_done = self.lost = self.busy = self.useful = 0.0
        self.preemptions = self.breaches = self.stopped_for_good = 0
        self.asked_s: dict[str, float] = {}  # per team: seconds it asked for its guarantee (planner.asking_shares)
        self.breached_s: dict[str, float] = {}  # of those, seconds its guarantee was broken (planner.breached_shares)
        self.asked_since: set[str] = set()
        self.breached_since: set[str] = set()
        self.since = 0.0
        self.first_submit = arrivals[0].submit_time if arrivals else 0.0
        self.last_finish = self.first_submit
        self.window_end = arrivals[-1].submit_time if arrivals else 0.0
        self.timeline: list[tuple[float, Mapping[tuple[str, str], int]]] = []
        self.preempted_at: dict[str, list[float]] = {}
        self.runs: dict[str, list[tuple[float, float]]] = {}
        self.started: dict[str, float] = {}
        self.team_used: dict[str, float] = {}  # per team: capacity-seconds its jobs held, work later lost included
        self.team_lost: dict[str, float] = {}  # of those, the work lost to preemptions
        # Usage-based fair share (Settings.usage_half_life_s): each team's decayed usage, advanced by
        # the one computation the controller uses at every moment a team's use changes, so it is exact.
        self.half_life = None if pooled else settings.usage_half_life_s
        self.past: dict[str, float] = {}
        self.past_at: float | None = opens  # a forecast knows no usage before the live pool

    def run(self, running: Sequence[tuple[TraceJob, float]] = ()) -> None:
        """Replay to the end, ``running`` (a resumed pool's jobs, each with its start) running at the start."""
        for job, started_at in running:
            entry = self.progress[job.job_id] = Progress(
                job, len(self.waited), POOLED_SHARE if self.pooled else job.team, job.duration, started_at
            )
            self.waited.append(None)  # reported with no team's waits: it did not wait in this replay
            self.decider.seed(entry)
            self._begin(entry, started_at)
        while (moment := self._next_moment()) != math.inf:
            tick = _tick_at_or_after(moment, self.tick_s)
            self._end_runs(tick)
            self._arrive(tick)
            self._tick(tick)

    def _next_moment(self) -> float:
        """The next moment something happens: an arrival, a completion or a victim's stop, or a follow-up tick."""
        arrivals, next_arrival = self.arrivals, self.next_arrival
        moment = max(self.opens, arrivals[next_arrival].submit_time) if next_arrival < len(arrivals) else math.inf
        if self.events and self.events[0][0] < moment:
            moment = self.events[0][0]
        if self.changed and self.clock < moment and self.decider.waiting():
            moment = self.clock
        return moment

    def _end_runs(self, tick: float) -> None:
        """The runs that end by ``tick``, in time order: completions, and victims whose grace ends."""
        events = self.events
        while events and events[0][0] <= tick:
            at, version, job_id, kind = heapq.heappop(events)
            entry = self.progress.get(job_id)
            if entry is None or version != entry.version:
                continue  # the run this event ended was preempted (its job may have finished since)
            if kind == STOP:
                if entry.stop_at == at:  # else the planner chose it again during its grace: it never stopped
                    self._stop(entry, at)
                    self._begin_awaiting(entry.job.instance_type, at)
                continue
            self._complete(entry, at)

    def _complete(self, entry: Progress, at: float) -> None:
        job = entry.job
        del self.progress[job.job_id]
        self.work_done += job.duration * job.count
        segment = self._in_window(entry.started_at, at, job.count)
        self.busy += segment
        self.useful += entry.useful + segment
        self.last_finish = max(self.last_finish, at)
        self.waited[entry.index] = entry.waited
        self.team_used[job.team] = self.team_used.get(job.team, 0.0) + (at - entry.started_at) * job.count
        self._account(at)
        self.usage[job.team, job.instance_type] -= job.count
        self.occupied[job.instance_type] -= job.count
        self.decider.finish(entry)  # a victim that finished in its grace leaves the planner's queue
        if self.record_runs:
            self.runs[job.job_id].append((entry.started_at, at))
        self._begin_awaiting(job.instance_type, at)

    def _arrive(self, tick: float) -> None:
        arrivals = self.arrivals
        while self.next_arrival < len(arrivals) and arrivals[self.next_arrival].submit_time <= tick:
            job = arrivals[self.next_arrival]
            entry = self.progress[job.job_id] = Progress(
                job, self.next_arrival, POOLED_SHARE if self.pooled else job.team, job.duration, job.submit_time
            )
            self.decider.arrive(entry)
            self.next_arrival += 1

    def _tick(self, tick: float) -> None:
        """The decider's plan at ``tick`` carried out, the guarantees counted, and when to look again."""
        self._account(tick)
        starts, preempted, reclaiming, capped = self.decider.plan(tick, self.past)
        self.changed = bool(starts or preempted)
        self._preempt(preempted, tick)
        self._start(starts, reclaiming, tick)
        if not self.pooled:
            self._count_guarantees(tick)
        # A capped plan that moved nothing looks again next tick only while a job waits inside its
        # guarantee with others borrowing (each such tick may count a breach; the borrowers end):
        # otherwise the pool is as it was and every later tick would plan the same, for ever
        # (time-bound changes come from next_change_at below).
        self.changed = self.changed or (capped and bool(self.decider.breached(self.progress, tick)))
        if self.record_timeline:
            self.timeline.append((tick, {key: used for key, used in self.usage.items() if used}))
        self.clock = tick + self.tick_s if self.changed else tick
        if not self.changed and self.decider.waiting():
            # a protected victim becomes preemptible, or a backed-off job may borrow: look again then
            expiry = self.decider.next_change_at()
            if expiry is not None:
                self.clock, self.changed = max(tick + self.tick_s, expiry), True

    def _preempt(self, job_ids: Sequence[str], tick: float) -> None:
        for job_id in job_ids:
            entry = self.progress[job_id]
            if entry.awaiting_room:  # chosen before it got its instances: it never ran
                self.awaiting_room[entry.job.instance_type].remove(entry)
                entry.awaiting_room = False
                self.preemptions += 1
            elif self.grace:
                entry.stop_at = tick + self.grace
                entry.waiting_since = tick
                heapq.heappush(self.events, (entry.stop_at, entry.version, job_id, STOP))
            else:
                self._stop(entry, tick)

    def _start(self, job_ids: Sequence[str], reclaiming: frozenset[str], tick: float) -> None:
        for job_id in job_ids:
            entry = self.progress[job_id]
            if entry.stop_at is not None:  # chosen again during its grace: it runs on, never stopped
                entry.stop_at = None
                continue
            entry.reclaims = job_id in reclaiming
            entry.awaiting_room = True
            self.awaiting_room[entry.job.instance_type].append(entry)
            self._begin_awaiting(entry.job.instance_type, tick)  # in the plan's order

    def _count_guarantees(self, tick: float) -> None:
        # a lender waits a tick, and the grace of the victims it preempts, before it breaches
        breached = self.decider.breached(self.progress, tick - self.tolerance)
        self.breaches += len(breached)
        # what held since the last tick held until this one (nothing changes between ticks)
        for team in self.asked_since:
            self.asked_s[team] = self.asked_s.get(team, 0.0) + tick - self.since
        for team in self.breached_since:
            self.breached_s[team] = self.breached_s.get(team, 0.0) + tick - self.since
        # a team breached asks (a job its group's quota covers asks beyond its team's own quota)
        self.asked_since, self.breached_since, self.since = self.decider.asking() | breached, breached, tick

    def _account(self, at: float) -> None:
        """Advance the decayed usage to ``at`` with the use held since; call before use changes."""
        if self.half_life is None or (self.past_at is not None and at <= self.past_at):
            return  # a resumed job's start, before the replay opens: no history before it
        if self.past_at is not None:
            in_use: dict[str, int] = {}
            for (team, _), instances in self.usage.items():
                in_use[team] = in_use.get(team, 0) + instances
            self.past = decayed_usage(self.past, in_use, elapsed_s=at - self.past_at, half_life_s=self.half_life)
        self.past_at = at

    def _in_window(self, start: float, end: float, count: int) -> float:
        return count * max(0.0, min(end, self.window_end) - max(start, self.first_submit))

    def _begin(self, entry: Progress, at: float) -> None:
        job = entry.job
        entry.awaiting_room = False
        if entry.reclaims:
            self.reclaim_waits.append(at - entry.waiting_since)
        entry.waited += at - entry.waiting_since
        entry.started_at = at
        entry.version += 1
        self._account(at)
        key = (job.team, job.instance_type)
        self.usage[key] = self.usage.get(key, 0) + job.count
        self.occupied[job.instance_type] += job.count
        heapq.heappush(self.events, (at + entry.remaining, entry.version, job.job_id, COMPLETION))
        if self.record_runs:
            self.runs.setdefault(job.job_id, [])
            self.started.setdefault(job.job_id, at)

    def _begin_awaiting(self, instance_type: str, at: float) -> None:
        queue = self.awaiting_room[instance_type]
        while queue and self.occupied[instance_type] + queue[0].job.count <= self.capacity[instance_type]:
            self._begin(queue.pop(0), at)

    def _stop(self, entry: Progress, at: float) -> None:
        job = entry.job
        elapsed = at - entry.started_at
        segment = self._in_window(entry.started_at, at, job.count)
        self.busy += segment
        entry.version += 1
        entry.stop_at = None
        entry.waiting_since = at
        self._account(at)
        self.usage[job.team, job.instance_type] -= job.count
        self.occupied[job.instance_type] -= job.count
        self.preemptions += 1
        self.preempted_at.setdefault(job.job_id, []).append(at)
        if self.record_runs:
            self.runs[job.job_id].append((entry.started_at, at))
        self.team_used[job.team] = self.team_used.get(job.team, 0.0) + elapsed * job.count
        if job.restartable and job.checkpointable:
            entry.remaining -= elapsed
            entry.useful += segment
            return
        # nothing requeues a job that is not restartable (planner.comes_back): it stays unfinished
        self.stopped_for_good += not job.restartable
        entry.remaining = job.duration
        self.lost += elapsed * job.count
        self.team_lost[job.team] = self.team_lost.get(job.team, 0.0) + elapsed * job.count


def _tick_at_or_after(time: float, tick_s: float) -> float:
    ticks = -(-time // tick_s)
    return ticks * tick_s
