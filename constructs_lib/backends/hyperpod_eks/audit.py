"""A team's access on a ``hyperpod_eks`` pool, for ``gpu-governance audit``: its access entries
and namespace RBAC, and its compute quota."""

from __future__ import annotations

from constructs_lib.model import account_of, members_in_account
from constructs_lib.organisation.access import Access, team_roles

from . import kubernetes, kueue


def cluster(model, team, pool) -> list[Access]:
    """A HyperPod EKS cluster: access entries as the team's Kubernetes group, and the group's RBAC."""
    group, namespace = kueue.team_group(team.name), kueue.namespace(team.name)
    principals = [team_roles(model, team)["submission"], *members_in_account(team, account_of(pool.cluster_arn))]
    rows = [
        Access(
            team=team.name,
            layer="cluster",
            who=p,
            can=f"reach the cluster's Kubernetes API (an EKS access entry) as group {group}",
            on=f"EKS cluster {pool.eks_cluster_name}",
        )
        for p in principals
    ]
    for manifest in kubernetes.rbac(team.name):
        if manifest["kind"] not in ("Role", "ClusterRole"):
            continue
        scope = f"namespace {namespace}" if manifest["kind"] == "Role" else "cluster"
        for rule in manifest["rules"]:
            what = ", ".join(f"{g}/{r}" if g else r for g in rule["apiGroups"] for r in rule["resources"])
            names = f" named {', '.join(rule['resourceNames'])}" if "resourceNames" in rule else ""
            rows.append(
                Access(
                    team=team.name,
                    layer="cluster",
                    who=group,
                    can=f"{' '.join(rule['verbs'])} {what}{names}",
                    on=f"{scope} of EKS cluster {pool.eks_cluster_name}",
                )
            )
    return rows


def workload(model, team, pool) -> tuple[str, str]:
    return (
        kueue.team_group(team.name),
        f"compute quota {team.name} (cluster queue {kueue.cluster_queue(team.name)}) on EKS cluster {pool.eks_cluster_name}",
    )


def data(model, team, pool) -> list[Access]:
    return []  # the team's data is its bucket and key (organisation/audit.py): the cluster adds none
