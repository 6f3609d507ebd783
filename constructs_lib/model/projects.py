"""Projects (people collaborating, optionally in SageMaker Unified Studio; they grant nothing:
docs/unified-studio.md) and groups of teams (a capacity level above the team), and the
organisation's checks of both."""

from __future__ import annotations

import enum
from collections.abc import Sequence
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

Instances = Annotated[int, Field(ge=0, le=100_000)]
"""A group's borrowing or lending limit: whole instances, 0 allowed (borrows / lends nothing)."""


class TeamGroup(_Frozen):
    """Teams, and child groups, that share a capacity guarantee first among themselves, then with
    the rest (a Kueue cohort, a Slurm parent account, a Run:ai department), to any depth through
    ``parent``. Not a :class:`Project`: a project is who collaborates (and may span departments), a
    group is whose capacity is pooled; a team may be in one of each, independently
    (docs/governance-file.md, Groups)."""

    name: TeamName
    teams: tuple[TeamName, ...] = Field(
        default=(), description="Teams of the group; a team belongs to at most one group. Empty for a group of groups"
    )
    parent: TeamName | None = Field(
        default=None, description="The group this group is a child of (any depth; none: a top-level group)"
    )
    quotas: dict[str, dict[str, Count]] = Field(
        default_factory=dict,
        description="Pool name -> {instance type: instances} the group's members (its teams and its child groups') are "
        "guaranteed together; at least what its teams and child groups hold there. A pool without one: the group's "
        "members share there as members of its parent (or as teams outside a group)",
    )
    borrowing_limits: dict[str, dict[str, Instances]] = Field(
        default_factory=dict,
        description="Pool name -> {instance type: instances} its members together may hold beyond the group's quota, "
        "borrowed from outside the group. A pool or type without one: 0, the quota is the group's ceiling there",
    )
    lending_limits: dict[str, dict[str, Instances]] = Field(
        default_factory=dict,
        description="Pool name -> {instance type: instances} of the group's quota members outside it may borrow at "
        "most while the group leaves it idle. A pool or type without one: all of its idle quota",
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


def parent_in_pool(groups: Sequence[TeamGroup], group: TeamGroup, pool_name: str) -> TeamGroup | None:
    """The group's nearest ancestor with a quota in the pool (None: none has one). The tree must be
    one (check_groups refuses a cycle or an unknown parent first)."""
    by_name = {g.name: g for g in groups}
    parent = by_name.get(group.parent or "")
    while parent is not None and pool_name not in parent.quotas:
        parent = by_name.get(parent.parent or "")
    return parent


def group_in_pool(groups: Sequence[TeamGroup], team_name: str, pool_name: str) -> TeamGroup | None:
    """The nearest group holding the team (its own, or an ancestor of it) with a quota in the pool."""
    own = next((g for g in groups if team_name in g.teams), None)
    if own is None or pool_name in own.quotas:
        return own
    return parent_in_pool(groups, own, pool_name)


def groups_in_pool(groups: Sequence[TeamGroup], pool_name: str) -> list[tuple[TeamGroup, TeamGroup | None]]:
    """The groups with a quota in the pool, each with its nearest ancestor that has one, parents
    before their children (the order the policy document, Kueue and Slurm create them in)."""
    by_name = {g.name: g for g in groups}
    placed = [(g, parent_in_pool(groups, g, pool_name)) for g in groups if pool_name in g.quotas]
    return sorted(placed, key=lambda entry: len(_ancestors(by_name, entry[0])))  # stable: file order within a level


def _ancestors(by_name: dict[str, TeamGroup], group: TeamGroup) -> list[str]:
    """The names above ``group``, nearest first, up to a root, an undeclared parent or a repeat (a cycle)."""
    chain: list[str] = []
    parent = by_name.get(group.parent or "")
    while parent is not None and parent.name not in chain:
        chain.append(parent.name)
        parent = by_name.get(parent.parent or "")
    return chain


def check_groups(model: OrganisationView) -> list[Problem]:
    """Groups name declared teams, each team at most once, under a name no team has (on Slurm both
    become accounts of one tree); each parent is another declared group and the groups form a tree
    (no cycle); each group has a team or a child group; a group quota covers what its direct
    members (teams and child groups) hold (it is what they share, so it cannot promise less than
    each of them is promised), limits name pools where the group has a quota, and the top of each
    tree, with every team outside a group, fits the pool: a guarantee the pool cannot hold is
    refused, not silently weakened."""
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
    tree = _tree_problems(model.groups)
    if tree:  # the quotas below are summed up the tree, which must be one
        return problems + tree
    for index, group in enumerate(model.groups):
        problems += _group_quota_problems(model, group, f"groups[{index}]", pools)
        problems += _group_limit_problems(group, f"groups[{index}]")
    return problems or _group_capacity_problems(model)


def _tree_problems(groups: Sequence[TeamGroup]) -> list[Problem]:
    """Each parent a declared other group, no cycle, and every group with a team or a child group."""
    problems: list[Problem] = []
    names = [g.name for g in groups]
    by_name = {g.name: g for g in groups}
    for index, group in enumerate(groups):
        path = f"groups[{index}]"
        if group.parent == group.name:
            problems.append(
                Problem(path=f"{path}.parent", wrong="the group itself", value=group.parent, allowed="another group")
            )
        elif group.parent is not None and group.parent not in by_name:
            problems.append(
                Problem(
                    path=f"{path}.parent",
                    wrong="undeclared group",
                    value=group.parent,
                    allowed=f"one of {sorted(set(names) - {group.name})}",
                )
            )
        elif group.name in (chain := _ancestors(by_name, group)):
            cycle = chain[: chain.index(group.name) + 1]
            problems.append(
                Problem(
                    path=f"{path}.parent",
                    wrong=f"makes a cycle ({' -> '.join([group.name, *cycle])})",
                    value=group.parent,
                    allowed="a group that is not one of its own descendants",
                )
            )
        if not group.teams and not any(g.parent == group.name for g in groups):
            problems.append(
                Problem(
                    path=f"{path}.teams",
                    wrong="no team, and no group names it as parent",
                    value=[],
                    allowed="at least one team, or a child group (another group's parent)",
                )
            )
    return problems


def _group_quota_problems(model: OrganisationView, group: Any, path: str, pools: dict[str, Any]) -> list[Problem]:
    """A group's quota names declared pools and types and covers its direct members' quotas there."""
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
                        wrong=f"less than its teams' and child groups' quotas together ({members})",
                        value=count,
                        allowed=f"at least {members}, or smaller team or child group quotas",
                    )
                )
        for instance_type, members in model.members_quota(group, pool_name).items():
            if instance_type not in quota:
                problems.append(
                    Problem(
                        path=qpath,
                        wrong=f"no quota of {instance_type}, which its teams or child groups hold ({members})",
                        value=sorted(quota),
                        allowed=f"a quota for every instance type its teams and child groups have in pool {pool_name}",
                    )
                )
    return problems


