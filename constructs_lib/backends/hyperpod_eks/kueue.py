"""The names HyperPod task governance gives a team's Kueue objects on a ``hyperpod_eks`` cluster:
namespace ``hyperpod-ns-<team>``, queues ``hyperpod-ns-<team>-localqueue`` / ``-clusterqueue``
from the team's compute quota, and the HyperPod CLI's group
``hyperpod-ns-<team>-namespace-level-group``. `gpu-governance trace from-kueue` reads a
Workload's team from them."""

from __future__ import annotations

from gpu_governance_runtime.contract import (
    HYPERPOD_CLUSTER_QUEUE_SUFFIX,
    HYPERPOD_NAMESPACE_PREFIX,
    hyperpod_cluster_queue,
)

TENANT_NAMESPACE_PREFIX = HYPERPOD_NAMESPACE_PREFIX
"""HyperPod task governance makes one namespace per team with this prefix."""
LOCAL_QUEUE_SUFFIX = "-localqueue"


def namespace(team: str) -> str:
    return f"{TENANT_NAMESPACE_PREFIX}{team}"


def team_group(team: str) -> str:
    return f"{namespace(team)}-namespace-level-group"


def cluster_queue(team: str) -> str:
    return hyperpod_cluster_queue(team)


def cluster_queue_team(name: str) -> str:
    """The team whose cluster queue ``name`` is (the inverse of :func:`cluster_queue`)."""
    return name.removeprefix(TENANT_NAMESPACE_PREFIX).removesuffix(HYPERPOD_CLUSTER_QUEUE_SUFFIX)


def team_named(name: str) -> str | None:
    """The team whose namespace or cluster queue ``name`` is; None when it is neither."""
    team = cluster_queue_team(name)
    return team if team and name in (namespace(team), cluster_queue(team)) else None


def local_queue(team: str) -> str:
    """The Kueue local queue task governance makes in the team's namespace (jobs name it)."""
    return f"{namespace(team)}{LOCAL_QUEUE_SUFFIX}"


def workload_priority_class(priority_class: str) -> str:
    """Task governance names the Kueue WorkloadPriorityClass of each of its classes so."""
    return f"{priority_class}-priority"
