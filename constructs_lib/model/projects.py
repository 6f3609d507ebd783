"""Projects (people collaborating, optionally in SageMaker Unified Studio; they grant nothing:
docs/unified-studio.md) and groups of teams (a capacity level above the team), and the
organisation's checks of both."""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import Field, StringConstraints, model_validator

from constructs_lib.core.errors import Problem

from .base import (
    Count,
    OrganisationView,
    PrincipalArn,
    TeamName,
    _Frozen,
    duplicates,
)
from .quota import instance_quota

# --- projects (collaboration, not security: docs/unified-studio.md) ----------------------------

# The AWS::DataZone::* CloudFormation schemas' own patterns.
DataZoneDomainId = Annotated[str, StringConstraints(pattern=r"^dzd[-_][a-zA-Z0-9_-]{1,36}$")]
DataZoneDomainUnitId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]+$", max_length=256)]
DataZoneId = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9_-]{1,36}$")]  # project, project profile
# DataZone project and domain unit names allow [\w -]; here, as every other name, ASCII without spaces.
ProjectName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=64)]
DomainUnitName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=128)]


PROJECT_OWNER, PROJECT_CONTRIBUTOR = "PROJECT_OWNER", "PROJECT_CONTRIBUTOR"
"""Unified Studio designations of a project's owner and of its members."""


class DomainUnitGrantPolicy(str, enum.Enum):
    """DataZone policies a principal may get on the project's domain unit. They act inside Unified
    Studio only (who may create projects or add members there); none of them is an IAM permission."""

    ADD_TO_PROJECT_MEMBER_POOL = "add_to_project_member_pool"
    CREATE_PROJECT = "create_project"
    OVERRIDE_PROJECT_OWNERS = "override_project_owners"


class DomainUnitGrant(_Frozen):
    policy: DomainUnitGrantPolicy
    principal: PrincipalArn = Field(description="IAM role or user ARN (a Unified Studio IAM user profile)")
    include_child_domain_units: bool = False


class NewDomainUnit(_Frozen):
    name: DomainUnitName
    parent_domain_unit_id: DataZoneDomainUnitId


class UnifiedStudio(_Frozen):
    """Where a project lives in SageMaker Unified Studio: a domain, and either an existing project
    (``project_id``) or a new one, in an existing domain unit (``domain_unit_id``), a new one
    (``domain_unit``) or the domain's root unit."""

    domain_id: DataZoneDomainId
    project_id: DataZoneId | None = Field(
        default=None, description="An existing project: memberships and connections are added to it"
    )
    domain_unit_id: DataZoneDomainUnitId | None = Field(
        default=None, description="Existing domain unit the new project is created in"
    )
    domain_unit: NewDomainUnit | None = Field(default=None, description="A domain unit to create for the new project")
    project_profile_id: DataZoneId | None = Field(default=None, description="Project profile of the new project")
    policy_grants: tuple[DomainUnitGrant, ...] = Field(
        default=(), description="DataZone policy grants on the project's domain unit"
    )

    @model_validator(mode="after")
    def _one_place(self) -> UnifiedStudio:
        if self.domain_unit_id is not None and self.domain_unit is not None:
            raise ValueError("give domain_unit_id (an existing unit) or domain_unit (a new one), not both")
        if self.project_id is not None and (self.domain_unit_id or self.domain_unit or self.project_profile_id):
            raise ValueError(
                "project_id names an existing project: domain_unit_id, domain_unit and project_profile_id apply only to a project this library creates"
            )
        if self.policy_grants and self.domain_unit_id is None and self.domain_unit is None:
            raise ValueError("policy_grants apply to the project's domain unit: give domain_unit_id or domain_unit")
        return self


class Project(_Frozen):
    """People collaborating on ML work across teams. A project gives its members no access of
    its own: they act through the team roles, as members of a team (docs/unified-studio.md)."""

    name: ProjectName
    teams: tuple[TeamName, ...] = Field(
        min_length=1, description="Teams of the project; a team belongs to at most one project"
    )
    owner: PrincipalArn = Field(description="IAM role or user ARN that owns the project")
    members: tuple[PrincipalArn, ...] = Field(
        default=(), description="IAM role or user ARNs collaborating in the project (no access of their own)"
    )
    unified_studio: UnifiedStudio | None = Field(
        default=None, description="The project's SageMaker Unified Studio domain; none is created without it"
    )

    def designations(self) -> dict[str, str]:
        """Principal ARN -> Unified Studio designation: the owner owns, every other member contributes."""
        return {**{arn: PROJECT_CONTRIBUTOR for arn in self.members}, self.owner: PROJECT_OWNER}


# --- groups of teams (a capacity level above the team) -------------------------------------


class TeamGroup(_Frozen):
    """Teams that share a capacity guarantee first among themselves, then with the rest (a Kueue
    cohort, a Slurm parent account, a Run:ai department). Not a :class:`Project`: a project is who
    collaborates (and may span departments), a group is whose capacity is pooled; a team may be in
    one of each, independently (docs/governance-file.md, Groups)."""

    name: TeamName
    teams: tuple[TeamName, ...] = Field(
        min_length=1, description="Teams of the group; a team belongs to at most one group"
    )
    quotas: dict[str, dict[str, Count]] = Field(
        default_factory=dict,
        description="Pool name -> {instance type: instances} the group is guaranteed and holds at most, its teams together; "
        "at least the sum of its teams' quotas there. A pool without one: the group's teams share there as teams outside a group",
    )


