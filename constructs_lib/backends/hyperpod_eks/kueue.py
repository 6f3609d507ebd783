"""The names HyperPod task governance gives a team's Kueue objects on a ``hyperpod_eks`` cluster:
namespace ``hyperpod-ns-<team>``, queues ``hyperpod-ns-<team>-localqueue`` / ``-clusterqueue``
from the team's compute quota, and the HyperPod CLI's group
``hyperpod-ns-<team>-namespace-level-group`` (``kubernetes.TENANTS``). `gpu-governance trace
from-kueue` reads a Workload's team from them."""

from __future__ import annotations

from constructs_lib.tenancy.kubernetes import LOCAL_QUEUE_SUFFIX, workload_priority_class  # noqa: F401

from .kubernetes import TENANTS

TENANT_NAMESPACE_PREFIX = TENANTS.namespace_prefix
"""HyperPod task governance makes one namespace per team with this prefix."""
namespace = TENANTS.namespace
team_group = TENANTS.team_group
cluster_queue = TENANTS.cluster_queue
cluster_queue_team = TENANTS.cluster_queue_team
team_named = TENANTS.team_named
local_queue = TENANTS.local_queue
