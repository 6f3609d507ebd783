"""A team's access on an ``eks_kueue`` pool, for ``gpu-governance audit``: its access entries and
namespace RBAC, and its ClusterQueue."""

from __future__ import annotations

from constructs_lib.organisation.access import Access, kubernetes_access

from .kueue import cohort_of, tenants


def cluster(model, team, pool) -> list[Access]:
    """Access entries as the team's Kubernetes group, and the group's RBAC."""
    return kubernetes_access(model, team, pool, tenants(pool))


def workload(model, team, pool) -> tuple[str, str]:
    names = tenants(pool)
    return (
        names.team_group(team.name),
        f"Kueue ClusterQueue {names.cluster_queue(team.name)} in cohort {cohort_of(pool, team, model.groups)} "
        f"on EKS cluster {pool.eks_cluster_name}",
    )


def data(model, team, pool) -> list[Access]:
    return []  # the team's data is its bucket and key (organisation/audit.py): the cluster adds none
