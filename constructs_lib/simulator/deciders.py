"""The deciders of the replay (replay.py): which jobs start and which are preempted at a tick.

``Planner`` hands every waiting job to the reclaim planner on every tick (the policy, and a
baseline whose quotas overbook the pool); ``Queues`` takes the planner's decision directly where
it is simple (both baselines: see ``independent_queues``). Both keep their state from tick to tick;
tests/simulate/test_replay_reference.py proves every job's runs identical to a replay that hands
the planner the whole pool on every tick.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from gpu_governance_runtime.planners.reclaim import (
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
    breached_shares,
    may_borrow,
    next_change_at,
    plan_tick,
    unchecked_state,
)

from .replay import Progress
from .traces import TraceJob


class Planner:
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

    def arrive(self, entry: Progress) -> None:
        self.pending[entry.job.job_id] = self._pending_of(entry)

    def _pending_of(self, entry: Progress) -> PendingJob:
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

    def seed(self, entry: Progress) -> None:
        """``entry`` runs since its ``waiting_since`` when the replay starts."""
        job = entry.job
        self.running[job.job_id] = _started(self._pending_of(entry), entry.waiting_since)
        self.usage[entry.share, job.instance_type] = self.usage.get((entry.share, job.instance_type), 0) + job.count

    def finish(self, entry: Progress) -> None:
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

    def breached(self, progress: Mapping[str, Progress], waited_before: float) -> set[str]:
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


def independent_queues(shares: Sequence[Share], capacity: Mapping[str, int]) -> bool:
    """Whether every share is a reserve share without in-share preemption and, per instance
    type, the quotas fit the pool (both baselines). Then no share lends, borrows or preempts, a
    share's free room is exactly its quota minus its use, and the planner starts a share's job
    exactly when it fits the room left by the share's jobs before it in queue order."""
    return all(s.strategy is Strategy.RESERVE and not s.in_share_preemption for s in shares) and all(
        sum(s.quota.get(t, 0) for s in shares) <= size for t, size in capacity.items()
    )


class Queues:
    """The decider under ``independent_queues``: the planner's decision there, taken directly
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

    def arrive(self, entry: Progress) -> None:
        job = entry.job
        where = (entry.share, job.instance_type)
        heapq.heappush(
            self._buckets.setdefault(where, {}).setdefault(job.count, []),
            ((-job.priority, job.submit_time, job.job_id), job),
        )
        self._touched[where] = None
        self._size += 1

    def seed(self, entry: Progress) -> None:
        where = (entry.share, entry.job.instance_type)
        self._room[where] = self._room.get(where, 0) - entry.job.count

    def finish(self, entry: Progress) -> None:
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

    def breached(self, progress: Mapping[str, Progress], waited_before: float) -> set[str]:
        return set()  # nobody borrows

    def asking(self) -> set[str]:
        waiting = (
            (share, t, size) for (share, t), sizes in self._buckets.items() for size, jobs in sizes.items() if jobs
        )
        return asking_shares(self._shares, {w: self._quota.get(w, 0) - room for w, room in self._room.items()}, waiting)

    def next_change_at(self) -> float | None:
        return None  # nobody is preempted, protected or backed off
