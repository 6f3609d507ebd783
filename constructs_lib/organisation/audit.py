"""Who can do what, per team and per governance layer, computed from the model alone (no
synthesis, no AWS call): the access review a platform team runs before and after a change.

Layers: organisation (accounts, roles, guardrails), project (Unified Studio memberships, which
grant no access), cluster (EKS access entries and namespace RBAC, Slurm accounts and QoS),
workload (queues, shares, quotas, priority) and data (keys, buckets, shared file system paths).
Every name comes from the definitions the constructs use (role suffixes and key alias in
``model``, namespaces and RBAC in ``kubernetes``, the Slurm plan in ``slurm.mapping``), and
``tests/projects`` checks the result against synthesized templates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from constructs_lib.backends import backend_of
from constructs_lib.backends.base import call
from constructs_lib.hyperpod_eks import kubernetes
from constructs_lib.model import (
    POD_ROLE_SUFFIX,
    SUBMISSION_ROLE_SUFFIX,
    TRAINING_ROLE_SUFFIX,
    GovernanceModel,
    Team,
    account_of,
    aws_partition,
    members_in_account,
    project_role,
    submission_policy_name,
    team_key_alias,
    team_role_arn,
)
from constructs_lib.model.explain import deal, group_place
from constructs_lib.model.slurm import GROUP_PREFIX, slurm_plan

LAYERS = ("organisation", "project", "cluster", "workload", "data")
PLATFORM = "(platform)"
"""The ``team`` of what holds across teams: admins and guardrails."""


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


def audit(model: GovernanceModel, now: datetime | None = None) -> list[Access]:
    """Every row; ``now`` (default: the clock) says which capacity windows have ended."""
    rows = _platform(model) + _windows(model, now or datetime.now(UTC))
    for team in model.teams:
        rows += (
            _organisation(model, team)
            + _project(model, team)
            + _cluster(model, team)
            + _workload(model, team)
            + _data(model, team)
        )
    return rows


# Who buys a window's capacity, per mode (docs/capacity.md).
_BUYERS = {
    "dry_run": "nobody: the capacity controller only records what it would buy (mode dry_run)",
    "approval": "the capacity controller, after a platform admin's `gpu-governance capacity approve`",
    "auto": "the capacity controller, on its own",
}


def _windows(model: GovernanceModel, now: datetime) -> list[Access]:
    """Capacity windows: who spends the money, on what, for which team."""
    return [
        Access(
            team=PLATFORM,
            layer="organisation",
            who=_BUYERS[window.mode],
            can=f"buy {window.summary(now)}",
            on=f"capacity window {window.name}, capacity account {model.capacity_account.account_id}",
        )
        for window in model.capacity_windows
    ]


def _platform(model: GovernanceModel) -> list[Access]:
    rows = [
        Access(
            team=PLATFORM,
            layer="organisation",
            who=admin,
            can="operate every team key (never use it), administer every HyperPod EKS cluster",
            on=f"capacity account {model.capacity_account.account_id}",
        )
        for admin in model.platform_admins
    ]
    if model.guardrails is not None:
        exempt = ", ".join((*model.platform_admins, *model.guardrails.exempt_principals))
        rows.append(
            Access(
                team=PLATFORM,
                layer="organisation",
                who=f"everyone except {exempt}, the capacity controller (buying) and the CDK deployment role (quotas)",
                can="nothing: buying GPU capacity and changing quotas, queues or compute quotas is denied (service control policy)",
                on=", ".join(model.guardrails.target_ids),
            )
        )
    return rows


def _organisation(model: GovernanceModel, team: Team) -> list[Access]:
    consumer = model.consumer_accounts[team.account]
    submission = team_roles(model, team)["submission"]
    rows = []
    for member in team.members:
        where = (
            f"consumer account {team.account} ({consumer.account_id})"
            if account_of(member) == consumer.account_id
            else f"account {account_of(member)}"
        )
        rows.append(
            Access(
                team=team.name,
                layer="organisation",
                who=member,
                can=f"assume the team's submission role, from {where}",
                on=submission,
            )
        )
        if project_role(
            member
        ):  # what listing it really grants: every row of this team, to every person of the project
            rows.append(
                Access(
                    team=team.name,
                    layer="organisation",
                    who=f"everyone who acts as {member}: {_project_people(model, member)}",
                    can=f"everything {member} can below, as a member of team {team.name}: its submission role, access entries, "
                    "key, bucket, secrets and jobs (a Unified Studio project role; docs/unified-studio.md gives the safe pattern)",
                    on=f"team {team.name}",
                )
            )
    for permission_set in team.permission_sets:
        name = permission_set.account or team.account
        account = model.consumer_accounts[name]
        rows.append(
            Access(
                team=team.name,
                layer="organisation",
                who=f"IAM Identity Center users of permission set {permission_set.name} in consumer account {name} ({account.account_id})",
                can=f"assume the team's submission role once the permission set holds the policy {submission_policy_name(model.organisation, team.name)}",
                on=submission,
            )
        )
    return rows


def _project_people(model: GovernanceModel, role: str) -> str:
    """Who acts as a Unified Studio project role: the people of the project that lists it, when the file declares it."""
    projects = [p for p in model.projects if role in p.designations()]
    if not projects:
        return "every member of its Unified Studio project (owners, contributors, readers; not declared in this file)"
    return "; ".join(
        f"every member of project {p.name} (teams {', '.join(p.teams)}): "
        + ", ".join(sorted(arn for arn in p.designations() if arn != role))
        for p in projects
    )


def _project(model: GovernanceModel, team: Team) -> list[Access]:
    project = model.project_of(team.name)
    if project is None:
        return []
    studio = project.unified_studio
    where = f"project {project.name}"
    if studio is not None:
        where += f" (Unified Studio domain {studio.domain_id}" + (
            f", project {studio.project_id})" if studio.project_id else ")"
        )
    rows = [
        Access(
            team=team.name,
            layer="project",
            who=arn,
            can=f"{designation}: collaborate; no IAM, cluster, key or bucket access of its own",
            on=where,
        )
        for arn, designation in project.designations().items()
    ]
    if studio is not None:
        rows += [
            Access(
                team=team.name,
                layer="project",
                who="project members",
                can="see the connection; act on it only through a team role",
                on=f"HyperPod cluster {pool.cluster_name}",
            )
            for pool in model.hyperpod_pools_of(project)
        ]
        unit = studio.domain_unit_id or (studio.domain_unit.name if studio.domain_unit else None)
        rows += [
            Access(
                team=team.name,
                layer="project",
                who=grant.principal,
                can=f"{grant.policy.value} (Unified Studio only)",
                on=f"domain unit {unit}",
            )
            for grant in studio.policy_grants
        ]
    return rows


def _cluster(model: GovernanceModel, team: Team) -> list[Access]:
    return _per_pool(model, team, "audit_cluster")


def _per_pool(model: GovernanceModel, team: Team, field: str) -> list[Access]:
    """The rows each of the team's pools' backends lists through the function its descriptor's ``field`` names."""
    rows = []
    for pool in (model.pool(name) for name in team.quotas):
        if reference := getattr(backend_of(pool), field):
            rows += call(reference, model, team, pool)
    return rows


