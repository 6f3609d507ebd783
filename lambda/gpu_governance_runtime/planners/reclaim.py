"""The reclaim / preemption planner: pure, deterministic, no AWS calls.

Given one pool (its capacity, the teams' shares, the running and the pending jobs) it decides
which pending jobs start and the smallest set of running jobs to preempt so that they can.
The Lambda controller, the tests and the ``gpu-governance simulate`` replay all run this code.

Semantics (docs/reclaim.md explains them with examples):

* Every instance type is planned on its own: a job asks for ``count`` instances of one type and
  quotas are per type, as in AWS Batch quota shares.
* A share within its quota gets capacity back from shares running above theirs (reclaim).
  ``reserve`` shares neither lend nor borrow (their idle quota is held for them), ``lend`` shares
  lend but never borrow, ``lend_and_borrow`` shares borrow idle capacity up to their ceiling.
  A ``lending_limit`` (Kueue's ``lendingLimit``) bounds what a lender lends: the rest of its idle
  quota is held for it like a reserve share's. A ``paused`` share starts nothing new; its running
  jobs run on and its idle quota is lent as its strategy says.
* Phase 1, guarantees: guarantee jobs (``is_guarantee_job``: the job fits its share's quota once
  the share's own lower-priority jobs it may preempt in-share are set aside), highest priority,
  then oldest, then job id first. Such a job starts on free capacity, else preempts victims: its
  share's lower-priority jobs alone if the share is at or above its quota and they make room,
  else with other shares' borrowed sets, and then it runs inside its quota (a reclaim serves a
  guarantee, never borrowing); else it waits,
  named in ``Plan.waits`` with the anti-thrash limit that stops it, and holds its size of free
  capacity against borrowers so that finishing work flows to it rather than to them.
* Phase 2, borrowing and the rest: remaining jobs, the share with the least borrowed capacity per
  unit of fair-share weight first (Kueue's fair sharing), inside a share by priority then age.
  Borrowing never preempts another share; only in-share preemption is possible here. A pool that
  orders by usage (``Settings.usage_half_life_s``, docs/governance-file.md#fair-share) puts the share
  with the least decayed usage (``PoolState.past_usage``, reclaim/fair_share.py) per unit of weight
  first, then as above.
* Victims: jobs another share runs above its quota first, then (where the share enables it) the
  share's own lower-priority jobs. Inside a share: lower priority, checkpointable, least work lost
  (instances x time run, for jobs that restart from zero), most recently started, job id; across
  the shares a reclaim takes from, checkpointable and least work lost come before priority
  (``reclaim_order``); a pool that orders by usage takes from the share with the most decayed
  usage per unit of weight first. Candidates are taken in that order until the job fits, then a reverse pass
  drops every victim not actually needed. A reclaim only takes jobs from the share's *borrowed
  set*: the shortest run of its jobs, in ``borrow_order``, whose removal brings it back to quota.
* Groups (``ShareGroup``, levels above the share to any depth: a forest of groups, Kueue's
  hierarchical cohorts, docs/governance-file.md#groups). On each instance type only the groups
  with a quota of it count (a share belongs to its nearest such group, a group to its nearest such
  ancestor). A group's members (its shares and its child groups' members) together never start
  beyond its quota plus its ``borrowing_limit`` (none: no bound on that type; a group of the
  one-level model, ``borrowing_limit`` None, holds its quota at most). Its members borrow first
  (in the borrowing phase shares with a group under its quota take their turns before the others),
  and its quota is guaranteed to them: a share's job beyond its own quota that a group's quota
  still covers (the nearest such group, ``guaranteed_by``) reclaims from borrowers outside that
  group, never from one of its members, and is planned after the jobs within their own share's
  quota. A group within its quota is never reclaimed from by a share outside it. A reclaim
  leaves no group borrowing from the level that guarantees the job up: a share's guarantee job
  whose group is at its quota reclaims from its relatives' borrowed sets. Among borrowers a reclaim
  takes from the most distant first (outside all of the job's groups, then those sharing one
  group with it, ...). A group's ``lending_limit`` bounds how much of its unused quota members
  outside it may hold: the rest is held idle for its members like a reserve share's.
* Nothing a team submits makes its job unreclaimable (docs/reclaim.md, *Jobs that cannot come
  back*). A job its backend cannot bring back as it was once stopped (``RunningJob.restartable``
  False: a Batch array job, a job others depend on) counts against its share's quota before the
  share's other jobs (``borrow_order``), so it runs inside the guarantee whenever the share's such
  jobs fit it; beyond that it is reclaimable like any borrowed job, and stopped for good (the plan
  does not requeue it). In-share preemption never takes one. A running job whose instance type its
  backend does not report (``ANY_TYPE``) counts on every type of the pool, and on each it is the
  first candidate of any reclaim, whatever its share's quota: its place in a guarantee cannot be
  established.
* Anti-thrash: a preemption always names the job it lets start; a job preempted before is
  protected until it has run ``min_run_time_s`` again; at most ``max_preemptions_per_tick``
  preemptions and ``max_preemption_searches_per_tick`` victim searches per tick. A preempted job
  that cannot checkpoint borrows again only after ``reborrow_backoff_s`` x 2^(n-1) (inside its
  quota it restarts at once); with ``borrow_horizon_s`` only jobs that checkpoint or declare a
  run time within it borrow. Victims that come back (``comes_back``) are
  requeued at once and planned again in the same tick, so the plan is a fixed point: planning
  the applied state again preempts nothing more (unless a cap cut the tick short). For the same
  reason a borrowing job that found no room is planned again once an in-share preemption frees
  more than it takes, before its team's lower-priority jobs start on that room: otherwise the next
  tick would start it by preempting them (retrying it is what the next tick would do, one tick
  sooner and without starting work only to stop it).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter

from ..contract import DEFAULT_REBORROW_BACKOFF_S, SharingStrategy as Strategy, borrow_ceiling, lendable


@dataclass(frozen=True, kw_only=True)
class Share:
    """A team's share of one pool. ``borrow_limit`` is a percent of the quota the share may
    borrow on top; None with ``lend_and_borrow`` means unlimited. ``lending_limit`` is the percent
    of its quota it lends at most (None: all of it); ``paused``: none of its pending jobs starts.
    ``borrow_limit_instances`` caps what it borrows per instance type in instances (an absolute
    borrow limit, declared in GPUs), replacing the percent for those types."""

    name: str
    quota: Mapping[str, int]
    strategy: Strategy
    borrow_limit: int | None = None
    in_share_preemption: bool = False
    fair_share_weight: int = 10
    lending_limit: int | None = None
    paused: bool = False
    borrow_limit_instances: Mapping[str, int] = field(default_factory=dict)
    # (GPU hours, "day" | "week" | "month"): the team's hard GPU-hour limit (reclaim.gpu_hours), if any
    gpu_hour_limit: tuple[int, str] | None = None
    # The longest one of its jobs may run, in seconds, where the reclaim controller stops it then
    # (reclaim.run_time): any job's (None: no limit), and by scheduling priority where it differs.
    max_run_s: float | None = None
    max_run_by_priority: Mapping[int, float] = field(default_factory=dict)

    def max_run_of(self, priority: int) -> float | None:
        """The run-time limit of one of its jobs of scheduling priority ``priority``; None: none."""
        return self.max_run_by_priority.get(priority, self.max_run_s)

    def held_idle(self, instance_type: str, in_use: int) -> int:
        """Instances of the share's idle quota never lent: a reserve share's whole idle quota, a
        lender's beyond its lending limit."""
        quota = self.quota.get(instance_type, 0)
        return max(0, quota - lendable(self.strategy, quota, self.lending_limit) - in_use)

    def ceiling(self, instance_type: str, capacity: int) -> int:
        """Most instances of ``instance_type`` the share may hold at once."""
        quota = self.quota.get(instance_type, 0)
        absolute = self.borrow_limit_instances.get(instance_type)
        if absolute is not None and self.strategy is Strategy.LEND_AND_BORROW:
            return min(capacity, quota + absolute)
        ceiling = borrow_ceiling(self.strategy, quota, self.borrow_limit)
        if ceiling is None:
            return capacity
        # Borrowing stops at the pool's size; a quota is taken as given.
        return min(capacity, ceiling) if self.strategy is Strategy.LEND_AND_BORROW else ceiling


