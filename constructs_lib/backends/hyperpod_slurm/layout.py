"""What a ``hyperpod_slurm`` pool's teams are on its HyperPod cluster: the instance groups of each
team's quota (and of the unassigned remainder), the cluster login of each member, the OS group of
each team and its id. The plan (plan.py) is built from these, and the checks (checks.py) refuse
what the cluster or the OS would refuse of them."""

from __future__ import annotations

import re
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model.base import OrganisationView
from constructs_lib.model.quota import instance_quota
from gpu_governance_runtime.contract import CONSUMER_HYPERPOD_INSTANCE_GROUP

from . import BACKEND

GROUP_PREFIX = "gg-"
# Team groups get GIDs from a hash of the organisation and team name (unless declared), so every
# node (and every re-generation) computes the same id without shared state; the range avoids
# system and typical LDAP/AD ranges.
GID_BASE, GID_SPAN = 600_000, 400_000
UNASSIGNED_OWNER = "shared"


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
    declared alike, which checks.py refuses).

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
    pool = slurm_pool(model, pool_name)
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
    return {w.feeds.instance_group: w.team for w in model.capacity_windows if feeds_pool(w, pool_name)}


def feeds_pool(window: Any, pool_name: str) -> bool:
    """Whether a capacity window feeds an instance group of this pool."""
    return window.feeds.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP and window.feeds.pool == pool_name


def slurm_pool(model: OrganisationView, pool_name: str) -> Any:
    """The ``hyperpod_slurm`` pool of this name; any other name raises one GovernanceError."""
    pools = {p.name: p for p in model.pools}
    pool = pools.get(pool_name)
    if pool is None or pool.backend != BACKEND.name:
        slurm_pools = sorted(p.name for p in model.pools if p.backend == BACKEND.name)
        raise GovernanceError.single(
            "pools", f"no {BACKEND.name} pool of this name", pool_name, f"one of {slurm_pools}"
        )
    return pool