def eks_cluster_access(model: GovernanceModel, team: Team, pool) -> list[Access]:
    """A HyperPod EKS cluster: access entries as the team's Kubernetes group, and the group's RBAC."""
    group, namespace = kubernetes.team_group(team.name), kubernetes.namespace(team.name)
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


def slurm_cluster_access(model: GovernanceModel, team: Team, pool) -> list[Access]:
    """A HyperPod Slurm cluster: the team's users run jobs as its account, in its partitions."""
    plan = slurm_plan(model, pool.name)
    account = next(a for a in plan.accounts if a.name == team.name)
    partitions = [p.name for p in plan.partitions if team.name in p.allow_accounts]
    return [
        Access(
            team=team.name,
            layer="cluster",
            who=f"Slurm user {user.name}",
            can=f"run jobs as Slurm account {account.name} with QoS {', '.join(account.qos)} (default {account.default_qos})",
            on=f"partitions {', '.join(partitions)} of Slurm cluster {pool.cluster_name}",
        )
        for user in (u for u in plan.users if u.account == team.name)
    ]


def _workload(model: GovernanceModel, team: Team) -> list[Access]:
    rows = []
    priorities = ", ".join(f"{c.name} ({c.weight})" for c in model.priority_classes)
    for pool in (model.pool(name) for name in team.quotas):
        terms = deal(team, pool)
        share = f"guaranteed {terms.guaranteed}, at most {terms.max_with_borrowing}; idle lent: {terms.lends_idle}; priority classes {priorities}"
        if team.gpu_hour_limit:
            share += f"; GPU-hour limit {terms.gpu_hour_limit}"
        place = group_place(model, team, pool.name)
        if place != "-":
            share += f"; in group {place}"
        if team.paused:
            share = f"nothing new while the team is paused ({share})"
        who, where = call(backend_of(pool).audit_workload, model, team, pool)
        rows.append(Access(team=team.name, layer="workload", who=who, can=f"submit: {share}", on=where))
    return rows


