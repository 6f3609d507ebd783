"""The governance model of one ``hyperpod_slurm`` pool as a Slurm plan (see docs/slurm.md).

Capacity is physical, order is QoS: each team's quota becomes its own HyperPod instance groups
behind a partition only its account may use; lending teams' nodes (and unassigned capacity)
also form the ``borrow`` partition, reachable only through preemptible borrow QoS. A capacity
window feeding an instance group of the pool adds that group to its owner's partition only: what
the window's training plan brings is the owner's alone, never lent.
"""

from __future__ import annotations

import weakref
from dataclasses import replace
from typing import Any

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model.base import OrganisationView
from constructs_lib.model.projects import group_in_pool, groups_in_pool, parent_in_pool
from constructs_lib.model.quota import borrow_instances, instance_quota
from constructs_lib.model.run_limits import any_class_max_run_minutes, max_run_limited, max_run_minutes
from gpu_governance_runtime.slurm import (
    BORROW_PARTITION,
    DataPath,
    PosixGroup,
    SlurmAccount,
    SlurmGroupAccount,
    SlurmPartition,
    SlurmPlan,
    SlurmQos,
    SlurmUser,
    borrow_qos_name,
    class_qos_name,
)

from .checks import data_root_problems, slurm_problems
from .layout import (
    GROUP_PREFIX,
    UNASSIGNED_OWNER,
    InstanceGroup,
    hyperpod_instance_groups,
    posix_user_name,
    slurm_pool,
    team_gids,
    window_instance_groups,
)

DEFAULT_DATA_ROOT = "/fsx/teams"
# A GPU-hour limit's period as slurm.conf PriorityUsageResetPeriod: cleared at midnight, at the
# start of the week and on the first of the month (https://slurm.schedmd.com/slurm.conf.html).
# One setting per cluster, so every limited team of a pool shares one period.
SLURM_RESET_PERIOD = {"day": "DAILY", "week": "WEEKLY", "month": "MONTHLY"}

# Plans by model (its id, dropped when the model is collected), pool and data root. The model is
# frozen, so its plan never changes; discovery and the audit ask for it once per team, and
# building it (every team, lenders' QoS preempting every borrower's) each time made synthesis
# cubic in the teams (docs/performance.md).
_PLANS: dict[int, dict[tuple[str, str], SlurmPlan]] = {}


def slurm_plan(model: OrganisationView, pool_name: str, *, data_root: str = DEFAULT_DATA_ROOT) -> SlurmPlan:
    """The Slurm plan for one ``hyperpod_slurm`` pool; every problem raises one GovernanceError."""
    plans = _PLANS.get(id(model))
    if plans is None:
        plans = _PLANS[id(model)] = {}
        weakref.finalize(model, _PLANS.pop, id(model), None)
    key = (pool_name, data_root)
    if key not in plans:
        plans[key] = _build_slurm_plan(model, pool_name, data_root)
    return plans[key]


def _build_slurm_plan(model: OrganisationView, pool_name: str, data_root: str) -> SlurmPlan:
    problems = data_root_problems(data_root) + slurm_problems(model, pool_name)
    if problems:
        raise GovernanceError(problems)
    data_root = data_root.rstrip("/")
    pool = slurm_pool(model, pool_name)
    teams = model.teams_in(pool.name)
    classes = sorted(model.priority_classes, key=lambda c: (-c.weight, c.name))
    borrowers = [t for t in teams if t.sharing.borrows]
    group_of = {t.name: g.name for t in teams if (g := group_in_pool(model.groups, t.name, pool.name)) is not None}
    gids = team_gids(model)
    qos = [q for t in teams for q in _team_qos(model, pool, t, classes, borrowers, grouped=t.name in group_of)]
    return SlurmPlan(
        organisation=model.organisation,
        qos=_with_grace(qos, pool.reclaim.grace_seconds),
        accounts=tuple(_account(t, classes, group_of.get(t.name)) for t in teams),
        users=tuple(user for t in teams for user in _users(t)),
        partitions=_partitions(model, pool, teams, classes, borrowers),
        groups=tuple(PosixGroup(name=GROUP_PREFIX + t.name, gid=gids[t.name], members=_logins(t)) for t in teams),
        data_paths=tuple(DataPath(path=f"{data_root}/{t.name}", group=GROUP_PREFIX + t.name) for t in teams),
        usage_reset_period=next(
            (SLURM_RESET_PERIOD[t.gpu_hour_limit.period.value] for t in teams if t.gpu_hour_limit), None
        ),
        decay_half_life=_slurm_half_life(pool.reclaim.fair_share.half_life_seconds),
        group_accounts=_group_accounts(model, pool, teams),
    )


