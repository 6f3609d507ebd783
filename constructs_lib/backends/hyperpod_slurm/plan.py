"""The governance model of one ``hyperpod_slurm`` pool as a Slurm plan (see docs/slurm.md).

Capacity is physical, order is QoS: each team's quota becomes its own HyperPod instance groups
behind a partition only its account may use; lending teams' nodes (and unassigned capacity)
also form the ``borrow`` partition, reachable only through preemptible borrow QoS. A capacity
window feeding an instance group of the pool adds that group to its owner's partition only: what
the window's training plan brings is the owner's alone, never lent.
"""

from __future__ import annotations

import re
import weakref
import zlib
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.model.base import HYPERPOD_TEAM_NAME, SAGEMAKER_NAME_PATTERN, OrganisationView
from constructs_lib.model.projects import group_in_pool, groups_in_pool, parent_in_pool
from constructs_lib.model.quota import borrow_instances, instance_quota
from constructs_lib.model.run_limits import any_class_max_run_minutes, max_run_limited, max_run_minutes
from gpu_governance_runtime.contract import CONSUMER_HYPERPOD_INSTANCE_GROUP
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
from gpu_governance_runtime.slurm.plan import BORROW_TIER

from . import BACKEND

POSIX_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # always fullmatch: `$` would accept a trailing newline
INSTANCE_GROUP_NAME = re.compile(SAGEMAKER_NAME_PATTERN)
GROUP_PREFIX = "gg-"
# Team groups get GIDs from a hash of the organisation and team name (unless declared), so every
# node (and every re-generation) computes the same id without shared state; the range avoids
# system and typical LDAP/AD ranges.
GID_BASE, GID_SPAN = 600_000, 400_000
UNASSIGNED_OWNER = "shared"
# Slurm's own account, the parent of the organisation's account.
SLURM_ROOT_ACCOUNT = "root"
# Cluster logins a member may never map to: accounts of the HyperPod AMIs (Ubuntu base, the
# ubuntu login, SSM, Slurm, munge, MariaDB, NFS/Lustre, container and time services), and names
# that grant privilege by convention (admin, sudo, wheel, adm, docker, lxd). Names starting with
# "_" or "systemd-" are Debian's and systemd's system accounts and are refused by prefix.
RESERVED_USERS = frozenset(
    {
        "root",
        "daemon",
        "bin",
        "sys",
        "sync",
        "games",
        "man",
        "lp",
        "mail",
        "news",
        "uucp",
        "proxy",
        "www-data",
        "backup",
        "list",
        "irc",
        "gnats",
        "nobody",
        "nogroup",
        "messagebus",
        "syslog",
        "uuidd",
        "tcpdump",
        "tss",
        "sshd",
        "landscape",
        "pollinate",
        "lxd",
        "usbmux",
        "dnsmasq",
        "fwupd-refresh",
        "chrony",
        "polkitd",
        "rpc",
        "rpcuser",
        "statd",
        "ubuntu",
        "ec2-user",
        "ssm-user",
        "admin",
        "adm",
        "sudo",
        "wheel",
        "docker",
        "shadow",
        "disk",
        "kmem",
        "slurm",
        "slurmdbd",
        "munge",
        "mysql",
        "mariadb",
        "enroot",
        "nvidia-persistenced",
        "lustre",
        "ntp",
        "postfix",
        "operator",
        "halt",
        "shutdown",
        "ftp",
    }
)
RESERVED_USER_PREFIXES = ("_", "systemd-")
DEFAULT_DATA_ROOT = "/fsx/teams"
DATA_ROOT_PATTERN = re.compile(r"(/[A-Za-z0-9._-]{1,255}){1,32}/?")  # NAME_MAX per segment
# The apply script runs as root and creates <data root>/<team> writable by the team: never inside
# system trees, nor directly in a directory whose children are system or user paths (a team
# named mysql under /var/lib, or ubuntu under /home).
SYSTEM_DIRECTORIES = (
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/dev",
    "/proc",
    "/sys",
    "/root",
    "/run",
    "/snap",
    "/var/run",
    "/var/lock",
    "/var/spool",
    "/var/log",
    "/var/mail",
    "/var/cache",
    "/var/backups",
    "/var/lib/slurm",
    "/var/lib/slurm-llnl",
    "/var/lib/slurmd",
    "/var/lib/munge",
    "/var/lib/mysql",
    "/var/lib/dpkg",
    "/var/lib/apt",
    "/var/lib/systemd",
    "/var/lib/amazon",
    "/opt/ml",
    "/opt/slurm",
    "/opt/aws",
    "/opt/gpu-governance",
)
SHARED_PARENTS = ("/var", "/var/lib", "/var/tmp", "/tmp", "/opt", "/home", "/mnt", "/media", "/srv")