def quota_share_place(model: GovernanceModel, team: Team, pool) -> tuple[str, str]:
    return team_roles(model, team)["submission"], f"quota share {team.name} of Batch job queue {pool.name}"


def fair_share_place(model: GovernanceModel, team: Team, pool) -> tuple[str, str]:
    return team_roles(model, team)["submission"], f"share identifier {team.name} of Batch job queue {pool.name}"


def eks_place(model: GovernanceModel, team: Team, pool) -> tuple[str, str]:
    return (
        kubernetes.team_group(team.name),
        f"compute quota {team.name} (cluster queue {kubernetes.cluster_queue(team.name)}) on EKS cluster {pool.eks_cluster_name}",
    )


def slurm_place(model: GovernanceModel, team: Team, pool) -> tuple[str, str]:
    return f"Slurm account {team.name}", f"partition {team.name} of Slurm cluster {pool.cluster_name}"


def _data(model: GovernanceModel, team: Team) -> list[Access]:
    alias = team_key_alias(model.organisation, team.name)
    rows = [
        Access(
            team=team.name,
            layer="data",
            who=role,
            can=f"use key {alias}; read and write the team bucket (encrypted with it)",
            on=f"capacity account {model.capacity_account.account_id}",
        )
        for role in team_roles(model, team).values()
    ]
    return rows + _per_pool(model, team, "audit_data")


def slurm_data_access(model: GovernanceModel, team: Team, pool) -> list[Access]:
    """A HyperPod Slurm cluster: the team's POSIX group's paths on the shared file system."""
    return [
        Access(
            team=team.name,
            layer="data",
            who=f"POSIX group {path.group}",
            can=f"read and write (mode {path.mode})",
            on=f"{path.path} on Slurm cluster {pool.cluster_name}",
        )
        for path in slurm_plan(model, pool.name).data_paths
        if path.group == GROUP_PREFIX + team.name
    ]


def as_json(rows: list[Access]) -> dict[str, Any]:
    by_team: dict[str, dict[str, list[dict[str, str]]]] = {}
    for row in rows:
        entry = {k: v for k, v in asdict(row).items() if k not in ("team", "layer")}
        by_team.setdefault(row.team, {layer: [] for layer in LAYERS})[row.layer].append(entry)
    return {"layers": list(LAYERS), "teams": by_team}


def render(rows: list[Access]) -> str:
    lines: list[str] = []
    for team in dict.fromkeys(row.team for row in rows):
        lines.append(f"{'platform' if team == PLATFORM else 'team ' + team}")
        for layer in LAYERS:
            for row in (r for r in rows if r.team == team and r.layer == layer):
                lines.append(f"  {layer:<12}  {row.who}\n                can {row.can}\n                on  {row.on}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