def _team_qos(
    model: OrganisationView, pool: Any, team: Any, classes: list[Any], borrowers: list[Any], *, grouped: bool
) -> list[SlurmQos]:
    """A team's QoS: one per priority class, most urgent first, then its borrow QoS if it borrows."""
    # Refuse at submission what no limit would ever let run: wall time, a member's GPUs (tests/slurm/test_limits_real_slurm.py).
    limited = team.user_limits is not None or max_run_limited(model, team, pool)
    qos = [_class_qos(team, pool, classes, index, borrowers, limited) for index in range(len(classes))]
    if team.sharing.borrows:
        qos.append(_borrow_qos(team, pool, classes, limited, grouped=grouped))
    return qos


def _class_qos(team: Any, pool: Any, classes: list[Any], index: int, borrowers: list[Any], limited: bool) -> SlurmQos:
    priority_class = classes[index]
    # Borrowers only ever run on lent nodes, so only a lender's jobs need to reclaim.
    preempts = [borrow_qos_name(b.name) for b in borrowers] if team.sharing.lends else []
    if team.sharing.in_share_preemption:
        preempts += [
            class_qos_name(team.name, c.name) for c in classes[index + 1 :] if c.weight < priority_class.weight
        ]
    return SlurmQos(
        name=class_qos_name(team.name, priority_class.name),
        priority=priority_class.weight,
        preempts=tuple(preempts),
        max_wall_minutes=max_run_minutes(team, pool, priority_class),
        deny_on_limit=limited,
    )


def _borrow_qos(team: Any, pool: Any, classes: list[Any], limited: bool, *, grouped: bool) -> SlurmQos:
    borrow_gpus = _borrow_gpus(team, pool)
    # A grouped team's cap per account: the group's GrpTRES must still count these jobs (SlurmQos.account_gpus).
    cap = {"account_gpus": borrow_gpus} if grouped else {"grp_gpus": borrow_gpus}
    return SlurmQos(
        name=borrow_qos_name(team.name),
        priority=0,
        # A borrowing job names no class: it may run as long as its team, its pool and every class allow.
        max_wall_minutes=any_class_max_run_minutes(team, pool, classes),
        deny_on_limit=limited,
        **cap,
    )


def _with_grace(qos: list[SlurmQos], grace: int) -> tuple[SlurmQos, ...]:
    """Slurm gives a victim the GraceTime of its own QoS: every QoS another may preempt carries the pool's grace."""
    preempted = {name for q in qos for name in q.preempts}
    return tuple(replace(q, grace_time_s=grace) if q.name in preempted else q for q in qos)


def _account(team: Any, classes: list[Any], parent: str | None) -> SlurmAccount:
    own_qos = [class_qos_name(team.name, c.name) for c in classes]
    borrow_qos = [borrow_qos_name(team.name)] if team.sharing.borrows else []
    return SlurmAccount(
        name=team.name,
        fairshare=team.fair_share_weight,
        qos=(*own_qos, *borrow_qos),
        # A job that names no class gets the least urgent one: asking is how to go first.
        default_qos=own_qos[-1],
        held=team.paused,
        gpu_minutes_limit=team.gpu_hour_limit.hours * 60 if team.gpu_hour_limit else None,
        parent=parent,
    )


def _logins(team: Any) -> tuple[str, ...]:
    return tuple(sorted({posix_user_name(arn) for arn in team.members}))


