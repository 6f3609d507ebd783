"""Amazon EKS with Kueue (no HyperPod): Kueue reclaims natively; the reclaim controller reads the
teams' usage from the cluster's ClusterQueues, as on HyperPod EKS (backends/kueue_usage.py), and
holds a team's ClusterQueue at its GPU-hour limit (gpu_hours.py).

The names of the teams' objects are declared here, where both sides read them: the library's
``constructs_lib.backends.eks_kueue`` makes the namespaces, groups and ClusterQueues, and the
usage observer finds each team's ClusterQueue by the same name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...contract import EKS_KUEUE
from ..base import Backend, GpuHourLimits, ReclaimClients, Target, kueue_observer, kueue_rows

if TYPE_CHECKING:
    from .gpu_hours import ClusterQueueSwitch

NAMESPACE_PREFIX = "gpu-team-"  # each team's namespace: gpu-team-<team>
GROUP_SUFFIX = "-members"  # the Kubernetes group its access entries name: gpu-team-<team>-members
CLUSTER_QUEUE_SUFFIX = "-clusterqueue"


def cluster_queue(team: str) -> str:
    """The team's ClusterQueue: ``gpu-team-<team>-clusterqueue``."""
    return f"{NAMESPACE_PREFIX}{team}{CLUSTER_QUEUE_SUFFIX}"


def _switch(clients: ReclaimClients, target: Target, team: str) -> ClusterQueueSwitch:
    from .gpu_hours import ClusterQueueSwitch, connect

    return ClusterQueueSwitch(connect(clients.eks, target["eks_cluster"]), cluster_queue(team))


BACKEND = Backend(
    name=EKS_KUEUE,
    # Kueue preempts borrowers itself when a lender's workload needs its nominal quota back
    # (ClusterQueue preemption.reclaimWithinCohort, constructs_lib/backends/eks_kueue/kueue.py).
    observe_usage=kueue_observer(cluster_queue),
    why_no_adapter="EKS with Kueue reclaims natively (Kueue)",
    # Kueue has no consumption limit: the reclaim controller sets the team's ClusterQueue's stopPolicy to Hold at it.
    gpu_hour_limits=GpuHourLimits(
        switch=_switch,
        in_use=kueue_rows,
        pool_gpus=lambda target: target["gpus_per_instance"],
    ),
)
