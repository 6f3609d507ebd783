"""A team's keys of the discovery document on a ``hyperpod_eks`` pool: its namespace and queue."""

from __future__ import annotations

from typing import Any

from . import kubernetes, kueue


def keys(model, team, pool, classes) -> tuple[dict[str, Any], dict[str, Any]]:
    found = {
        "cluster_arn": pool.cluster_arn,
        "eks_cluster_name": pool.eks_cluster_name,
        "namespace": kueue.namespace(team.name),
        "local_queue": kueue.local_queue(team.name),
        "service_account": kubernetes.WORKLOAD_SERVICE_ACCOUNT,
    }
    return found, {c.name: kueue.workload_priority_class(c.name) for c in classes}