def _users(team: Any) -> list[SlurmUser]:
    limits = team.user_limits
    return [
        SlurmUser(
            name=member,
            account=team.name,
            max_jobs=limits.max_running_jobs if limits else None,
            max_gpus=limits.max_gpus if limits else None,
        )
        for member in _logins(team)
    ]


def _partitions(
    model: OrganisationView, pool: Any, teams: tuple[Any, ...], classes: list[Any], borrowers: list[Any]
) -> tuple[SlurmPartition, ...]:
    """A partition per team, then the ``borrow`` partition of every lent node where anyone borrows."""
    groups = hyperpod_instance_groups(model, pool.name)
    windows = window_instance_groups(model, pool.name)
    partitions = [_team_partition(team, groups, windows, classes) for team in teams]
    lent = [g.name for g in groups if g.owner == UNASSIGNED_OWNER or _team(teams, g.owner).sharing.lends]
    if borrowers and lent:
        partitions.append(
            SlurmPartition(
                name=BORROW_PARTITION,
                instance_groups=tuple(lent),
                allow_accounts=tuple(b.name for b in borrowers),
                allow_qos=tuple(borrow_qos_name(b.name) for b in borrowers),
            )
        )
    return tuple(partitions)


def _team_partition(
    team: Any, groups: tuple[InstanceGroup, ...], windows: dict[str, str], classes: list[Any]
) -> SlurmPartition:
    return SlurmPartition(
        name=team.name,
        # The team's quota groups, then the groups its capacity windows feed (never lent: not in `borrow`).
        instance_groups=tuple(g.name for g in groups if g.owner == team.name)
        + tuple(sorted(g for g, owner in windows.items() if owner == team.name)),
        allow_accounts=(team.name,),
        allow_qos=tuple(class_qos_name(team.name, c.name) for c in classes),
    )


def _slurm_half_life(seconds: int | None) -> str | None:
    """A half-life in whole hours as slurm.conf's "days-hours" (PriorityDecayHalfLife), or None."""
    return None if seconds is None else f"{seconds // 86_400}-{seconds % 86_400 // 3_600}"


def _group_accounts(model: OrganisationView, pool: Any, teams: tuple[Any, ...]) -> tuple[SlurmGroupAccount, ...]:
    """A parent account per group with a quota in the pool, parents first, under its nearest
    ancestor's with one, capped at the group's quota plus its borrowing limit in GPUs. Its share
    among its siblings is the weights of the teams below it together, so grouping teams moves no
    share between them and the rest."""
    tree = groups_in_pool(model.groups, pool.name)
    below: dict[str, int] = {}
    for team in teams:
        group = group_in_pool(model.groups, team.name, pool.name)
        while group is not None:
            below[group.name] = below.get(group.name, 0) + team.fair_share_weight
            group = parent_in_pool(model.groups, group, pool.name)
    accounts = []
    for group, parent in tree:
        borrowing = group.borrowing_limits.get(pool.name, {})
        ceiling = {t: count + borrowing.get(t, 0) for t, count in group.quotas[pool.name].items()}
        accounts.append(
            SlurmGroupAccount(
                name=group.name,
                fairshare=max(1, below.get(group.name, 0)),
                grp_gpus=sum(count * pool.gpus_per_instance[t] for t, count in ceiling.items()),
                parent=None if parent is None else parent.name,
            )
        )
    return tuple(accounts)


def _team(teams: tuple[Any, ...], name: str) -> Any:
    return next(t for t in teams if t.name == name)


def _borrow_gpus(team: Any, pool: Any) -> int | None:
    """GPUs a team may hold on borrowed nodes: per instance type its absolute limit
    (``borrow_accelerators``, natively GPUs as GrpTRES counts them) or else its percent, in GPUs."""
    if team.sharing.borrows_without_limit:
        return None
    absolute = borrow_instances(team, pool)
    return sum(
        (absolute[t] if t in absolute else team.sharing.borrow_ceiling(count) - count) * pool.gpus_per_instance[t]
        for t, count in instance_quota(team, pool).items()
    )