def check_projects(model: OrganisationView) -> list[Problem]:
    """Projects name declared teams, each team at most once, and a project in Unified Studio
    names every cluster it connects to."""
    problems: list[Problem] = []
    duplicates(
        [p.name.lower() for p in model.projects], "projects", problems, "project names must differ (ignoring case)"
    )
    teams, owner = {t.name for t in model.teams}, {}
    for index, project in enumerate(model.projects):
        for t, team in enumerate(project.teams):
            path = f"projects[{index}].teams[{t}]"
            if team not in teams:
                problems.append(
                    Problem(path=path, wrong="undeclared team", value=team, allowed=f"one of {sorted(teams)}")
                )
            elif owner.setdefault(team, project.name) != project.name:
                problems.append(
                    Problem(
                        path=path,
                        wrong=f"already in project {owner[team]}",
                        value=team,
                        allowed="a team of no other project",
                    )
                )
        if project.unified_studio is None:
            continue
        for pool in model.hyperpod_pools_of(project):
            if pool.cluster_name is None:  # only hyperpod_eks pools may lack it
                pool_index = model.pools.index(pool)
                problems.append(
                    Problem(
                        path=f"projects[{index}].unified_studio",
                        wrong=f"the project connects to pool {pool.name}, whose HyperPod cluster name is not declared",
                        value=pool.cluster_arn,
                        allowed=f"pools[{pool_index}].cluster_name set to the cluster's name",
                    )
                )
    return problems


def check_groups(model: OrganisationView) -> list[Problem]:
    """Groups name declared teams, each team at most once, under a name no team has (on Slurm both
    become accounts of one tree); a group quota covers its teams' quotas (it is what they share, so
    it cannot promise less than each of them is promised) and, with every team outside a group,
    fits the pool: a guarantee the pool cannot hold is refused, not silently weakened."""
    problems: list[Problem] = []
    duplicates([g.name.lower() for g in model.groups], "groups", problems, "group names must differ (ignoring case)")
    teams = {t.name: t for t in model.teams}
    team_names = {name.lower() for name in teams}
    pools = {p.name: p for p in model.pools}
    owner: dict[str, str] = {}
    for index, group in enumerate(model.groups):
        path = f"groups[{index}]"
        if group.name.lower() in team_names:
            problems.append(
                Problem(
                    path=f"{path}.name",
                    wrong="also a team's name",
                    value=group.name,
                    allowed="a name no team has (ignoring case)",
                )
            )
        for t, team in enumerate(group.teams):
            if team not in teams:
                problems.append(
                    Problem(
                        path=f"{path}.teams[{t}]",
                        wrong="undeclared team",
                        value=team,
                        allowed=f"one of {sorted(teams)}",
                    )
                )
            elif owner.setdefault(team, group.name) != group.name:
                problems.append(
                    Problem(
                        path=f"{path}.teams[{t}]",
                        wrong=f"already in group {owner[team]}",
                        value=team,
                        allowed="a team of no other group",
                    )
                )
        problems += _group_quota_problems(model, group, path, pools)
    return problems or _group_capacity_problems(model)


def _group_quota_problems(model: OrganisationView, group: Any, path: str, pools: dict[str, Any]) -> list[Problem]:
    """A group's quota names declared pools and types and covers its teams' quotas there."""
    problems: list[Problem] = []
    for pool_name, quota in group.quotas.items():
        qpath = f"{path}.quotas.{pool_name}"
        if pool_name not in pools:
            problems.append(
                Problem(path=qpath, wrong="undeclared pool", value=pool_name, allowed=f"one of {sorted(pools)}")
            )
            continue
        for instance_type, count in quota.items():
            if instance_type not in pools[pool_name].capacity:
                problems.append(
                    Problem(
                        path=f"{qpath}.{instance_type}",
                        wrong="pool has no capacity of this instance type",
                        value=instance_type,
                        allowed=f"one of {sorted(pools[pool_name].capacity)}",
                    )
                )
                continue
            members = model.members_quota(group, pool_name).get(instance_type, 0)
            if count < members:
                problems.append(
                    Problem(
                        path=f"{qpath}.{instance_type}",
                        wrong=f"less than its teams' quotas together ({members})",
                        value=count,
                        allowed=f"at least {members}, or smaller team quotas",
                    )
                )
        for instance_type, members in model.members_quota(group, pool_name).items():
            if instance_type not in quota:
                problems.append(
                    Problem(
                        path=qpath,
                        wrong=f"no quota of {instance_type}, which its teams hold ({members})",
                        value=sorted(quota),
                        allowed=f"a quota for every instance type its teams have in pool {pool_name}",
                    )
                )
    return problems


def _group_capacity_problems(model: OrganisationView) -> list[Problem]:
    """Groups and the teams outside them fit each pool they are guaranteed in."""
    problems: list[Problem] = []
    for pool_index, pool in enumerate(model.pools):
        for instance_type, capacity in pool.capacity.items():
            bounded = [g for g in model.groups if pool.name in g.quotas]
            if not bounded:
                continue  # the team quotas alone, which check_pool_teams checks
            grouped = sum(g.quotas[pool.name].get(instance_type, 0) for g in bounded)
            inside = {name for g in bounded for name in g.teams}
            alone = sum(
                instance_quota(t, pool).get(instance_type, 0)
                for t in model.teams
                if t.name not in inside and pool.name in t.quotas
            )
            if grouped + alone > capacity:
                problems.append(
                    Problem(
                        path=f"pools[{pool_index}].capacity.{instance_type}",
                        wrong=f"groups and teams outside groups are guaranteed {grouped + alone} instances but the pool has fewer",
                        value=capacity,
                        allowed=f"at least {grouped + alone}, or smaller group quotas",
                    )
                )
    return problems