def _group_limit_problems(group: TeamGroup, path: str) -> list[Problem]:
    """A borrowing or lending limit is of a pool and instance type the group has a quota of, and a
    lending limit lends at most that quota."""
    problems: list[Problem] = []
    for field, limits in (("borrowing_limits", group.borrowing_limits), ("lending_limits", group.lending_limits)):
        for pool_name, counts in limits.items():
            quota = group.quotas.get(pool_name)
            if quota is None:
                problems.append(
                    Problem(
                        path=f"{path}.{field}.{pool_name}",
                        wrong="a pool the group has no quota in",
                        value=pool_name,
                        allowed=f"one of the group's quota pools {sorted(group.quotas)}",
                    )
                )
                continue
            for instance_type, count in counts.items():
                if instance_type not in quota:
                    problems.append(
                        Problem(
                            path=f"{path}.{field}.{pool_name}.{instance_type}",
                            wrong="an instance type the group has no quota of",
                            value=instance_type,
                            allowed=f"one of {sorted(quota)}",
                        )
                    )
                elif field == "lending_limits" and count > quota[instance_type]:
                    problems.append(
                        Problem(
                            path=f"{path}.{field}.{pool_name}.{instance_type}",
                            wrong=f"more than the group's quota ({quota[instance_type]})",
                            value=count,
                            allowed=f"0 to {quota[instance_type]}: a group lends at most its own quota",
                        )
                    )
    return problems


def _group_capacity_problems(model: OrganisationView) -> list[Problem]:
    """The top groups of each tree and the teams outside every group fit each pool they are guaranteed in."""
    problems: list[Problem] = []
    for pool_index, pool in enumerate(model.pools):
        tops = [g for g, parent in groups_in_pool(model.groups, pool.name) if parent is None]
        if not tops:
            continue  # the team quotas alone, which check_pool_teams checks
        for instance_type, capacity in pool.capacity.items():
            grouped = sum(g.quotas[pool.name].get(instance_type, 0) for g in tops)
            alone = sum(
                instance_quota(t, pool).get(instance_type, 0)
                for t in model.teams
                if pool.name in t.quotas and group_in_pool(model.groups, t.name, pool.name) is None
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
