"""What ``validate`` refuses on a ``hyperpod_slurm`` pool: what Slurm and the OS would refuse of
the plan (names, group ids, instance groups, windows' groups), one check per rule."""

from __future__ import annotations

import re
from typing import Any

from constructs_lib.core.errors import Problem
from constructs_lib.model.base import HYPERPOD_TEAM_NAME, SAGEMAKER_NAME_PATTERN, OrganisationView
from gpu_governance_runtime.slurm import BORROW_PARTITION
from gpu_governance_runtime.slurm.plan import BORROW_TIER

from .layout import (
    GROUP_PREFIX,
    UNASSIGNED_OWNER,
    InstanceGroup,
    feeds_pool,
    hyperpod_instance_groups,
    posix_user_name,
    slurm_pool,
)

POSIX_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # always fullmatch: `$` would accept a trailing newline
INSTANCE_GROUP_NAME = re.compile(SAGEMAKER_NAME_PATTERN)
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


def problems(model, pool) -> list[Problem]:
    return slurm_problems(model, pool.name)


def slurm_problems(model: OrganisationView, pool_name: str) -> list[Problem]:
    """What Slurm and the OS would refuse about one ``hyperpod_slurm`` pool (the organisation
    check runs this too, so `gpu-governance validate` finds it before a synth does)."""
    pool = slurm_pool(model, pool_name)
    teams = model.teams_in(pool.name)
    groups = hyperpod_instance_groups(model, pool_name)
    team_index = {t.name: i for i, t in enumerate(model.teams)}
    owners = _reserved_account_names(model)
    return [
        *_gpus_per_instance_problems(model, pool),
        *_reserved_class_problems(model),
        *_root_account_problems(model),
        *_reset_period_problems(pool, teams, team_index),
        *_usage_decay_problems(model, pool, teams),
        *_group_name_problems(model, pool, owners),
        *_team_problems(teams, team_index, owners),
        *_window_problems(model, pool, teams, groups),
        *_instance_group_name_problems(model, pool, groups, team_index),
    ]


def _pool_path(model: OrganisationView, pool: Any) -> str:
    return f"pools[{model.pools.index(pool)}]"


def _reserved_account_names(model: OrganisationView) -> set[str]:
    """Names no team or group may take on Slurm: every team is an account beside the others (and a
    partition), under its group's or the organisation's account under root."""
    return {UNASSIGNED_OWNER, BORROW_PARTITION, SLURM_ROOT_ACCOUNT, model.organisation}


def _gpus_per_instance_problems(model: OrganisationView, pool: Any) -> list[Problem]:
    return [
        Problem(
            path=f"{_pool_path(model, pool)}.gpus_per_instance.{instance_type}",
            wrong="missing",
            value=None,
            allowed="the GPUs of one instance (1-64): Slurm quotas are in GPUs",
        )
        for instance_type in sorted(pool.capacity)
        if instance_type not in pool.gpus_per_instance
    ]


def _reserved_class_problems(model: OrganisationView) -> list[Problem]:
    return [
        Problem(
            path=f"priority_classes[{index}].name",
            wrong="reserved on Slurm for the borrowing tier",
            value=priority_class.name,
            allowed="any other name",
        )
        for index, priority_class in enumerate(model.priority_classes)
        if priority_class.name == BORROW_TIER
    ]


def _root_account_problems(model: OrganisationView) -> list[Problem]:
    if model.organisation != SLURM_ROOT_ACCOUNT:
        return []
    return [
        Problem(
            path="organisation",
            wrong="Slurm's root account",
            value=model.organisation,
            allowed=f"any name but {SLURM_ROOT_ACCOUNT!r} on Slurm",
        )
    ]


def _reset_period_problems(pool: Any, teams: tuple[Any, ...], team_index: dict[str, int]) -> list[Problem]:
    """The cluster resets usage once for all accounts: every GPU-hour limit of the pool shares one period."""
    limited = [t for t in teams if t.gpu_hour_limit]
    first = limited[0] if limited else None
    return [
        Problem(
            path=f"teams[{team_index[team.name]}].gpu_hour_limit.period",
            wrong=f"differs from team {first.name}'s on Slurm pool {pool.name}: the cluster resets usage once for all accounts (PriorityUsageResetPeriod)",
            value=team.gpu_hour_limit.period.value,
            allowed=f"{first.gpu_hour_limit.period.value}, as every GPU-hour limit on pool {pool.name}",
        )
        for team in limited[1:]
        if team.gpu_hour_limit.period is not first.gpu_hour_limit.period
    ]


