"""How the reclaim controller reaches an ``eks_kueue`` pool: it only observes the teams' usage,
through the cluster's ClusterQueues (Kueue reclaims natively)."""

from __future__ import annotations

from constructs_lib.controllers.reclaim import (
    ReclaimTarget,
    eks_cluster_problems as problems,
    eks_cluster_target as target,
)

__all__ = ["entry", "problems", "target"]


def entry(target: ReclaimTarget, pool) -> dict:
    """The handler's RECLAIM_TARGETS entry (backends/kueue_usage.py reads the cluster's ClusterQueues)."""
    return {
        "pool": target.pool,
        "eks_cluster": pool.eks_cluster_name,
        "gpus_per_instance": dict(sorted(pool.gpus_per_instance.items())),
    }
