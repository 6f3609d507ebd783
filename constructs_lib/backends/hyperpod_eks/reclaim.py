"""How the reclaim controller reaches a ``hyperpod_eks`` pool: it only observes the teams' usage,
through the cluster's Kubernetes API (Kueue reclaims natively)."""

from __future__ import annotations

from constructs_lib.controllers.reclaim import (
    ReclaimTarget,
    eks_cluster_problems as problems,
    eks_cluster_target as target,
)

__all__ = ["entry", "problems", "target"]


def entry(target: ReclaimTarget, pool) -> dict:
    return {
        "pool": target.pool,
        "eks_cluster": pool.eks_cluster_name,
        "cluster_arn": pool.cluster_arn,
        "gpus_per_instance": dict(sorted(pool.gpus_per_instance.items())),
    }
