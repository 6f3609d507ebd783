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

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from constructs_lib.backends import backend_of
from constructs_lib.model import (
    GovernanceModel,
    Team,
    account_of,
    project_role,
    submission_policy_name,
    team_key_alias,
)
from constructs_lib.model.explain import deal, group_place
from constructs_lib.organisation.access import Access, team_roles

LAYERS = ("organisation", "project", "cluster", "workload", "data")
PLATFORM = "(platform)"
"""The ``team`` of what holds across teams: admins and guardrails."""


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
    return _per_pool(model, team, "cluster")


def _per_pool(model: GovernanceModel, team: Team, layer: str) -> list[Access]:
    """The rows of ``layer`` (cluster or data) each of the team's pools' backends lists (its ``audit`` module)."""
    return [
        row
        for pool in (model.pool(name) for name in team.quotas)
        for row in getattr(_of(pool), layer)(model, team, pool)
    ]


def _of(pool):
    """The ``audit`` module of ``pool``'s backend."""
    return backend_of(pool).part("audit")


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
        who, where = _of(pool).workload(model, team, pool)
        rows.append(Access(team=team.name, layer="workload", who=who, can=f"submit: {share}", on=where))
    return rows


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
    return rows + _per_pool(model, team, "data")


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