@dataclass(frozen=True, kw_only=True)
class ShareGroup:
    """A team group of the governance model, a node of the pool's group tree: its members (its
    ``shares`` and its child groups' members) are guaranteed ``quota`` together (per instance
    type); a type without a quota does not bound the group, and a group without a quota of a
    type is skipped on it (its members belong to its nearest ancestor with one).
    ``borrowing_limit``: instances beyond the quota its members together may hold at most (a type
    not in it: no limit); None: the quota is also the group's ceiling on every type (a group of the
    one-level model). ``lending_limit``: instances of its unused quota members outside it may hold
    at most (a type not in it: all of it)."""

    name: str
    shares: tuple[str, ...]
    quota: Mapping[str, int]
    parent: str | None = None
    borrowing_limit: Mapping[str, int] | None = None
    lending_limit: Mapping[str, int] = field(default_factory=dict)


# The instance type of a running job its backend does not report (a single-node Batch job in a
# pool of several types that names none): planned as running on every type of the pool.
ANY_TYPE = "*"


@dataclass(frozen=True, kw_only=True)
class RunningJob:
    job_id: str
    share: str
    instance_type: str  # or ANY_TYPE
    count: int
    priority: int
    started_at: float
    checkpointable: bool = False
    times_preempted: int = 0
    max_run_time_s: float | None = None  # declared limit (Slurm --time, Batch timeout), if any
    # False: the backend cannot bring the job back as it was once stopped (a Batch array job, a
    # job others depend on; common/batch_copy.restartable): it counts against its share's quota
    # first (borrow_order), never goes in-share, and a reclaim stops it for good.
    restartable: bool = True


