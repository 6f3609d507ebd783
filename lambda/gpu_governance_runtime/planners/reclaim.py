"""The reclaim / preemption planner: pure, deterministic, no AWS calls.

Given one pool (its capacity, the teams' shares, the running and the pending jobs) it decides
which pending jobs start and the smallest set of running jobs to preempt so that they can.
The Lambda controller, the tests and the ``gpu-governance simulate`` replay all run this code.

Where each part lives: the value types (``Share``, ``ShareGroup``, ``RunningJob``, ``PendingJob``,
``Settings``, ``PoolState``, ``Start``, ``Preemption``, ``GuaranteeWait``, ``Plan``, ``ShareUsage``)
and the state checks in planners/reclaim_state.py; the rules (the semantics, set out in its
docstring: guarantees, orders, borrowing again, the anti-thrash budget, the fewest victims) in
planners/reclaim_rules.py; here the planner itself (``plan_tick``, ``apply_plan``, ``_TypePlanner``).
Every public name of the three is importable from here (``__all__``).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import itemgetter

from . import reclaim_rules, reclaim_state
from .reclaim_rules import *  # noqa: F403 - re-exported: __all__
from .reclaim_rules import (
    _Budget,
    _fewest_victims,
    _Freed,
    _requeued,
    _started,
    borrow_order,
    comes_back,
    is_guarantee_job,
    may_borrow,
    preemptible_in_share,
    queue_order,
    reclaim_order,
    runs_on,
    victim_order,
)
from .reclaim_state import *  # noqa: F403 - re-exported: __all__
from .reclaim_state import (
    ANY_TYPE,
    IN_SHARE,
    MIN_RUN_TIME,
    NO_VICTIM,
    PREEMPTION_CAP,
    RECLAIM,
    GuaranteeWait,
    PendingJob,
    Plan,
    PoolState,
    Preemption,
    RunningJob,
    Settings,
    Start,
    _GroupTree,
    unchecked_state,
)

__all__ = ["apply_plan", "plan_tick", *reclaim_state.__all__, *reclaim_rules.__all__]


def plan_tick(state: PoolState, settings: Settings = Settings()) -> Plan:
    """Plan one tick. Deterministic: the same state and settings always give the same plan."""
    budget = _Budget(settings)
    starts: list[Start] = []
    preemptions: list[Preemption] = []
    waits: list[GuaranteeWait] = []
    for instance_type in sorted(state.capacity):
        # a job of ANY_TYPE stopped for an earlier type is gone for this one
        planner = _TypePlanner(state, instance_type, settings, budget, gone=frozenset(p.job_id for p in preemptions))
        planner.run()
        starts += planner.starts
        preemptions += planner.preemptions
        waits += planner.waits
    return Plan(starts=tuple(starts), preemptions=tuple(preemptions), capped=budget.capped, waits=tuple(waits))


def apply_plan(state: PoolState, plan: Plan) -> PoolState:
    """The state after the plan is carried out at ``state.now``: victims that come back requeued
    (counting the preemption), the others gone (``comes_back``), started jobs running. Used by the
    simulator and the tests."""
    preempted = {p.job_id for p in plan.preemptions}
    started = {s.job_id for s in plan.starts}
    waiting = {j.job_id: j for j in state.pending}
    for job in state.running:
        if job.job_id in preempted and comes_back(job):
            waiting[job.job_id] = _requeued(job, state.now)
    running = [j for j in state.running if j.job_id not in preempted]
    for start in plan.starts:
        job = waiting.pop(start.job_id)
        running.append(_started(job, state.now))
    return unchecked_state(
        state,
        running=tuple(running),
        pending=tuple(j for j in waiting.values() if j.job_id not in started),
        now=state.now,
    )


@dataclass
class _TypePlanner:
    """Mutable working state for one instance type during one tick."""

    state: PoolState
    instance_type: str
    settings: Settings
    budget: _Budget
    gone: frozenset[str] = frozenset()  # jobs of ANY_TYPE already stopped for an earlier type
    starts: list[Start] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waits: list[GuaranteeWait] = field(default_factory=list)

    def __post_init__(self) -> None:
        t = self.instance_type
        self.capacity = self.state.capacity[t]
        self.shares = {s.name: s for s in self.state.shares}
        self.quota = {s.name: s.quota.get(t, 0) for s in self.state.shares}
        self.ceiling = {s.name: s.ceiling(t, self.capacity) for s in self.state.shares}
        self.jobs: dict[str, dict[str, RunningJob]] = {name: {} for name in self.shares}
        self.unplaced: dict[str, dict[str, RunningJob]] = {name: {} for name in self.shares}  # of ANY_TYPE
        self.usage = dict.fromkeys(self.shares, 0)
        for job in self.state.running:
            if runs_on(job, t) and job.job_id not in self.gone:
                self.jobs[job.share][job.job_id] = job
                self.usage[job.share] += job.count
                if job.instance_type == ANY_TYPE:
                    self.unplaced[job.share][job.job_id] = job
        self.used = sum(self.usage.values())
        # The group tree on this type: each share's groups (nearest first), each group's quota and use.
        self.tree = _GroupTree(self.state.groups, self.state.shares, t)
        self.chain = self.tree.chain
        self.group_usage = dict.fromkeys(self.tree.quota, 0)
        for name, groups in self.chain.items():
            for group in groups:
                self.group_usage[group] += self.usage[name]
        # Idle quota never lent outside a node: a share's (``held_idle``), a group's (its children's,
        # or more under a lending limit); ``reserved_idle`` sums the top level's (outside every group).
        self.held_by_children = dict.fromkeys(self.tree.quota, 0)
        self.group_held = dict.fromkeys(self.tree.quota, 0)
        self.reserved_idle = 0
        for name in self.shares:
            self._hold(name, self.reserved_idle_of(name))
        self.held = 0  # free capacity held for guaranteed jobs that could not start yet
        self._started_now: dict[str, PendingJob] = {}
        self._victims: dict[str, tuple[RunningJob, str]] = {}  # preempted this tick: job and kind
        self._reclaimed_for: set[str] = set()  # jobs started this tick on capacity reclaimed for them
        self._borrowed_sets: dict[str, tuple[RunningJob, ...]] = {}
        self._preemptible: dict[str, dict[int, int]] = {}
        self._why_not = NO_VICTIM  # why the last victim search found no set

    # -- capacity bookkeeping

    def reserved_idle_of(self, share: str) -> int:
        return self.shares[share].held_idle(self.instance_type, self.usage[share])

    def past_usage(self, share: str) -> float:
        """The share's decayed usage per unit of fair-share weight where the pool orders by usage, else 0."""
        if self.settings.usage_half_life_s is None:
            return 0.0
        return self.state.past_usage.get(share, 0.0) / self.shares[share].fair_share_weight

    def free_for(self, share: str) -> int:
        """Free capacity ``share`` may use: not the idle quota held by a node it is not in."""
        blocked = self.reserved_idle
        held = self.reserved_idle_of(share)  # what the node on the share's path holds, level by level
        for group in self.chain[share]:
            blocked += self.held_by_children[group] - held
            held = self.group_held[group]
        return self.capacity - self.used - blocked + held

    def _hold(self, share: str, delta: int) -> None:
        """Carry a change of ``share``'s held idle quota (and of its groups' use) up its groups."""
        for group in self.chain[share]:
            self.held_by_children[group] += delta
            limit = self.tree.lending_limit[group]
            own = 0 if limit is None else self.tree.quota[group] - limit - self.group_usage[group]
            held = max(self.held_by_children[group], own)
            delta, self.group_held[group] = held - self.group_held[group], held
        self.reserved_idle += delta

    def within_guarantee(self, job: PendingJob) -> bool:
        share = job.share
        return is_guarantee_job(
            job, self.shares[share], self.usage[share], lambda: self.preemptible(share, job.priority)
        )

    def preemptible(self, share: str, priority: int) -> int:
        """``preemptible_in_share`` for the share's jobs now, cached until the share's use changes
        (with thousands of pending jobs, walking the share's jobs for each would dominate a tick)."""
        by_priority = self._preemptible.setdefault(share, {})
        if priority not in by_priority:
            by_priority[priority] = preemptible_in_share(self.shares[share], priority, self.jobs[share].values())
        return by_priority[priority]

    def _change_usage(self, share: str, delta: int) -> None:
        before = self.reserved_idle_of(share)
        self.usage[share] += delta
        for group in self.chain[share]:
            self.group_usage[group] += delta
        self._hold(share, self.reserved_idle_of(share) - before)
        self.used += delta
        self._borrowed_sets.pop(share, None)
        self._preemptible.pop(share, None)

    def borrowed_set(self, share: str) -> tuple[RunningJob, ...]:
        """The shortest run of the share's jobs of this type, in ``borrow_order``, whose removal
        brings them back within quota: the only such jobs of this share a reclaim may take (its
        jobs of ANY_TYPE are taken whatever its quota, ``_choose_victims``)."""
        if share not in self._borrowed_sets:
            unplaced = self.unplaced[share]
            excess = self.usage[share] - sum(j.count for j in unplaced.values()) - self.quota[share]
            chosen = []
            jobs = (
                sorted(
                    (j for j in self.jobs[share].values() if j.job_id not in unplaced),
                    key=lambda j: borrow_order(j, self.state.now),
                )
                if excess > 0
                else ()
            )
            for job in jobs:
                if excess <= 0:
                    break
                chosen.append(job)
                excess -= job.count
            self._borrowed_sets[share] = tuple(chosen)
        return self._borrowed_sets[share]

    def beyond_groups(self, share: str, count: int, *, guaranteed_from: str | None = None) -> dict[str, int]:
        """Instances by which ``count`` more of ``share`` would take each of its groups past its
        ceiling (quota + borrowing limit; a group without one is left out), or, from the group
        ``guaranteed_from`` up (the share itself when ``guaranteed_from`` is the share), past its
        quota: a reclaim serves a guarantee, so above the level that guarantees the job no group
        may be left borrowing. 0 or less where it fits."""
        beyond = {}
        guarantee = guaranteed_from == share
        for group in self.chain[share]:
            guarantee = guarantee or group == guaranteed_from
            cap = self.tree.quota[group] if guarantee else self.tree.cap[group]
            if cap is not None:
                beyond[group] = self.group_usage[group] + count - cap
        return beyond

    def guaranteed_by(self, job: PendingJob) -> str | None:
        """The nearest group whose quota still covers a job beyond its share's quota, where the
        share may borrow and every group below it has room under its ceiling: the group's quota is
        guaranteed to its members. None: no group does."""
        share = job.share
        if self.usage[share] + job.count > self.ceiling[share] or not may_borrow(job, self.state.now, self.settings):
            return None
        for group in self.chain[share]:
            if self.group_usage[group] + job.count <= self.tree.quota[group]:
                return group
            cap = self.tree.cap[group]
            if cap is not None and self.group_usage[group] + job.count > cap:
                return None
        return None

    def group_keeps(self, other: str, share: str) -> bool:
        """``other``'s borrowed jobs are within the guarantee of one of its groups that ``share``
        is outside of (a group within its quota is not reclaimed from by a share outside it)."""
        mine = self.chain[share]
        return any(
            group not in mine and self.group_usage[group] <= self.tree.quota[group] for group in self.chain[other]
        )

    def kinship(self, other: str, share: str) -> int:
        """How many groups ``other`` shares with ``share``: a reclaim takes from the most distant first."""
        mine = self.chain[share]
        return sum(1 for group in self.chain[other] if group in mine)

    def protected(self, job: RunningJob) -> bool:
        """Preempted by the controller before and not yet run ``min_run_time_s`` again."""
        return job.times_preempted > 0 and self.state.now - job.started_at < self.settings.min_run_time_s

    # -- the two phases

    def run(self) -> None:
        # Queue entries carry their sort key, computed once: with 50,000 pending jobs the key
        # function would otherwise dominate a tick.
        queue = sorted(
            ((queue_order(j), j) for j in self.state.pending if j.instance_type == self.instance_type),
            key=itemgetter(0),
        )
        rest: dict[str, list[tuple[tuple, PendingJob]]] = {}
        # A job within its share's own quota comes before one only its group's headroom covers:
        # planned the other way round, the group's job could take the group's last room this tick
        # and be reclaimed by the sibling's guarantee job on the next (a start, then a stop).
        # A job set aside for borrowing may be within its quota once a reclaim stopped its share's
        # borrowed jobs: then the set-aside jobs are planned once more, before the group's are
        # (the borrowing phase reclaims nothing, so within a group's quota it could not start).
        group_covered = self._guarantee_phase(queue, rest, defer_group_covered=True)
        if self.preemptions and self.tree.quota and any(rest.values()):
            set_aside = sorted((entry for entries in rest.values() for entry in entries), key=itemgetter(0))
            rest.clear()
            group_covered = sorted(
                group_covered + self._guarantee_phase(set_aside, rest, defer_group_covered=True), key=itemgetter(0)
            )
        self._guarantee_phase(group_covered, rest, defer_group_covered=False)
        self._borrowing_phase(rest)

    def _guarantee_phase(
        self,
        queue: list[tuple[tuple, PendingJob]],
        rest: dict[str, list[tuple[tuple, PendingJob]]],
        *,
        defer_group_covered: bool,
    ) -> list[tuple[tuple, PendingJob]]:
        """Admit ``queue``'s guarantee jobs in queue order; jobs beyond their share's guarantee go
        to ``rest`` (the borrowing phase), or are returned when their group's quota covers them
        and ``defer_group_covered``."""
        requeued: list[tuple[tuple, PendingJob]] = []  # victims, planned again in this tick
        deferred: list[tuple[tuple, PendingJob]] = []
        index = 0
        while index < len(queue) or requeued:
            if requeued and (index == len(queue) or requeued[0][0] < queue[index][0]):
                entry = heapq.heappop(requeued)
            else:
                entry, index = queue[index], index + 1
            job = entry[1]
            if self.shares[job.share].paused:
                continue  # a paused team starts nothing, not even a victim requeued this tick
            if not self.within_guarantee(job):
                covered_by = self.guaranteed_by(job)
                if covered_by is not None and defer_group_covered:
                    deferred.append(entry)
                    continue
                victims = (
                    self.admit(job, self.free_for(job.share), reclaim=True, guaranteed_by=covered_by)
                    if covered_by is not None
                    else None
                )
                if victims is None:
                    heapq.heappush(rest.setdefault(job.share, []), entry)
                for victim in victims or ():
                    heapq.heappush(requeued, (queue_order(victim), victim))
                continue
            victims = self.admit(job, self.free_for(job.share), reclaim=True)
            if victims is None:
                self.held += max(0, job.count - self.reserved_idle_of(job.share))
                self.waits.append(
                    GuaranteeWait(
                        job_id=job.job_id,
                        share=job.share,
                        instance_type=self.instance_type,
                        count=job.count,
                        reason=self._why_not,
                    )
                )
                continue
            for victim in victims:
                heapq.heappush(requeued, (queue_order(victim), victim))
        return sorted(deferred, key=itemgetter(0))

    def _borrowing_phase(self, rest: dict[str, list[tuple[tuple, PendingJob]]]) -> None:
        def key(share: str) -> tuple:
            borrowed = max(0, self.usage[share] - self.quota[share])
            weight = self.shares[share].fair_share_weight
            # shares of a group with idle quota first: they borrow it before the rest
            idle_group = any(self.group_usage[g] < self.tree.quota[g] for g in self.chain[share])
            return (not idle_group, self.past_usage(share), borrowed / weight, share)

        turns = [(key(name), name) for name in rest]
        heapq.heapify(turns)
        in_turns = set(rest)
        # Jobs that found no room, per share, with the share's reach when they did (``_reach``).
        no_room: dict[str, tuple[int, list[tuple[tuple, PendingJob]]]] = {}
        while turns:
            _, name = heapq.heappop(turns)
            in_turns.discard(name)
            entry = heapq.heappop(rest[name])
            available, used = self.free_for(name) - self.held, self.used
            victims = self.admit(entry[1], available, reclaim=False)
            if victims is None:
                no_room.setdefault(name, (self._reach(name), []))[1].append(entry)
            for victim in victims or ():
                heapq.heappush(rest[name], (queue_order(victim), victim))
            if victims is not None and self.used - used < entry[1].count:
                # An in-share preemption freed more than it took: the jobs that found no room are
                # planned again where it grew their share's reach, or the next tick would start
                # them by preempting what this one starts after them (the plan is a fixed point).
                for other, (reach, entries) in list(no_room.items()):
                    if self._reach(other) > reach:
                        del no_room[other]
                        for again in entries:
                            heapq.heappush(rest[other], again)
                        if other not in in_turns and other != name:
                            heapq.heappush(turns, (key(other), other))
                            in_turns.add(other)
            if victims is None and min(available, self.ceiling[name] - self.usage[name]) <= 0:
                # No room at all and no in-share victim for this job: the share's later jobs have
                # no higher priority, so none of them can start this tick until room grows.
                continue
            if rest[name]:
                heapq.heappush(turns, (key(name), name))
                in_turns.add(name)

    def _reach(self, share: str) -> int:
        """The most instances the share could hold in the borrowing phase now, its lower-priority
        jobs counted as room (its own starts and in-share preemptions leave it unchanged): a job
        of the share that found no room can find some only once this grows."""
        usage = self.usage[share]
        caps = [self.tree.cap[g] - self.group_usage[g] for g in self.chain[share] if self.tree.cap[g] is not None]
        return usage + min(self.free_for(share) - self.held, self.ceiling[share] - usage, *caps)

    def admit(
        self, job: PendingJob, available: int, *, reclaim: bool, guaranteed_by: str | None = None
    ) -> list[PendingJob] | None:
        """Start ``job`` on ``available`` free capacity, preempting if needed and allowed.
        Returns the requeued victims, or None when the job cannot start this tick.
        ``guaranteed_by``: the job is within that group's guarantee only (``guaranteed_by``)."""
        share = job.share
        # A job that may not borrow (backed off, or no short declared run time) is held to its
        # share's quota: it still starts, or preempts in-share, inside its own guarantee.
        ceiling = (
            self.ceiling[share]
            if may_borrow(job, self.state.now, self.settings)
            else min(self.ceiling[share], self.quota[share])
        )
        need_capacity = job.count - available
        need_own = self.usage[share] + job.count - ceiling
        need_group = self.beyond_groups(share, job.count)
        if not reclaim:
            need_own = max([need_own, *need_group.values()])  # only its own jobs can make room in its groups
        if need_capacity <= 0 and need_own <= 0 and all(n <= 0 for n in need_group.values()):
            self._start(job)
            return []
        self._why_not = NO_VICTIM
        can_preempt = reclaim or self.shares[share].in_share_preemption
        if not can_preempt or job.count > ceiling:
            return None
        limit = self.budget.limit()
        if limit:
            self._why_not = limit
            return None
        self.budget.searches += 1
        beyond_quota = self.usage[share] + job.count - self.quota[share]
        if reclaim:  # a reclaim leaves no group borrowing from the level that guarantees the job up
            need_group = self.beyond_groups(share, job.count, guaranteed_from=guaranteed_by or share)
        victims = None
        if reclaim and beyond_quota > 0 and guaranteed_by is None:
            # A guarantee job that fits its quota only once its share's lower-priority jobs are set
            # aside. A share already at or above its quota is owed nothing: those jobs alone make
            # room, even if the share then still borrows (Kueue preempts only inside a
            # ClusterQueue at its nominal quota, TestPreemption "preemptions from cq when target
            # queue is exhausted ..."). Otherwise, and when they cannot, a reclaim may help, and
            # then the job must land inside its quota: capacity is reclaimed only for a guarantee.
            if self.usage[share] >= self.quota[share]:
                victims = self._choose_victims(job, need_capacity, max([need_own, *need_group.values()]), reclaim=False)
            need_own = max(need_own, beyond_quota)
        if victims is None:
            victims = self._choose_victims(
                job, need_capacity, need_own, reclaim, need_group=need_group, outside=guaranteed_by
            )
        if victims is None:
            return None
        requeued = [back for victim, kind in victims if (back := self._preempt(victim, kind, job)) is not None]
        if any(kind == RECLAIM for _, kind in victims):
            self._reclaimed_for.add(job.job_id)
        self._start(job)
        return requeued

    def _choose_victims(
        self,
        job: PendingJob,
        need_capacity: int,
        need_own: int,
        reclaim: bool,
        *,
        need_group: Mapping[str, int] | None = None,
        outside: str | None = None,
    ) -> list[tuple[RunningJob, str]] | None:
        """``need_group``: instances the victims must free inside each of the job's groups (past
        its ceiling, or its quota for a reclaim, ``beyond_groups``); ``outside``: reclaim from no
        member of this group (a job within that group's guarantee only)."""
        candidates, protected = self._reclaim_candidates(job, outside) if reclaim else ([], False)
        if self.shares[job.share].in_share_preemption:
            own, own_protected = self._in_share_candidates(job, reclaim)
            candidates += own
            protected = protected or own_protected
        self._why_not = MIN_RUN_TIME if protected else NO_VICTIM
        if sum(v.count for _, v, _ in candidates) < need_capacity:
            return None
        candidates.sort(key=itemgetter(0))
        need_group = {g: n for g, n in (need_group or {}).items() if n > 0}
        freed = _Freed(need_capacity, need_own, need_group, self.chain)
        chosen = _fewest_victims([(v, kind) for _, v, kind in candidates], freed)
        if chosen is not None and len(chosen) > self.settings.max_preemptions_per_tick - self.budget.preemptions:
            self.budget.capped = True
            self._why_not = PREEMPTION_CAP
            return None
        return chosen

    def _reclaim_candidates(
        self, job: PendingJob, outside: str | None
    ) -> tuple[list[tuple[tuple, RunningJob, str]], bool]:
        """Other shares' jobs a reclaim for ``job`` may take, each with its order, and whether one
        was left out as protected."""
        candidates: list[tuple[tuple, RunningJob, str]] = []
        protected = False
        for other in self.shares:
            unplaced = self.unplaced[other]
            if (
                other == job.share
                or outside in self.chain[other]
                or (self.usage[other] <= self.quota[other] and not unplaced)
            ):
                continue
            kin = self.kinship(other, job.share)
            # jobs of ANY_TYPE first, whatever their share's (or group's) guarantee: theirs cannot be established
            borrowed = [*unplaced.values()]
            if not self.group_keeps(other, job.share):
                borrowed += self.borrowed_set(other)
            for v in borrowed:
                if self.protected(v):
                    protected = True
                else:  # borrowers outside the job's groups before its relatives, the nearest last
                    placed = v.instance_type != ANY_TYPE
                    order = (placed, kin, -self.past_usage(other), *reclaim_order(v, self.state.now))
                    candidates.append((order, v, RECLAIM))
        return candidates, protected

    def _in_share_candidates(self, job: PendingJob, reclaim: bool) -> tuple[list[tuple[tuple, RunningJob, str]], bool]:
        """The share's own lower-priority jobs an in-share preemption for ``job`` may take, each
        with its order, and whether one was left out as protected."""
        candidates: list[tuple[tuple, RunningJob, str]] = []
        protected = False
        for v in self.jobs[job.share].values():
            if v.priority >= job.priority or not v.restartable:
                continue  # in-share preemption never stops the team's own work for good
            if not reclaim and v.job_id in self._reclaimed_for:
                # started this tick on capacity reclaimed for it: taking its place would hand
                # that capacity to a job that borrows (a reclaim serves a guarantee only)
                continue
            if self.protected(v):
                protected = True
            else:
                candidates.append(((2, True, 0.0, *victim_order(v, self.state.now)), v, IN_SHARE))
        return candidates, protected

    def _start(self, job: PendingJob) -> None:
        self.jobs[job.share][job.job_id] = _started(job, self.state.now)
        self._started_now[job.job_id] = job
        self._change_usage(job.share, job.count)
        borrowed = min(job.count, max(0, self.usage[job.share] - self.quota[job.share]))
        self.starts.append(
            Start(
                job_id=job.job_id, share=job.share, instance_type=self.instance_type, count=job.count, borrowed=borrowed
            )
        )

    def _preempt(self, victim: RunningJob, kind: str, job: PendingJob) -> PendingJob | None:
        """Take ``victim`` off the pool and return it as a pending job again; None for a job that
        does not come back (``comes_back``)."""
        del self.jobs[victim.share][victim.job_id]
        self.unplaced[victim.share].pop(victim.job_id, None)
        self._change_usage(victim.share, -victim.count)
        if victim.job_id in self._started_now:
            # Started earlier in this very tick: it simply does not start, nothing is lost. What
            # was preempted for it now makes room for ``job`` (same share, higher priority), which
            # starts in this plan: name that job, so every preemption names a job that starts.
            self.starts = [s for s in self.starts if s.job_id != victim.job_id]
            self.preemptions = [
                self._preemption(*self._victims[p.job_id], job) if p.for_job == victim.job_id else p
                for p in self.preemptions
            ]
            if victim.job_id in self._reclaimed_for:
                self._reclaimed_for.add(job.job_id)
            return self._started_now.pop(victim.job_id)
        self.budget.preemptions += 1
        self._victims[victim.job_id] = (victim, kind)
        self.preemptions.append(self._preemption(victim, kind, job))
        return _requeued(victim, self.state.now) if comes_back(victim) else None

    def _preemption(self, victim: RunningJob, kind: str, job: PendingJob) -> Preemption:
        amount = f"{victim.count} x {self.instance_type}"
        if kind == RECLAIM:
            reason = f"reclaims {amount} lent by team {job.share} to team {victim.share}, for job {job.job_id}"
        else:
            reason = (
                f"in-share preemption in team {job.share}: priority {victim.priority} job {victim.job_id} "
                f"gives {amount} to priority {job.priority} job {job.job_id}"
            )
        if victim.instance_type == ANY_TYPE:
            reason += "; its instance type is not known, so it counts as borrowing on every type, and its copy would be as unplaceable: stopped for good"
        elif not victim.restartable:
            reason += "; it cannot be brought back as it was and runs beyond its team's quota: stopped for good"
        return Preemption(
            job_id=victim.job_id,
            share=victim.share,
            instance_type=self.instance_type,
            count=victim.count,
            kind=kind,
            for_job=job.job_id,
            reason=reason,
        )
