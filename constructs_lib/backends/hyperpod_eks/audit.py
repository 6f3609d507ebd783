"""A team's access on a ``hyperpod_eks`` pool, for ``gpu-governance audit``: its access entries
and namespace RBAC, and its compute quota."""

from __future__ import annotations

from constructs_lib.organisation.access import Access, kubernetes_access

from . import kubernetes, kueue


def cluster(model, team, pool) -> list[Access]:
    """A HyperPod EKS cluster: access entries as the team's Kubernetes group, and the group's RBAC."""
    return kubernetes_access(model, team, pool, kubernetes.TENANTS)


def workload(model, team, pool) -> tuple[str, str]:
    return (
        kueue.team_group(team.name),
        f"compute quota {team.name} (cluster queue {kueue.cluster_queue(team.name)}) on EKS cluster {pool.eks_cluster_name}",
    )


def data(model, team, pool) -> list[Access]:
    return []  # the team's data is its bucket and key (organisation/audit.py): the cluster adds none