@dataclass(frozen=True, kw_only=True)
class PendingJob:
    job_id: str
    share: str
    instance_type: str
    count: int
    priority: int
    submitted_at: float  # a requeued victim's is the time it was requeued
    checkpointable: bool = False
    times_preempted: int = 0
    max_run_time_s: float | None = None  # declared limit (Slurm --time, Batch timeout), if any
    restartable: bool = True  # as RunningJob's, which the job keeps once it starts (the simulator's trace column)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Anti-thrash and cost limits of one tick."""

    # One tick: a restarted victim is the cheapest one to take again, so protecting it longer makes
    # a reclaim take an older job instead; the re-borrow backoff is what stops repeated loss.
    min_run_time_s: float = 60.0
    max_preemptions_per_tick: int = 20
    max_preemption_searches_per_tick: int = 200
    # A preempted job that cannot checkpoint borrows again only reborrow_backoff_s x 2^(n-1) after
    # its n-th preemption (inside its own quota it restarts at once): a reclaimed job cannot go
    # straight back onto lent capacity and lose its work again (docs/reclaim.md, Anti-thrash).
    reborrow_backoff_s: float = DEFAULT_REBORROW_BACKOFF_S
    # When set, a job that cannot checkpoint borrows only if it declares a maximum run time of at
    # most this many seconds: lent capacity is expected back within it. None: any such job borrows.
    borrow_horizon_s: float | None = None
    # A victim keeps running this long after it is chosen, to checkpoint, and is stopped only then
    # (Slurm's QoS GraceTime): the plan is unchanged, the controller and the simulator carry it out.
    grace_s: float = 0.0
    # Set: borrowers and the shares a reclaim takes from are ordered by their decayed usage
    # (``PoolState.past_usage``, computed with this half-life by reclaim/fair_share.py) before what
    # they borrow now. None: by what they borrow now only.
    usage_half_life_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class PoolState:
    capacity: Mapping[str, int]
    shares: tuple[Share, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    now: float
    groups: tuple[ShareGroup, ...] = ()
    # Each share's decayed instance-hours (reclaim/fair_share.py), read only when the pool orders by
    # usage (``Settings.usage_half_life_s``); a share not named has none.
    past_usage: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = _state_problems(self)
        if problems:
            raise ValueError("invalid pool state:\n" + "\n".join(problems))


@dataclass(frozen=True, kw_only=True)
class Start:
    job_id: str
    share: str
    instance_type: str
    count: int
    borrowed: int  # instances of this job above the share's quota


@dataclass(frozen=True, kw_only=True)
class Preemption:
    job_id: str
    share: str
    instance_type: str
    count: int
    kind: str  # "reclaim" or "in_share"
    for_job: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class GuaranteeWait:
    """A guarantee job (``is_guarantee_job``) that does not start this tick, and the anti-thrash
    limit that keeps it waiting: a ``Settings`` field name, or NO_VICTIM, which the capacity
    argument of docs/reclaim.md rules out (the property tests check that it never occurs)."""

    job_id: str
    share: str
    instance_type: str
    count: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    starts: tuple[Start, ...]
    preemptions: tuple[Preemption, ...]
    capped: bool  # a preemption or search cap stopped the tick early; the next tick continues
    waits: tuple[GuaranteeWait, ...] = ()  # guarantee jobs that wait, each with its reason


# Why a guarantee job waits: the anti-thrash limits (Settings fields), and what must never happen.
MIN_RUN_TIME = "min_run_time_s"
PREEMPTION_CAP = "max_preemptions_per_tick"
SEARCH_CAP = "max_preemption_searches_per_tick"
ANTI_THRASH = (MIN_RUN_TIME, PREEMPTION_CAP, SEARCH_CAP)
NO_VICTIM = "no_victim"


RECLAIM = "reclaim"
IN_SHARE = "in_share"


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


def unchecked_state(
    state: PoolState,
    *,
    running: tuple[RunningJob, ...],
    pending: tuple[PendingJob, ...],
    now: float,
    past_usage: Mapping[str, float] | None = None,
) -> PoolState:
    """``state`` with other jobs (and ``past_usage``, if given), without the validation of
    ``PoolState``: only for callers that keep the state valid themselves (``apply_plan``, whose
    result the property tests check, and the simulator, which checks its jobs once up front).
    Validation would dominate a replay."""
    new = object.__new__(PoolState)
    for name, value in (
        ("capacity", state.capacity),
        ("shares", state.shares),
        ("running", running),
        ("pending", pending),
        ("now", now),
        ("groups", state.groups),
        ("past_usage", state.past_usage if past_usage is None else past_usage),
    ):
        object.__setattr__(new, name, value)
    return new


@dataclass(frozen=True, kw_only=True)
class ShareUsage:
    """One share's position on one instance type, for metrics and dashboards."""

    share: str
    instance_type: str
    guaranteed: int
    in_use: int
    borrowed: int
    lent: int
    pending: int


def share_usage(state: PoolState) -> tuple[ShareUsage, ...]:
    """Per share and instance type. Capacity borrowers use is attributed first to capacity no
    share is guaranteed, then to lending shares' idle quota in share-name order (a convention:
    borrowing does not come from one lender in particular)."""
    rows = []
    for instance_type in sorted(state.capacity):
        in_use = _sum_by_share(state.running, instance_type)
        pending = _sum_by_share(state.pending, instance_type)
        quota = {s.name: s.quota.get(instance_type, 0) for s in state.shares}
        borrowed_total = sum(max(0, in_use.get(n, 0) - q) for n, q in quota.items())
        unassigned = max(0, state.capacity[instance_type] - sum(quota.values()))
        to_attribute = max(0, borrowed_total - unassigned)
        for share in sorted(state.shares, key=lambda s: s.name):
            q, used = quota[share.name], in_use.get(share.name, 0)
            lent = min(max(0, q - used) - share.held_idle(instance_type, used), to_attribute)
            to_attribute -= lent
            if q or used or pending.get(share.name):
                rows.append(
                    ShareUsage(
                        share=share.name,
                        instance_type=instance_type,
                        guaranteed=q,
                        in_use=used,
                        borrowed=max(0, used - q),
                        lent=lent,
                        pending=pending.get(share.name, 0),
                    )
                )
    return tuple(rows)


# --- implementation ----------------------------------------------------------------------------


def _state_problems(state: PoolState) -> list[str]:
    problems = []
    names = [s.name for s in state.shares]
    if len(set(names)) != len(names):
        problems.append(f"shares: duplicate share names in {sorted(names)}")
    for share, hours in sorted(state.past_usage.items()):
        if not (isinstance(hours, (int, float)) and math.isfinite(hours) and hours >= 0):
            problems.append(f"past_usage.{share}: {hours!r} - a finite number of instance-hours >= 0")
    for share in state.shares:
        for instance_type, quota in share.quota.items():
            if instance_type not in state.capacity:
                problems.append(
                    f"shares.{share.name}.quota.{instance_type}: not in the pool (has {sorted(state.capacity)})"
                )
            if quota < 0:
                problems.append(f"shares.{share.name}.quota.{instance_type}: {quota} is negative")
        if share.borrow_limit is not None and share.strategy is not Strategy.LEND_AND_BORROW:
            problems.append(
                f"shares.{share.name}.borrow_limit: only lend_and_borrow borrows, not {share.strategy.value}"
            )
        if share.lending_limit is not None and (
            share.strategy is Strategy.RESERVE or not 0 <= share.lending_limit <= 100
        ):
            problems.append(
                f"shares.{share.name}.lending_limit: {share.lending_limit} - a percent 0-100, and only for a share that lends"
            )
    known = set(names)
    problems += group_tree_problems(state.capacity, state.shares, state.groups)
    seen: set[str] = set()
    for kind, jobs, types in (
        ("running", state.running, {*state.capacity, ANY_TYPE}),
        ("pending", state.pending, state.capacity),
    ):
        for job in jobs:
            # The check runs on every tick of a replay: the message is built only for a bad job.
            if job.job_id in seen or job.share not in known or job.instance_type not in types or job.count < 1:
                problems += _job_problems(f"{kind}.{job.job_id}", job, seen, known, types)
            seen.add(job.job_id)
    return problems


def group_tree_problems(
    capacity: Mapping[str, int], shares: Iterable[Share], groups: Iterable[ShareGroup]
) -> list[str]:
    """What is wrong with a pool's group tree (``path: what - allowed``; the policy reader and
    ``PoolState`` ask): each share in at most one group, each parent a group of the pool and no
    cycle, limits of the pool's types, and each quota at least what its children are guaranteed."""
    problems = []
    shares, groups = tuple(shares), tuple(groups)
    known = {s.name for s in shares}
    by_name = {g.name: g for g in groups}
    if len(by_name) != len(groups):
        problems.append(f"groups: duplicate group names in {sorted(g.name for g in groups)}")
    grouped: set[str] = set()
    for group in groups:
        where = f"groups.{group.name}"
        for name in group.shares:
            if name not in known or name in grouped:
                problems.append(f"{where}.shares: {name!r} is not a share of the pool or is in another group")
            grouped.add(name)
        if group.parent is not None and group.parent not in by_name:
            problems.append(f"{where}.parent: {group.parent!r} - one of the pool's groups {sorted(by_name)}")
        elif group.name in _ancestors(group.parent, by_name):
            problems.append(f"{where}.parent: {group.parent!r} - a group that is not its own descendant (a cycle)")
        for kind, limits in (("borrowing_limit", group.borrowing_limit or {}), ("lending_limit", group.lending_limit)):
            for instance_type, limit in limits.items():
                if instance_type not in capacity or limit < 0:
                    problems.append(f"{where}.{kind}.{instance_type}: {limit} - instances >= 0 of a type of the pool")
    if problems:  # the tree below is walked only when it is one
        return problems
    for instance_type in capacity:
        tree = _GroupTree(groups, shares, instance_type)
        for group, quota in tree.quota.items():
            children = sum(s.quota.get(instance_type, 0) for s in shares if tree.parent_of(s.name) == group)
            children += sum(tree.quota[g] for g in tree.quota if tree.parent.get(g) == group)
            if quota < children:
                problems.append(
                    f"groups.{group}.quota.{instance_type}: {quota} - at least its shares' and child groups' quotas ({children})"
                )
    for group in groups:
        for instance_type in group.quota:
            if instance_type not in capacity:
                problems.append(f"groups.{group.name}.quota.{instance_type}: not in the pool (has {sorted(capacity)})")
    return problems


def _ancestors(name: str | None, by_name: Mapping[str, ShareGroup]) -> list[str]:
    """``name`` and its ancestors, nearest first; stops at a cycle or an unknown parent."""
    chain: list[str] = []
    while name is not None and name in by_name and name not in chain:
        chain.append(name)
        name = by_name[name].parent
    return chain


class _GroupTree:
    """The pool's group tree on one instance type: the groups with a quota of it, each under its
    nearest ancestor with one (``parent``), and each share under its nearest group with one."""

    def __init__(self, groups: tuple[ShareGroup, ...], shares: tuple[Share, ...], instance_type: str) -> None:
        by_name = {g.name: g for g in groups}
        bounded = {g.name: g for g in groups if instance_type in g.quota}
        self.quota = {name: g.quota[instance_type] for name, g in bounded.items()}
        # quota + borrowing limit; None: no limit
        self.cap: dict[str, int | None] = {}
        self.lending_limit: dict[str, int | None] = {}
        for name, g in bounded.items():
            borrowing = 0 if g.borrowing_limit is None else g.borrowing_limit.get(instance_type)
            self.cap[name] = None if borrowing is None else g.quota[instance_type] + borrowing
            self.lending_limit[name] = g.lending_limit.get(instance_type)
        self.parent = {name: self._nearest(by_name[name].parent, by_name, bounded) for name in bounded}
        direct = {share: g.name for g in groups for share in g.shares}
        # share -> its groups with a quota of the type, nearest first
        self.chain = {s.name: tuple(g for g in _ancestors(direct.get(s.name), by_name) if g in bounded) for s in shares}

    @staticmethod
    def _nearest(name: str | None, by_name: Mapping[str, ShareGroup], bounded: Mapping[str, ShareGroup]) -> str | None:
        return next((g for g in _ancestors(name, by_name) if g in bounded), None)

    def parent_of(self, share: str) -> str | None:
        chain = self.chain[share]
        return chain[0] if chain else None


def _job_problems(
    where: str, job: RunningJob | PendingJob, seen: set[str], known: set[str], types: Iterable[str]
) -> list[str]:
    problems = []
    if job.job_id in seen:
        problems.append(f"{where}: job id appears twice")
    if job.share not in known:
        problems.append(f"{where}.share: {job.share!r} is not a share of the pool (one of {sorted(known)})")
    if job.instance_type not in types:
        problems.append(f"{where}.instance_type: {job.instance_type!r} is not in the pool (one of {sorted(types)})")
    if job.count < 1:
        problems.append(f"{where}.count: {job.count} - at least 1")
    return problems


def _sum_by_share(jobs: Iterable[RunningJob | PendingJob], instance_type: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for job in jobs:
        if job.instance_type == instance_type:
            totals[job.share] = totals.get(job.share, 0) + job.count
    return totals


def _requeued(job: RunningJob, now: float) -> PendingJob:
    return PendingJob(
        job_id=job.job_id,
        share=job.share,
        instance_type=job.instance_type,
        count=job.count,
        priority=job.priority,
        submitted_at=now,
        checkpointable=job.checkpointable,
        times_preempted=job.times_preempted + 1,
        max_run_time_s=job.max_run_time_s,
        restartable=job.restartable,
    )


def _started(job: PendingJob, now: float) -> RunningJob:
    return RunningJob(
        job_id=job.job_id,
        share=job.share,
        instance_type=job.instance_type,
        count=job.count,
        priority=job.priority,
        started_at=now,
        checkpointable=job.checkpointable,
        times_preempted=job.times_preempted,
        max_run_time_s=job.max_run_time_s,
        restartable=job.restartable,
    )


def comes_back(job: RunningJob) -> bool:
    """Whether a stopped job waits again (its backend requeues it or submits its copy): not one
    its backend cannot bring back, nor one of ANY_TYPE, whose copy is as unplaceable as it was."""
    return job.restartable and job.instance_type != ANY_TYPE


def runs_on(job: RunningJob, instance_type: str) -> bool:
    """Whether ``job`` counts on ``instance_type``: a job of ANY_TYPE counts on every type."""
    return job.instance_type == instance_type or job.instance_type == ANY_TYPE


def is_guarantee_job(job: PendingJob, share: Share, in_use: int, preemptible: Callable[[], int]) -> bool:
    """The one definition of a job inside its team's guarantee (planner, ``starved_shares``, the
    simulator's breach count and ``status`` all ask this): it fits the share's quota once the
    share's own jobs it may preempt in-share are set aside. What is still missing is reclaimed
    from borrowers. ``in_use``: the share's instances of the job's type; ``preemptible()``
    (called only when it matters): ``preemptible_in_share`` of the share's running jobs."""
    if share.paused:  # a paused team is owed nothing new: its jobs wait for it to resume
        return False
    quota = share.quota.get(job.instance_type, 0)
    if in_use + job.count <= quota:
        return True
    return share.in_share_preemption and in_use - preemptible() + job.count <= quota


def pending_guarantee_jobs(
    shares: Iterable[Share], running: Iterable[RunningJob], pending: Iterable[PendingJob]
) -> Iterable[PendingJob]:
    """The pending jobs that are guarantee jobs (``is_guarantee_job``) against these running jobs."""
    by_name = {s.name: s for s in shares}
    own: dict[tuple[str, str], list[RunningJob]] = {}
    in_use: dict[tuple[str, str], int] = {}
    for job in running:
        own.setdefault((job.share, job.instance_type), []).append(job)
        in_use[job.share, job.instance_type] = in_use.get((job.share, job.instance_type), 0) + job.count
    for job in pending:
        # the share's jobs of the job's type, and those of ANY_TYPE (runs_on)
        where, unplaced, share = (job.share, job.instance_type), (job.share, ANY_TYPE), by_name[job.share]
        if is_guarantee_job(
            job,
            share,
            in_use.get(where, 0) + in_use.get(unplaced, 0),
            lambda: preemptible_in_share(share, job.priority, [*own.get(where, ()), *own.get(unplaced, ())]),
        ):
            yield job


def starved_shares(state: PoolState) -> set[str]:
    """Shares with a pending guarantee job (``is_guarantee_job``) that is not running."""
    return {job.share for job in pending_guarantee_jobs(state.shares, state.running, state.pending)}


def breach_tolerance(tick_s: float, settings: Settings) -> float:
    """How long a guarantee job may wait before it is a breach: a tick, plus the pool's grace (a
    lender's wait for its victims' grace is the grace's design, docs/reclaim.md)."""
    return tick_s + settings.grace_s


def breached_shares(
    shares: Iterable[Share],
    running: Iterable[RunningJob],
    pending: Iterable[PendingJob],
    *,
    waited_before: float,
    usage: Mapping[tuple[str, str], int] | None = None,
    waiting_since: Callable[[PendingJob], float] = lambda job: job.submitted_at,
    groups: Iterable[ShareGroup] = (),
    borrows: Callable[[PendingJob], bool] = lambda job: True,
) -> set[str]:
    """The one definition of a broken guarantee (the simulator's breach count and kept share, the
    controller's ``GuaranteeBreachedHours``): shares with a guarantee job (``is_guarantee_job``)
    waiting since before ``waited_before`` (now less ``breach_tolerance``) while another share
    runs above its quota on the job's type - lent capacity not taken back in time; in a group
    tree also a job beyond its share's quota that a group's quota covers (``_TreeUse.guaranteed``)
    waiting while a share outside that group borrows. ``usage``: the instances of ``running`` per
    (share, type), where the caller keeps it; ``borrows``: whether a job may borrow now
    (``may_borrow``, a group's guarantee being borrowing for its share)."""
    shares = tuple(shares)
    quotas = {(s.name, t): quota for s in shares for t, quota in s.quota.items()}
    if usage is None:
        running = tuple(running)
        usage = in_use_by_share(running)
    borrowing = {t for (share, t), used in usage.items() if used > quotas.get((share, t), 0)}
    if ANY_TYPE in borrowing:  # a job of unknown type counts as borrowing on every type (runs_on)
        borrowing = {t for _, t in quotas} | {j.instance_type for j in pending}
    if not borrowing:
        return set()
    waited = [job for job in pending if job.instance_type in borrowing and waiting_since(job) <= waited_before]
    if not waited:
        return set()
    breached = {job.share for job in pending_guarantee_jobs(shares, running, waited)}
    groups = tuple(groups)
    trees: dict[str, _TreeUse] = {}  # per instance type, built once
    for job in waited:
        if groups and job.share not in breached and borrows(job):
            t = job.instance_type
            tree = trees.get(t) or trees.setdefault(t, _TreeUse(groups, shares, usage, t))
            if tree.guaranteed(job):
                breached.add(job.share)
    return breached


class _TreeUse:
    """The group tree on one instance type with what each share and group holds of it now (the
    breach count's view of ``_TypePlanner.guaranteed_by``)."""

    def __init__(
        self, groups: tuple[ShareGroup, ...], shares: tuple[Share, ...], usage: Mapping[tuple[str, str], int], t: str
    ) -> None:
        self.tree, self.shares = _GroupTree(groups, shares, t), {s.name: s for s in shares}
        self.in_use = {s.name: usage.get((s.name, t), 0) + usage.get((s.name, ANY_TYPE), 0) for s in shares}
        self.group_use = dict.fromkeys(self.tree.quota, 0)
        for name, chain in self.tree.chain.items():
            for group in chain:
                self.group_use[group] += self.in_use[name]

    def guaranteed(self, job: PendingJob) -> bool:
        """Whether a group's quota covers ``job`` (the nearest with room, within its share's
        ceiling and every nearer group's) while a share outside that group runs above its quota,
        not kept by a group of its own within its quota."""
        tree, share, used = self.tree, self.shares[job.share], self.in_use[job.share]
        # the ceiling with the pool's size left out: only a share that may borrow this much passes
        if share.paused or used + job.count > share.ceiling(job.instance_type, used + job.count):
            return False
        mine = tree.chain[job.share]
        for group in mine:
            if self.group_use[group] + job.count <= tree.quota[group]:
                return any(
                    self.in_use[other.name] > other.quota.get(job.instance_type, 0)
                    and group not in tree.chain[other.name]
                    and not any(self.group_use[g] <= tree.quota[g] for g in tree.chain[other.name] if g not in mine)
                    for other in self.shares.values()
                )
            cap = tree.cap[group]
            if cap is not None and self.group_use[group] + job.count > cap:
                return False
        return False


def asking_shares(
    shares: Iterable[Share], usage: Mapping[tuple[str, str], int], waiting: Iterable[tuple[str, str, int]]
) -> set[str]:
    """Shares that ask for their guarantee: they run instances within their quota, or a job of
    theirs (``waiting``: (share, instance type, count)) waits that is a guarantee job beside what
    they run (``is_guarantee_job``). The time they ask is what a kept share is a share of."""
    by_name = {s.name: s for s in shares}
    asking = {
        share
        for (share, t), used in usage.items()
        if used and (any(by_name[share].quota.values()) if t == ANY_TYPE else by_name[share].quota.get(t, 0))
    }
    idle = set(by_name) - asking  # they run nothing within their quota: a guarantee job is one that fits it
    for share, instance_type, count in waiting:
        if share in idle:
            job = PendingJob(
                job_id="", share=share, instance_type=instance_type, count=count, priority=0, submitted_at=0
            )
            if is_guarantee_job(job, by_name[share], 0, lambda: 0):
                asking.add(share)
                idle.discard(share)
                if not idle:
                    break
    return asking


def in_use_by_share(running: Iterable[RunningJob]) -> dict[tuple[str, str], int]:
    """Instances in use per (share, instance type)."""
    usage: dict[tuple[str, str], int] = {}
    for job in running:
        usage[job.share, job.instance_type] = usage.get((job.share, job.instance_type), 0) + job.count
    return usage


def preemptible_in_share(share: Share, priority: int, own_running: Iterable[RunningJob]) -> int:
    """Instances of the share's running jobs (of one type) a job of ``priority`` may preempt in its
    own share: strictly lower priority, where the share enables it, and one it can bring back (in-share
    preemption never stops the team's own work for good). A victim's anti-thrash protection does
    not count here: it can make a guarantee job wait, and then says so."""
    if not share.in_share_preemption:
        return 0
    return sum(job.count for job in own_running if job.priority < priority and job.restartable)


def victim_order(job: RunningJob, now: float) -> tuple:
    """Preempt first: lower priority, checkpointable, least work lost (instances x time run, for
    a job that restarts from zero), most recently started, then job id."""
    lost = 0.0 if job.checkpointable else job.count * (now - job.started_at)
    return (job.priority, not job.checkpointable, lost, -job.started_at, job.job_id)


def borrow_order(job: RunningJob, now: float) -> tuple:
    """The order in which a share's jobs of one type give its capacity back: its jobs that can
    come back before those that cannot (these count against the quota first, so they run inside
    the guarantee whenever they fit it), then ``victim_order``."""
    return (not job.restartable, *victim_order(job, now))


def reclaim_order(job: RunningJob, now: float) -> tuple:
    """Among the borrowed sets of other shares, reclaim first: checkpointable, least work lost,
    then lower priority, most recently started, job id. Every candidate runs on lent capacity the
    lender is owed, so the borrower's priority does not outweigh the work a restart throws away:
    a critical team's ten-minute borrowed job goes before a standard team's week-old one
    (Kueue's reclaimWithinCohort: Any takes borrowers regardless of priority too)."""
    priority, not_checkpointable, lost, *rest = victim_order(job, now)
    return (not_checkpointable, lost, priority, *rest)


def reborrow_at(job: PendingJob, settings: Settings) -> float:
    """When a preempted job that cannot checkpoint may borrow again (exponential backoff)."""
    if job.checkpointable or not job.times_preempted:
        return job.submitted_at
    return job.submitted_at + _backoff(job.times_preempted, settings)


def _backoff(times_preempted: int, settings: Settings) -> float:
    return settings.reborrow_backoff_s * 2 ** min(times_preempted - 1, 30)


def may_borrow(job: PendingJob, now: float, settings: Settings) -> bool:
    """Whether ``job`` may start on capacity above its share's quota at ``now``."""
    if job.checkpointable:
        return True
    if settings.borrow_horizon_s is not None and (
        job.max_run_time_s is None or job.max_run_time_s > settings.borrow_horizon_s
    ):
        return False
    return now >= reborrow_at(job, settings)


def next_change_at(state: PoolState, settings: Settings) -> float | None:
    """The earliest time after ``state.now`` at which a plan may change with nothing else
    happening: a protected job becomes preemptible, or a backed-off job may borrow again."""
    times = [job.started_at + settings.min_run_time_s for job in state.running if job.times_preempted]
    times += [reborrow_at(job, settings) for job in state.pending if job.times_preempted]
    return min((t for t in times if t > state.now), default=None)


def queue_order(job: PendingJob) -> tuple:
    return (-job.priority, job.submitted_at, job.job_id)


@dataclass
class _Budget:
    settings: Settings
    preemptions: int = 0
    searches: int = 0
    capped: bool = False

    def limit(self) -> str | None:
        """The cap this tick has reached, if any (and then the plan is capped)."""
        if self.preemptions >= self.settings.max_preemptions_per_tick:
            self.capped = True
            return PREEMPTION_CAP
        if self.searches >= self.settings.max_preemption_searches_per_tick:
            self.capped = True
            return SEARCH_CAP
        return None


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
        candidates: list[tuple[tuple, RunningJob, str]] = []
        protected = False  # a victim left out as protected: the anti-thrash reason if none is found
        need_group = {g: n for g, n in (need_group or {}).items() if n > 0}
        if reclaim:
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
        if self.shares[job.share].in_share_preemption:
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
        self._why_not = MIN_RUN_TIME if protected else NO_VICTIM
        if sum(v.count for _, v, _ in candidates) < need_capacity:
            return None
        candidates.sort(key=lambda c: c[0])
        room = self.settings.max_preemptions_per_tick - self.budget.preemptions
        chosen: list[tuple[RunningJob, str]] = []
        freed = freed_own = 0
        freed_group = dict.fromkeys(need_group, 0)

        def short(capacity: int, own: int, victim: RunningJob | None = None) -> bool:
            """Whether freeing ``capacity`` (``own`` of it the job's share's), and in its groups what
            the chosen victims free there less ``victim``'s, is not enough."""
            less = self.chain[victim.share] if victim is not None else ()
            return (
                capacity < need_capacity
                or own < need_own
                or any(freed_group[g] - (victim.count if g in less else 0) < n for g, n in need_group.items())
            )

        for _, victim, kind in candidates:
            if not short(freed, freed_own):
                break
            chosen.append((victim, kind))
            freed += victim.count
            freed_own += victim.count if kind == IN_SHARE else 0
            for g in self.chain[victim.share]:
                if g in freed_group:
                    freed_group[g] += victim.count
        if short(freed, freed_own):
            return None
        for victim, kind in reversed(list(chosen)):  # drop every victim the start does not need
            own = victim.count if kind == IN_SHARE else 0
            if not short(freed - victim.count, freed_own - own, victim):
                chosen.remove((victim, kind))
                freed -= victim.count
                freed_own -= own
                for g in self.chain[victim.share]:
                    if g in freed_group:
                        freed_group[g] -= victim.count
        if len(chosen) > room:
            self.budget.capped = True
            self._why_not = PREEMPTION_CAP
            return None
        return chosen

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