def _usage_decay_problems(model: OrganisationView, pool: Any, teams: tuple[Any, ...]) -> list[Problem]:
    limited = [t for t in teams if t.gpu_hour_limit]
    if not limited or pool.reclaim.fair_share.by != "usage":
        return []
    return [
        Problem(
            path=f"{_pool_path(model, pool)}.reclaim.fair_share.by",
            wrong=f"usage decays on Slurm pool {pool.name}, where team {limited[0].name}'s GPU-hour limit needs "
            "usage kept until its period ends (PriorityDecayHalfLife=0; the cluster has one setting for all accounts)",
            value="usage",
            allowed="borrowed, or no gpu_hour_limit on the pool's teams",
        )
    ]


def _group_name_problems(model: OrganisationView, pool: Any, owners: set[str]) -> list[Problem]:
    problems = []
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
    return problems


def _team_problems(teams: tuple[Any, ...], team_index: dict[str, int], owners: set[str]) -> list[Problem]:
    """Each team's name, declared group id and members, team by team."""
    problems: list[Problem] = []
    declared: dict[int, str] = {}
    users: dict[str, str] = {}
    for team in teams:
        path = f"teams[{team_index[team.name]}]"
        problems += _team_name_problems(team, path, owners)
        problems += _declared_gid_problems(team, path, declared)
        for member_index, arn in enumerate(team.members):
            problem = _member_problem(arn, f"{path}.members[{member_index}]", users)
            problems += [problem] if problem else []
    return problems


def _team_name_problems(team: Any, path: str, owners: set[str]) -> list[Problem]:
    problems = []
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
    return problems


def _declared_gid_problems(team: Any, path: str, declared: dict[int, str]) -> list[Problem]:
    """A declared group id no earlier team declared (``declared``: id -> the first team, updated)."""
    problems = []
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
    return problems


def _member_problem(arn: str, path: str, users: dict[str, str]) -> Problem | None:
    """What is wrong with the cluster login a member's ARN gives (``users``: login -> the first
    ARN giving it, updated), or None."""
    name = posix_user_name(arn)
    if {"", ".", ".."} & set(arn.split(":", 5)[-1].split("/")[1:]):
        return Problem(
            path=path,
            wrong="has an empty, '.' or '..' path segment, so its name reads as another path's",
            value=arn,
            allowed="a role or user ARN whose path segments are plain names",
        )
    if name in RESERVED_USERS or name.startswith(RESERVED_USER_PREFIXES):
        return Problem(
            path=path,
            wrong=f"gives cluster user {name!r}, a system or privileged account",
            value=arn,
            allowed="a principal whose name is no system account (docs/slurm.md lists them)",
        )
    if not POSIX_NAME.fullmatch(name):
        return Problem(
            path=path,
            wrong=f"gives cluster user {name!r}, not a POSIX name",
            value=arn,
            allowed="a role or user name of at most 32 of a-z, 0-9, '_', '-', not starting with a digit or '-'",
        )
    if users.setdefault(name, arn) != arn:
        return Problem(
            path=path,
            wrong=f"gives cluster user {name!r}, as does {users[name]}",
            value=arn,
            allowed="principals whose names differ",
        )
    return None


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
        if not feeds_pool(window, pool.name):
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


def _instance_group_name_problems(
    model: OrganisationView, pool: Any, groups: tuple[InstanceGroup, ...], team_index: dict[str, int]
) -> list[Problem]:
    pool_path = _pool_path(model, pool)
    return [
        Problem(
            path=f"teams[{team_index[group.owner]}].quotas" if group.owner in team_index else f"{pool_path}.capacity",
            wrong="gives a HyperPod instance group name over 63 characters",
            value=group.name,
            allowed="a shorter team name or instance type",
        )
        for group in groups
        if not INSTANCE_GROUP_NAME.fullmatch(group.name)
    ]


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
