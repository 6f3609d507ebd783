"""Amazon EKS with Kueue (no HyperPod): Kueue reclaims natively; the reclaim controller only reads
the teams' usage from the cluster's ClusterQueues, as on HyperPod EKS (backends/kueue_usage.py).

The names of the teams' objects are declared here, where both sides read them: the library's
``constructs_lib.backends.eks_kueue`` makes the namespaces, groups and ClusterQueues, and the
usage observer finds each team's ClusterQueue by the same name."""

from __future__ import annotations

from ...contract import EKS_KUEUE
from ..base import Backend, kueue_observer

NAMESPACE_PREFIX = "gpu-team-"  # each team's namespace: gpu-team-<team>
GROUP_SUFFIX = "-members"  # the Kubernetes group its access entries name: gpu-team-<team>-members
CLUSTER_QUEUE_SUFFIX = "-clusterqueue"


def cluster_queue(team: str) -> str:
    """The team's ClusterQueue: ``gpu-team-<team>-clusterqueue``."""
    return f"{NAMESPACE_PREFIX}{team}{CLUSTER_QUEUE_SUFFIX}"


BACKEND = Backend(
    name=EKS_KUEUE,
    # Kueue preempts borrowers itself when a lender's workload needs its nominal quota back
    # (ClusterQueue preemption.reclaimWithinCohort, constructs_lib/backends/eks_kueue/kueue.py).
    observe_usage=kueue_observer(cluster_queue),
    why_no_adapter="EKS with Kueue reclaims natively (Kueue)",
)
