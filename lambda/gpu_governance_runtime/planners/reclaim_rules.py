"""The reclaim planner's rules, which planners/reclaim.py applies and re-exports: who is guaranteed
what (``is_guarantee_job``, ``pending_guarantee_jobs``, ``breached_shares``, ``asking_shares``), the
orders jobs are taken in (``victim_order``, ``borrow_order``, ``reclaim_order``, ``queue_order``),
when a preempted job borrows again (``may_borrow``, ``reborrow_at``, ``next_change_at``), what a
share uses (``share_usage``), the anti-thrash budget of a tick (``_Budget``) and the choice of the
fewest victims among ordered candidates (``_fewest_victims``: taken in order, then the reverse pass).

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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .reclaim_state import (
    ANY_TYPE,
    IN_SHARE,
    PREEMPTION_CAP,
    SEARCH_CAP,
    PendingJob,
    PoolState,
    RunningJob,
    Settings,
    Share,
    ShareGroup,
    ShareUsage,
    _GroupTree,
)

__all__ = [
    "asking_shares",
    "borrow_order",
    "breach_tolerance",
    "breached_shares",
    "comes_back",
    "in_use_by_share",
    "is_guarantee_job",
    "may_borrow",
    "next_change_at",
    "pending_guarantee_jobs",
    "preemptible_in_share",
    "queue_order",
    "reborrow_at",
    "reclaim_order",
    "runs_on",
    "share_usage",
    "starved_shares",
    "victim_order",
]


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
class _Freed:
    """What the victims chosen so far free (in all, of the job's own share, inside each of the job's
    groups that must free some) against what the job needs to start."""

    need_capacity: int
    need_own: int
    need_group: Mapping[str, int]
    chain: Mapping[str, tuple[str, ...]]  # each share's groups on this type, nearest first
    capacity: int = 0
    own: int = 0
    group: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.group = dict.fromkeys(self.need_group, 0)

    def short(self, without: tuple[RunningJob, str] | None = None) -> bool:
        """Whether what is freed (less what victim ``without`` frees) is not enough."""
        count, own, groups = 0, 0, ()
        if without is not None:
            victim, kind = without
            count, own, groups = victim.count, victim.count if kind == IN_SHARE else 0, self.chain[victim.share]
        return (
            self.capacity - count < self.need_capacity
            or self.own - own < self.need_own
            or any(self.group[g] - (count if g in groups else 0) < n for g, n in self.need_group.items())
        )

    def add(self, victim: RunningJob, kind: str, sign: int = 1) -> None:
        """Count ``victim`` in (``sign`` 1) or out (-1)."""
        self.capacity += sign * victim.count
        self.own += sign * victim.count if kind == IN_SHARE else 0
        for g in self.chain[victim.share]:
            if g in self.group:
                self.group[g] += sign * victim.count


def _fewest_victims(candidates: list[tuple[RunningJob, str]], freed: _Freed) -> list[tuple[RunningJob, str]] | None:
    """The victims the job needs among ``candidates`` (in order, each with its kind): taken in
    order until the job fits, then the reverse pass drops every one not actually needed. None: all
    of them are not enough."""
    chosen = _take_until_enough(candidates, freed)
    if freed.short():
        return None
    _drop_unneeded(chosen, freed)
    return chosen


def _take_until_enough(candidates: list[tuple[RunningJob, str]], freed: _Freed) -> list[tuple[RunningJob, str]]:
    chosen = []
    for victim, kind in candidates:
        if not freed.short():
            break
        chosen.append((victim, kind))
        freed.add(victim, kind)
    return chosen


def _drop_unneeded(chosen: list[tuple[RunningJob, str]], freed: _Freed) -> None:
    """The reverse pass: the last taken first, drop every victim the start does not need."""
    for victim, kind in reversed(list(chosen)):
        if not freed.short(without=(victim, kind)):
            chosen.remove((victim, kind))
            freed.add(victim, kind, -1)