@dataclass(frozen=True, kw_only=True)
class InstanceGroup:
    """A HyperPod instance group the cluster needs: one per team and instance type, plus the
    unassigned remainder of each instance type."""

    name: str
    instance_type: str
    count: int
    owner: str  # team name, or "shared" for unassigned capacity


def instance_group_name(owner: str, instance_type: str) -> str:
    return f"{owner}-{instance_type.removeprefix('ml.').replace('.', '-')}"


def posix_user_name(principal_arn: str) -> str:
    """Cluster login of an IAM principal: the last segment of its name, lower-cased, with
    characters a POSIX name cannot hold replaced by '-'. (On HyperPod the principal reaches the
    head node through SSM with tag ``SSMSessionRunAs`` set to this name.)"""
    return re.sub(r"[^a-z0-9_-]", "-", principal_arn.rsplit("/", 1)[-1].lower())


def team_gid(organisation: str, team: str) -> int:
    """The id a team's group is hashed to (its home); :func:`team_gids` gives the id it gets."""
    return GID_BASE + zlib.crc32(f"{organisation}/{team}".encode()) % GID_SPAN


def team_gids(model: OrganisationView) -> dict[str, int]:
    """Every team's OS group id, the same on every Slurm pool, never two alike (except two
    declared alike, which :func:`slurm_problems` refuses).

    Declared ``slurm_gid`` values are placed first, then every team whose hashed id no other team
    shares and no declaration takes, then the rest in name order, each moving on to the next free
    id of the range (linear probing). So adding a team changes another team's id only when the
    newcomer's hashed or declared id is exactly the id that team had (about 1 in 400 with 1,000
    teams): declare ``slurm_gid`` to rule that out (docs/slurm.md)."""
    gids = {t.name: t.slurm_gid for t in model.teams if t.slurm_gid is not None}
    taken = set(gids.values())
    homes = {t.name: team_gid(model.organisation, t.name) for t in model.teams if t.name not in gids}
    shared = {gid for gid, count in Counter(homes.values()).items() if count > 1}
    for name, home in homes.items():
        if home not in shared and home not in taken:
            gids[name] = home
            taken.add(home)
    for name in sorted(set(homes) - set(gids)):
        gid = homes[name]
        while gid in taken:
            gid = GID_BASE + (gid - GID_BASE + 1) % GID_SPAN
        gids[name] = gid
        taken.add(gid)
    return gids


def hyperpod_instance_groups(model: OrganisationView, pool_name: str) -> tuple[InstanceGroup, ...]:
    """The instance groups a HyperPod cluster for this pool must have, in a stable order."""
    pool = _slurm_pool(model, pool_name)
    groups = []
    for team in model.teams_in(pool.name):
        for instance_type, count in sorted(instance_quota(team, pool).items()):
            groups.append(
                InstanceGroup(
                    name=instance_group_name(team.name, instance_type),
                    instance_type=instance_type,
                    count=count,
                    owner=team.name,
                )
            )
    for instance_type, capacity in sorted(pool.capacity.items()):
        assigned = sum(instance_quota(t, pool).get(instance_type, 0) for t in model.teams_in(pool.name))
        if capacity > assigned:
            groups.append(
                InstanceGroup(
                    name=instance_group_name(UNASSIGNED_OWNER, instance_type),
                    instance_type=instance_type,
                    count=capacity - assigned,
                    owner=UNASSIGNED_OWNER,
                )
            )
    return tuple(groups)


