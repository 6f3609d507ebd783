"""A team's keys of the discovery document on an ``eks_kueue`` pool: its cluster, namespace and queue."""

from __future__ import annotations

from typing import Any

from constructs_lib.tenancy.kubernetes import WORKLOAD_SERVICE_ACCOUNT, workload_priority_class

from .kueue import tenants


def keys(model, team, pool, classes) -> tuple[dict[str, Any], dict[str, Any]]:
    names = tenants(pool)
    found = {
        "cluster_arn": pool.cluster_arn,
        "eks_cluster_name": pool.eks_cluster_name,
        "namespace": names.namespace(team.name),
        "local_queue": names.local_queue(team.name),
        "service_account": WORKLOAD_SERVICE_ACCOUNT,
    }
    return found, {c.name: workload_priority_class(c.name) for c in classes}
