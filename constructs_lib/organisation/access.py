"""One row of ``gpu-governance audit`` (who can do what, on what, at which governance layer) and
the roles the library creates for a team: what ``organisation/audit.py`` and each backend's
``audit`` module build the review from."""

from __future__ import annotations

from dataclasses import dataclass

from constructs_lib.backends import backend_of
from constructs_lib.model import (
    POD_ROLE_SUFFIX,
    SUBMISSION_ROLE_SUFFIX,
    TRAINING_ROLE_SUFFIX,
    GovernanceModel,
    Team,
    account_of,
    aws_partition,
    members_in_account,
    team_role_arn,
)


@dataclass(frozen=True, kw_only=True)
class Access:
    team: str
    layer: str
    who: str  # an IAM principal ARN, a Kubernetes group, a Slurm user or a named set of them
    can: str
    on: str


def team_roles(model: GovernanceModel, team: Team) -> dict[str, str]:
    """The roles the library creates for ``team``: kind -> ARN (the pod role only on HyperPod EKS)."""
    account = model.capacity_account
    roles = {"submission": SUBMISSION_ROLE_SUFFIX, "training": TRAINING_ROLE_SUFFIX}
    if any(backend_of(model.pool(p)).team_pod_role for p in team.quotas):
        roles["pods"] = POD_ROLE_SUFFIX
    return {
        kind: team_role_arn(account.account_id, team.name, suffix, aws_partition(account.region))
        for kind, suffix in roles.items()
    }


def kubernetes_access(model: GovernanceModel, team: Team, pool, tenants) -> list[Access]:
    """A team's access to a pool's EKS cluster: its access entries as its Kubernetes group (its
    submission role and its members in the cluster's account), and the group's RBAC, as
    ``tenants`` (``tenancy.kubernetes.Tenants``) makes it."""
    group, namespace = tenants.team_group(team.name), tenants.namespace(team.name)
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
    for manifest in tenants.rbac(team.name):
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
