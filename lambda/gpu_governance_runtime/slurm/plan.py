"""What the governance of one HyperPod Slurm cluster consists of, as plain values.

The mapping rule the whole plan follows: *capacity is physical, order is QoS*. A team's quota is
a set of whole nodes (its own instance groups) behind a partition only its account may use, so
quotas, reserve isolation and in-team preemption are enforced by the nodes themselves, where
Slurm's preemption works. (Slurm never preempts to satisfy an association or QoS limit, so a
quota expressed as a GrpTRES limit could not trigger reclaim.) Idle nodes of lending teams form
the shared ``borrow`` partition, used only through each team's preemptible borrow QoS, whose
GrpTRES is the team's borrow limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Partition spanning every lent node; borrowing jobs run here and nowhere else.
BORROW_PARTITION = "borrow"
# Marker in sacctmgr descriptions: objects carrying it are owned (and may be removed) by the
# apply script; anything else in the database is left alone.
MANAGED_MARKER = "gpu-governance"
BORROW_TIER = "borrow"
# Metadata of a field added after plans were deployed: left out of the plan's digest while at its
# default, so a plan that does not use it keeps the digest (and the script) it had.
SINCE_TREES = {"digest_omits_default": True}


def class_qos_name(team: str, priority_class: str) -> str:
    """QoS for a team's own-capacity jobs of one priority class."""
    return f"{team}.{priority_class}"


def borrow_qos_name(team: str) -> str:
    """QoS for a team's jobs on borrowed (lent, preemptible) capacity."""
    return f"{team}.{BORROW_TIER}"


@dataclass(frozen=True, kw_only=True)
class SlurmQos:
    """A QoS: scheduling order and who it may preempt (requeue). ``grp_gpus`` caps the GPUs all
    its running jobs hold together; None means no cap."""

    name: str
    priority: int
    preempts: tuple[str, ...] = ()
    grp_gpus: int | None = None
    # Seconds a job of this QoS runs on once chosen for preemption: Slurm sends it SIGCONT and
    # SIGTERM at once and requeues it when the grace ends (https://slurm.schedmd.com/preempt.html, GraceTime).
    grace_time_s: int = 0
    # The same cap as MaxTRESPerAccount, for a QoS one account uses (a grouped team's borrow QoS):
    # a QoS GrpTRES on gres/gpu overrides every association's gres/gpu limit, the group's too
    # (https://slurm.schedmd.com/resource_limits.html, hierarchy), a per-account one does not.
    account_gpus: int | None = None
    # Longest a job of this QoS may run (MaxWall, in minutes); None: no limit.
    max_wall_minutes: int | None = None
    # Flags=DenyOnLimit: a job no limit could ever let run (longer than MaxWall, more GPUs than a
    # member's GrpTRES) is refused at submission rather than left pending for ever.
    deny_on_limit: bool = False


@dataclass(frozen=True, kw_only=True)
class SlurmAccount:
    """An account association under the organisation account."""

    name: str
    fairshare: int
    qos: tuple[str, ...]
    default_qos: str
    held: bool = False  # a paused team: GrpJobs=0, its jobs wait and none starts
    # The team's GPU-hour limit in GPU minutes (GrpTRESMins=gres/gpu=N); None: no limit.
    gpu_minutes_limit: int | None = None
    parent: str | None = None  # its group's account; None: directly under the organisation's


@dataclass(frozen=True, kw_only=True)
class SlurmGroupAccount:
    """A group of teams and groups: an account under its parent group's (None: the organisation's),
    parent of its members' accounts. ``grp_gpus`` (GrpTRES=gres/gpu) caps the GPUs its members'
    jobs hold together: Slurm counts a child's jobs against every ancestor's Grp limits
    (https://slurm.schedmd.com/resource_limits.html), so each level of the tree holds its own cap."""

    name: str
    fairshare: int
    grp_gpus: int
    parent: str | None = field(default=None, metadata=SINCE_TREES)


@dataclass(frozen=True, kw_only=True)
class SlurmUser:
    """A user association: ``name`` may submit under ``account``."""

    name: str
    account: str
    # What the user may run at once under the account (the team's user_limits): MaxJobs and
    # GrpTRES=gres/gpu on the user association; None: no limit.
    max_jobs: int | None = None
    max_gpus: int | None = None


@dataclass(frozen=True, kw_only=True)
class SlurmPartition:
    """A partition over the nodes of HyperPod instance groups, open to some accounts and QoS."""

    name: str
    instance_groups: tuple[str, ...]
    allow_accounts: tuple[str, ...]
    allow_qos: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class PosixGroup:
    """An OS group with a fixed GID (the same on every node, as shared file systems compare
    numeric ids)."""

    name: str
    gid: int
    members: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DataPath:
    """A per-tenant directory on the shared file system, owned by root and the tenant's group."""

    path: str
    group: str
    mode: str = "2770"  # setgid: files created inside keep the tenant's group


@dataclass(frozen=True, kw_only=True)
class SlurmPlan:
    """Everything the apply script makes true on one cluster."""

    organisation: str
    qos: tuple[SlurmQos, ...]
    accounts: tuple[SlurmAccount, ...]
    users: tuple[SlurmUser, ...]
    partitions: tuple[SlurmPartition, ...]
    groups: tuple[PosixGroup, ...]
    data_paths: tuple[DataPath, ...]
    # PriorityUsageResetPeriod (DAILY, WEEKLY or MONTHLY) when an account has a GPU-minute limit:
    # the cluster then clears usage only then, never by decay. None: Slurm's decay is left alone.
    usage_reset_period: str | None = None
    # PriorityDecayHalfLife where the pool orders by decayed usage (reclaim.fair_share by usage), in
    # slurm.conf's days-hours form: Slurm's own fair share then decays usage as the controller does.
    decay_half_life: str | None = None
    group_accounts: tuple[SlurmGroupAccount, ...] = ()

    def __post_init__(self) -> None:
        qos_names = {q.name for q in self.qos}
        accounts = {a.name for a in self.accounts}
        groups = {g.name for g in self.groups}
        dangling = sorted(
            {f"qos {n}" for q in self.qos for n in q.preempts if n not in qos_names}
            | {f"qos {n}" for a in self.accounts for n in (*a.qos, a.default_qos) if n not in qos_names}
            | {f"qos {n}" for p in self.partitions for n in p.allow_qos if n not in qos_names}
            | {f"account {u.account}" for u in self.users if u.account not in accounts}
            | {
                f"account {a.parent}"
                for a in (*self.accounts, *self.group_accounts)
                if a.parent is not None and a.parent not in {g.name for g in self.group_accounts}
            }
            | {f"account {n}" for p in self.partitions for n in p.allow_accounts if n not in accounts}
            | {f"group {d.group}" for d in self.data_paths if d.group not in groups}
        )
        if dangling:
            raise ValueError(f"Slurm plan refers to undeclared objects: {', '.join(dangling)}")
