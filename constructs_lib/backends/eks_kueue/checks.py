"""What ``validate`` refuses on an ``eks_kueue`` pool: names Kubernetes and Kueue would refuse, an
instance type whose node Kueue cannot count, settings that hold only on HyperPod, and two pools on
one cluster (their cluster-wide objects would overwrite each other's), and Karpenter windows of one pool
that its one EC2NodeClass and NodePool cannot hold."""

from __future__ import annotations

from typing import Any

from constructs_lib.backends import backend_of
from constructs_lib.core.errors import Problem
from constructs_lib.model import KubernetesTenancy
from constructs_lib.model.base import HYPERPOD_TEAM_NAME
from gpu_governance_runtime.contract import CONSUMER_KARPENTER_NODE_POOL

DNS_LABEL = "a lowercase DNS label: a-z, 0-9 and '-', at most 40"
_PER_INSTANCE = ("gpus_per_instance", "vcpus_per_instance", "memory_gib_per_instance")


def problems(model, pool) -> list[Problem]:
    index = model.pools.index(pool)
    path = f"pools[{index}]"
    found: list[Problem] = []
    if not HYPERPOD_TEAM_NAME.fullmatch(pool.name):
        found.append(Problem(path=f"{path}.name", wrong="not a Kueue Cohort name", value=pool.name, allowed=DNS_LABEL))
    for field in _PER_INSTANCE:
        for instance_type in sorted(set(pool.capacity) - set(getattr(pool, field))):
            found.append(
                Problem(
                    path=f"{path}.{field}",
                    wrong=f"no figure for {instance_type}, whose nodes the pool's ClusterQueues count",
                    value=sorted(getattr(pool, field)),
                    allowed=f"an entry for every instance type of the pool's capacity: {sorted(pool.capacity)}",
                )
            )
    for other_index, other in enumerate(model.pools):
        if (
            other is not pool
            and backend_of(other).eks_access_entries
            and getattr(other, "eks_cluster_name", None) == pool.eks_cluster_name
            and other_index < index
        ):
            found.append(
                Problem(
                    path=f"{path}.cluster_arn",
                    wrong=f"EKS cluster {pool.eks_cluster_name} is already pool {other.name}'s",
                    value=pool.cluster_arn,
                    allowed="a cluster of no other pool (one pool's cohorts, flavors and admission policies per cluster)",
                )
            )
    for team_index, team in enumerate(model.teams):
        if pool.name not in team.quotas:
            continue
        if not HYPERPOD_TEAM_NAME.fullmatch(team.name):
            found.append(
                Problem(
                    path=f"teams[{team_index}].name",
                    wrong=f"not a Kubernetes namespace's name, which the team has on pool {pool.name}",
                    value=team.name,
                    allowed=DNS_LABEL,
                )
            )
        other = next(
            (p for p in model.pools if p is not pool and p.name in team.quotas and backend_of(p).team_pod_role),
            None,
        )
        if other is not None:
            # One pod role per team (<team>-gpu-pods, tenancy/eks.py): two clusters would make it twice.
            found.append(
                Problem(
                    path=f"teams[{team_index}].quotas.{pool.name}",
                    wrong=f"the team has a pod role on pool {other.name} already ({team.name}-gpu-pods), and one per team",
                    value=sorted(team.quotas),
                    allowed="a quota in one pool on EKS per team (HyperPod EKS or EKS with Kueue)",
                )
            )
        groups = team.kubernetes.get(pool.name, KubernetesTenancy()).dedicated_instance_groups
        if groups:
            found.append(
                Problem(
                    path=f"teams[{team_index}].kubernetes.{pool.name}.dedicated_instance_groups",
                    wrong="instance groups are HyperPod's: an eks_kueue pool has none",
                    value=list(groups),
                    allowed="none (dedicate a node group with its own taint and a Kueue ResourceFlavor instead)",
                )
            )
    for group_index, group in enumerate(model.groups):
        if pool.name in group.quotas and not HYPERPOD_TEAM_NAME.fullmatch(group.name):
            found.append(
                Problem(
                    path=f"groups[{group_index}].name",
                    wrong=f"not a Kueue Cohort name, which the group has on pool {pool.name}",
                    value=group.name,
                    allowed=DNS_LABEL,
                )
            )
    return found + _karpenter_problems(model, pool)


def karpenter_windows(model, pool) -> list[tuple[int, Any]]:
    """(index, window) of each window feeding ``pool`` through Karpenter (karpenter.py makes their NodePool)."""
    return [
        (index, w)
        for index, w in enumerate(model.capacity_windows)
        if w.feeds.kind == CONSUMER_KARPENTER_NODE_POOL and w.feeds.pool == pool.name
    ]


def _karpenter_problems(model, pool) -> list[Problem]:
    """What one EC2NodeClass and NodePool per pool cannot do: windows that disagree on the node
    class or the fallback, or a window whose zones are not said (a block bought in a zone none of
    the nodes' subnets is in would be paid and idle: the controller cannot read Karpenter's subnets)."""
    found = []
    windows = karpenter_windows(model, pool)
    for index, window in windows:
        path = f"capacity_windows[{index}]"
        if not window.availability_zones:
            found.append(
                Problem(
                    path=f"{path}.availability_zones",
                    wrong="a window fed through Karpenter must name its zones",
                    value=[],
                    allowed="the zones of the subnets the EC2NodeClass selects (its discovery_tags)",
                )
            )
        first_index, first = windows[0]
        if window.feeds != first.feeds:
            found.append(
                Problem(
                    path=f"{path}.feeds",
                    wrong=f"pool {pool.name} has one Karpenter EC2NodeClass, which window {first.name} declares otherwise",
                    value=window.feeds.model_dump(exclude={"kind"}),
                    allowed=f"the same node_role, ami_alias and discovery_tags as capacity_windows[{first_index}]",
                )
            )
        if window.fallback != first.fallback:
            found.append(
                Problem(
                    path=f"{path}.fallback",
                    wrong=f"pool {pool.name} has one Karpenter NodePool, which window {first.name} falls back otherwise",
                    value=window.fallback,
                    allowed=f"{first.fallback}, as capacity_windows[{first_index}]",
                )
            )
    return found
