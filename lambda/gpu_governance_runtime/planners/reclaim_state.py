"""The reclaim planner's value types and the checks that keep them valid (planners/reclaim.py plans
with them and re-exports every public name): a pool's shares, groups, jobs and settings
(``PoolState``, ``Settings``), what a plan says (``Plan``: ``Start``, ``Preemption``,
``GuaranteeWait``), a share's position for metrics (``ShareUsage``), and the state checks
(``_state_problems``, ``group_tree_problems``, ``_GroupTree``: the group tree on one instance type).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..contract import DEFAULT_REBORROW_BACKOFF_S, SharingStrategy as Strategy, borrow_ceiling, lendable

__all__ = [
    "ANTI_THRASH",
    "ANY_TYPE",
    "IN_SHARE",
    "MIN_RUN_TIME",
    "NO_VICTIM",
    "PREEMPTION_CAP",
    "RECLAIM",
    "SEARCH_CAP",
    "GuaranteeWait",
    "PendingJob",
    "Plan",
    "PoolState",
    "Preemption",
    "RunningJob",
    "Settings",
    "Share",
    "ShareGroup",
    "ShareUsage",
    "Start",
    "Strategy",
    "group_tree_problems",
    "unchecked_state",
]


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
