"""A team's access on a ``hyperpod_slurm`` pool, for ``gpu-governance audit``: its Slurm users,
account and QoS, partitions and paths on the shared file system."""

from __future__ import annotations

from constructs_lib.organisation.access import Access

from .layout import GROUP_PREFIX
from .plan import slurm_plan


def cluster(model, team, pool) -> list[Access]:
    """A HyperPod Slurm cluster: the team's users run jobs as its account, in its partitions."""
    plan = slurm_plan(model, pool.name)
    account = next(a for a in plan.accounts if a.name == team.name)
    partitions = [p.name for p in plan.partitions if team.name in p.allow_accounts]
    return [
        Access(
            team=team.name,
            layer="cluster",
            who=f"Slurm user {user.name}",
            can=f"run jobs as Slurm account {account.name} with QoS {', '.join(account.qos)} (default {account.default_qos})",
            on=f"partitions {', '.join(partitions)} of Slurm cluster {pool.cluster_name}",
        )
        for user in (u for u in plan.users if u.account == team.name)
    ]


def workload(model, team, pool) -> tuple[str, str]:
    return f"Slurm account {team.name}", f"partition {team.name} of Slurm cluster {pool.cluster_name}"


def data(model, team, pool) -> list[Access]:
    """A HyperPod Slurm cluster: the team's POSIX group's paths on the shared file system."""
    return [
        Access(
            team=team.name,
            layer="data",
            who=f"POSIX group {path.group}",
            can=f"read and write (mode {path.mode})",
            on=f"{path.path} on Slurm cluster {pool.cluster_name}",
        )
        for path in slurm_plan(model, pool.name).data_paths
        if path.group == GROUP_PREFIX + team.name
    ]