def window_instance_groups(model: OrganisationView, pool_name: str) -> dict[str, str]:
    """Instance group -> owning team, for every capacity window feeding a group of this pool."""
    return {w.feeds.instance_group: w.team for w in model.capacity_windows if _feeds(w, pool_name)}


# A GPU-hour limit's period as slurm.conf PriorityUsageResetPeriod: cleared at midnight, at the
# start of the week and on the first of the month (https://slurm.schedmd.com/slurm.conf.html).
# One setting per cluster, so every limited team of a pool shares one period.
SLURM_RESET_PERIOD = {"day": "DAILY", "week": "WEEKLY", "month": "MONTHLY"}


def _feeds(window, pool_name: str) -> bool:
    return window.feeds.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP and window.feeds.pool == pool_name


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
    pool = _slurm_pool(model, pool_name)
    teams = model.teams_in(pool.name)
    groups = hyperpod_instance_groups(model, pool_name)
    window_groups = window_instance_groups(model, pool_name)

    classes = sorted(model.priority_classes, key=lambda c: (-c.weight, c.name))
    borrowers = [t for t in teams if t.sharing.borrows]
    lent_groups = [g.name for g in groups if g.owner == UNASSIGNED_OWNER or _team(teams, g.owner).sharing.lends]
    qos, accounts, users, partitions, posix_groups, data_paths = [], [], [], [], [], []
    gids = team_gids(model)
    group_accounts = _group_accounts(model, pool, teams)
    group_of = {t.name: g.name for t in teams if (g := group_in_pool(model.groups, t.name, pool.name)) is not None}
    for team in teams:
        own_qos = [class_qos_name(team.name, c.name) for c in classes]
        # Refuse at submission what no limit would ever let run: wall time, a member's GPUs (tests/slurm/test_limits_real_slurm.py).
        limited = team.user_limits is not None or max_run_limited(model, team, pool)
        for index, priority_class in enumerate(classes):
            # Borrowers only ever run on lent nodes, so only a lender's jobs need to reclaim.
            preempts = [borrow_qos_name(b.name) for b in borrowers] if team.sharing.lends else []
            if team.sharing.in_share_preemption:
                preempts += [
                    class_qos_name(team.name, c.name) for c in classes[index + 1 :] if c.weight < priority_class.weight
                ]
            qos.append(
                SlurmQos(
                    name=own_qos[index],
                    priority=priority_class.weight,
                    preempts=tuple(preempts),
                    max_wall_minutes=max_run_minutes(team, pool, priority_class),
                    deny_on_limit=limited,
                )
            )
        account_qos = list(own_qos)
        if team.sharing.borrows:
            borrow_gpus = _borrow_gpus(team, pool)
            # A borrowing job names no class: it may run as long as its team, its pool and every class allow.
            borrow_wall = any_class_max_run_minutes(team, pool, classes)
            # A grouped team's cap per account: the group's GrpTRES must still count these jobs (SlurmQos.account_gpus).
            cap = {"account_gpus": borrow_gpus} if team.name in group_of else {"grp_gpus": borrow_gpus}
            qos.append(
                SlurmQos(
                    name=borrow_qos_name(team.name),
                    priority=0,
                    max_wall_minutes=borrow_wall,
                    deny_on_limit=limited,
                    **cap,
                )
            )
            account_qos.append(borrow_qos_name(team.name))
        # A job that names no class gets the least urgent one: asking is how to go first.
        accounts.append(
            SlurmAccount(
                name=team.name,
                fairshare=team.fair_share_weight,
                qos=tuple(account_qos),
                default_qos=own_qos[-1],
                held=team.paused,
                gpu_minutes_limit=team.gpu_hour_limit.hours * 60 if team.gpu_hour_limit else None,
                parent=group_of.get(team.name),
            )
        )
        members = tuple(sorted({posix_user_name(arn) for arn in team.members}))
        limits = team.user_limits
        users += [
            SlurmUser(
                name=member,
                account=team.name,
                max_jobs=limits.max_running_jobs if limits else None,
                max_gpus=limits.max_gpus if limits else None,
            )
            for member in members
        ]
        partitions.append(
            SlurmPartition(
                name=team.name,
                # The team's quota groups, then the groups its capacity windows feed (never lent: not in `borrow`).
                instance_groups=tuple(g.name for g in groups if g.owner == team.name)
                + tuple(sorted(g for g, owner in window_groups.items() if owner == team.name)),
                allow_accounts=(team.name,),
                allow_qos=tuple(own_qos),
            )
        )
        group_name = GROUP_PREFIX + team.name
        posix_groups.append(PosixGroup(name=group_name, gid=gids[team.name], members=members))
        data_paths.append(DataPath(path=f"{data_root}/{team.name}", group=group_name))
    if borrowers and lent_groups:
        partitions.append(
            SlurmPartition(
                name=BORROW_PARTITION,
                instance_groups=tuple(lent_groups),
                allow_accounts=tuple(b.name for b in borrowers),
                allow_qos=tuple(borrow_qos_name(b.name) for b in borrowers),
            )
        )
    # Slurm gives a victim the GraceTime of its own QoS: every QoS another may preempt carries the pool's grace.
    preempted = {name for q in qos for name in q.preempts}
    grace = pool.reclaim.grace_seconds
    qos = [replace(q, grace_time_s=grace) if q.name in preempted else q for q in qos]
    return SlurmPlan(
        organisation=model.organisation,
        qos=tuple(qos),
        accounts=tuple(accounts),
        users=tuple(users),
        partitions=tuple(partitions),
        groups=tuple(posix_groups),
        data_paths=tuple(data_paths),
        usage_reset_period=next(
            (SLURM_RESET_PERIOD[t.gpu_hour_limit.period.value] for t in teams if t.gpu_hour_limit), None
        ),
        decay_half_life=_slurm_half_life(pool.reclaim.fair_share.half_life_seconds),
        group_accounts=group_accounts,
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


def data_root_problems(data_root: str) -> list[Problem]:
    """Why ``data_root`` is no place for team-writable directories; empty when it is one.
    Nothing is normalised silently: a path that would normalise elsewhere is refused."""
    allowed = "an absolute directory on shared storage, e.g. /fsx/teams"
    if not DATA_ROOT_PATTERN.fullmatch(data_root) or {".", ".."} & set(data_root.split("/")):
        return [
            Problem(
                path="data_root",
                wrong="not a plain absolute path",
                value=data_root,
                allowed=f"{allowed}: up to 32 '/'-separated names of 1-255 of A-Z, a-z, 0-9, '.', '_', '-', none of them '.' or '..'",
            )
        ]
    root = data_root.rstrip("/")
    system = next((d for d in SYSTEM_DIRECTORIES if root == d or root.startswith(d + "/")), None)
    if system or root in SHARED_PARENTS:
        return [
            Problem(
                path="data_root",
                wrong=f"a system directory ({system or root})",
                value=data_root,
                allowed=f"{allowed}, outside {', '.join(SYSTEM_DIRECTORIES[:4])}... and not one of {', '.join(SHARED_PARENTS)} itself",
            )
        ]
    return []


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


def _slurm_pool(model: OrganisationView, pool_name: str) -> Any:
    pools = {p.name: p for p in model.pools}
    pool = pools.get(pool_name)
    if pool is None or pool.backend != BACKEND.name:
        slurm_pools = sorted(p.name for p in model.pools if p.backend == BACKEND.name)
        raise GovernanceError.single(
            "pools", f"no {BACKEND.name} pool of this name", pool_name, f"one of {slurm_pools}"
        )
    return pool


def slurm_problems(model: OrganisationView, pool_name: str) -> list[Problem]:
    """What Slurm and the OS would refuse about one ``hyperpod_slurm`` pool (the organisation
    check runs this too, so `gpu-governance validate` finds it before a synth does)."""
    pool = _slurm_pool(model, pool_name)
    teams = model.teams_in(pool.name)
    groups = hyperpod_instance_groups(model, pool_name)
    problems: list[Problem] = []
    pool_path = f"pools[{model.pools.index(pool)}]"
    for instance_type in sorted(pool.capacity):
        if instance_type not in pool.gpus_per_instance:
            problems.append(
                Problem(
                    path=f"{pool_path}.gpus_per_instance.{instance_type}",
                    wrong="missing",
                    value=None,
                    allowed="the GPUs of one instance (1-64): Slurm quotas are in GPUs",
                )
            )
    for index, priority_class in enumerate(model.priority_classes):
        if priority_class.name == BORROW_TIER:
            problems.append(
                Problem(
                    path=f"priority_classes[{index}].name",
                    wrong="reserved on Slurm for the borrowing tier",
                    value=priority_class.name,
                    allowed="any other name",
                )
            )
    if model.organisation == SLURM_ROOT_ACCOUNT:
        problems.append(
            Problem(
                path="organisation",
                wrong="Slurm's root account",
                value=model.organisation,
                allowed=f"any name but {SLURM_ROOT_ACCOUNT!r} on Slurm",
            )
        )
    team_index = {t.name: i for i, t in enumerate(model.teams)}
    limited = [t for t in teams if t.gpu_hour_limit]
    for team in limited[1:]:
        first = limited[0]
        if team.gpu_hour_limit.period is not first.gpu_hour_limit.period:
            problems.append(
                Problem(
                    path=f"teams[{team_index[team.name]}].gpu_hour_limit.period",
                    wrong=f"differs from team {first.name}'s on Slurm pool {pool.name}: the cluster resets usage once for all accounts (PriorityUsageResetPeriod)",
                    value=team.gpu_hour_limit.period.value,
                    allowed=f"{first.gpu_hour_limit.period.value}, as every GPU-hour limit on pool {pool.name}",
                )
            )
    if limited and pool.reclaim.fair_share.by == "usage":
        problems.append(
            Problem(
                path=f"{pool_path}.reclaim.fair_share.by",
                wrong=f"usage decays on Slurm pool {pool.name}, where team {limited[0].name}'s GPU-hour limit needs "
                "usage kept until its period ends (PriorityDecayHalfLife=0; the cluster has one setting for all accounts)",
                value="usage",
                allowed="borrowed, or no gpu_hour_limit on the pool's teams",
            )
        )
    # Every team is an account beside the others, under its group's or the organisation's account under root.
    owners = {UNASSIGNED_OWNER, BORROW_PARTITION, SLURM_ROOT_ACCOUNT, model.organisation}
    for index, group in enumerate(model.groups):
        if pool.name in group.quotas and group.name in owners:
            problems.append(
                Problem(
                    path=f"groups[{index}].name",
                    wrong="reserved on Slurm",
                    value=group.name,
                    allowed=f"any name but {sorted(owners)}",
                )
            )
        elif pool.name in group.quotas and not HYPERPOD_TEAM_NAME.fullmatch(group.name):
            # Slurm stores account names in lower case: Vision would be applied as vision and never compare equal again.
            problems.append(
                Problem(
                    path=f"groups[{index}].name",
                    wrong=f"not a Slurm account name for pool {pool.name}",
                    value=group.name,
                    allowed="a lowercase DNS label: a-z, 0-9 and '-', as HyperPod team names",
                )
            )
    declared: dict[int, str] = {}
    users: dict[str, str] = {}
    for team in teams:
        path = f"teams[{team_index[team.name]}]"
        if team.name in owners:
            problems.append(
                Problem(
                    path=f"{path}.name",
                    wrong="reserved on Slurm",
                    value=team.name,
                    allowed=f"any name but {sorted(owners)}",
                )
            )
        if len(GROUP_PREFIX + team.name) > 32:
            problems.append(
                Problem(
                    path=f"{path}.name",
                    wrong="too long for its OS group gg-<team>",
                    value=team.name,
                    allowed=f"at most {32 - len(GROUP_PREFIX)} characters on Slurm",
                )
            )
        if team.slurm_gid in declared:
            problems.append(
                Problem(
                    path=f"{path}.slurm_gid",
                    wrong=f"also declared by team {declared[team.slurm_gid]}",
                    value=team.slurm_gid,
                    allowed="an id no other team declares (or none: one is allocated)",
                )
            )
        if team.slurm_gid is not None:
            declared.setdefault(team.slurm_gid, team.name)
        for member_index, arn in enumerate(team.members):
            name = posix_user_name(arn)
            member_path = f"{path}.members[{member_index}]"
            if {"", ".", ".."} & set(arn.split(":", 5)[-1].split("/")[1:]):
                problems.append(
                    Problem(
                        path=member_path,
                        wrong="has an empty, '.' or '..' path segment, so its name reads as another path's",
                        value=arn,
                        allowed="a role or user ARN whose path segments are plain names",
                    )
                )
            elif name in RESERVED_USERS or name.startswith(RESERVED_USER_PREFIXES):
                problems.append(
                    Problem(
                        path=member_path,
                        wrong=f"gives cluster user {name!r}, a system or privileged account",
                        value=arn,
                        allowed="a principal whose name is no system account (docs/slurm.md lists them)",
                    )
                )
            elif not POSIX_NAME.fullmatch(name):
                problems.append(
                    Problem(
                        path=member_path,
                        wrong=f"gives cluster user {name!r}, not a POSIX name",
                        value=arn,
                        allowed="a role or user name of at most 32 of a-z, 0-9, '_', '-', not starting with a digit or '-'",
                    )
                )
            elif users.setdefault(name, arn) != arn:
                problems.append(
                    Problem(
                        path=member_path,
                        wrong=f"gives cluster user {name!r}, as does {users[name]}",
                        value=arn,
                        allowed="principals whose names differ",
                    )
                )
    problems += _window_problems(model, pool, teams, groups)
    for group in groups:
        if not INSTANCE_GROUP_NAME.fullmatch(group.name):
            path = f"teams[{team_index[group.owner]}].quotas" if group.owner in team_index else f"{pool_path}.capacity"
            problems.append(
                Problem(
                    path=path,
                    wrong="gives a HyperPod instance group name over 63 characters",
                    value=group.name,
                    allowed="a shorter team name or instance type",
                )
            )
    return problems


def _window_problems(
    model: OrganisationView, pool: Any, teams: tuple[Any, ...], groups: tuple[InstanceGroup, ...]
) -> list[Problem]:
    """A window's instance group joins its owner's partition and is drained before each plan
    ends: it must be a group of its own, and the owner must have a partition in the pool."""
    problems: list[Problem] = []
    generated = {g.name: g.owner for g in groups}
    members = sorted(t.name for t in teams)
    fed: dict[str, str] = {}
    declared = {t.name for t in model.teams}
    for index, window in enumerate(model.capacity_windows):
        if not _feeds(window, pool.name):
            continue
        path, group = f"capacity_windows[{index}]", window.feeds.instance_group
        if group in generated:
            owner = generated[group]
            whose = (
                "the pool's unassigned (lent) capacity"
                if owner == UNASSIGNED_OWNER
                else "the team's own quota, whose nodes the window's end would drain"
                if owner == window.team
                else f"team {owner}'s quota"
            )
            problems.append(
                Problem(
                    path=f"{path}.feeds.instance_group",
                    wrong=f"a group the pool generates for {whose}",
                    value=group,
                    allowed=f"a group of the window's own, none of {sorted(generated)}",
                )
            )
        if window.team in declared and window.team not in members:
            problems.append(
                Problem(
                    path=f"{path}.team",
                    wrong=f"has no quota in Slurm pool {pool.name}, so no partition for the window's nodes",
                    value=window.team,
                    allowed=f"one of {members}",
                )
            )
        other = fed.setdefault(group, window.team)
        if other != window.team:
            problems.append(
                Problem(
                    path=f"{path}.feeds.instance_group",
                    wrong=f"also fed by a window of team {other}: its nodes would be in two teams' partitions",
                    value=group,
                    allowed=f"a group only team {window.team}'s windows feed",
                )
            )
    return problems
