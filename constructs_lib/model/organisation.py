"""The governance model: one declaration of the organisation used by the file loader, by the
constructs' typed props, by the compiled controller policy and by the CLI.

Every model object is a frozen pydantic model built with keyword arguments only. Field-level
checks (types, ranges, patterns) live on the fields; checks that need the whole organisation
(references between teams, accounts and pools, backend limits) live in ``check_organisation``.
Both report every problem at once as a :class:`GovernanceError`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, StringConstraints, ValidationError, model_validator

from constructs_lib.backends import BACKENDS, backend_of, backends_where
from constructs_lib.core.errors import GovernanceError, Problem

from .base import (
    MAX_PRIORITY_CLASSES,
    AccountId,
    AlertTarget,
    DnsLabel,
    OrganizationId,
    PrincipalArn,
    _Frozen,
    _OrganisationProblems,
    aws_partition,
    closest_setting,
    duplicates,
    governance_error_from,
    identity_center_role_patterns,
    path_of,
    without_settings,
)
from .capacity import CapacityWindow, check_windows
from .guardrails import EcrRepositoryArn, Guardrails
from .instance_types import check_instance_types
from .pool_checks import check_pool_teams, raised_part_instance_quotas
from .principals import check_name_scopes, check_principals
from .projects import Project, TeamGroup, check_groups, check_projects
from .quota import instance_quota
from .teams import Account, PriorityClass, Team

# Each backend's pool class (its package's pool.py), in the registry's order: pydantic tells them
# apart by their ``backend`` literal.
_POOL_CLASSES = tuple(backend.pool for backend in BACKENDS.values())
AnyPool = Union[_POOL_CLASSES]  # noqa: UP007 - a union of classes known only at run time
Pool = Annotated[AnyPool, Field(discriminator="backend")]


class GovernanceModel(_Frozen):
    """The whole organisation: accounts, priority classes, capacity pools and teams."""

    version: Literal[1] = 1
    organisation: DnsLabel = Field(description="Short name used in stack and resource names")
    capacity_account: Account
    consumer_accounts: dict[DnsLabel, Account] = Field(min_length=1)
    platform_admins: tuple[PrincipalArn, ...] = Field(
        min_length=1,
        description="Roles or users of the capacity account that administer the platform (key and cluster admins)",
    )
    organization_id: OrganizationId | None = Field(
        default=None,
        description="AWS Organizations id (o-...); when given, cross-account trust requires aws:PrincipalOrgID",
    )
    external_accounts: tuple[AccountId, ...] = Field(
        default=(),
        description="Accounts outside this organisation's declared accounts whose principals may still be team members "
        "(explicit opt-in; their trust carries no aws:PrincipalOrgID condition)",
    )
    priority_classes: tuple[PriorityClass, ...] = Field(min_length=1, max_length=MAX_PRIORITY_CLASSES)
    pools: tuple[Pool, ...] = Field(min_length=1)
    teams: tuple[Team, ...] = Field(min_length=1)
    capacity_windows: tuple[CapacityWindow, ...] = ()
    projects: tuple[Project, ...] = Field(
        default=(), description="Projects grouping teams, optionally in SageMaker Unified Studio"
    )
    groups: tuple[TeamGroup, ...] = Field(
        default=(),
        description="Groups of teams (departments) with a quota above their teams' (docs/governance-file.md, Groups)",
    )
    guardrails: Guardrails | None = Field(
        default=None, description="Organisation guardrails; none are deployed unless declared"
    )
    reclaim_mode: Literal["dry_run", "act"] = Field(
        default="dry_run",
        description="dry_run: the reclaim controller only records what it would preempt; act: it preempts (docs/reclaim.md)",
    )
    guard_mode: Literal["dry_run", "act"] = Field(
        default="dry_run",
        description="dry_run: the submission guard only records and reports the service jobs it would stop; act: it stops "
        "them (docs/security.md)",
    )
    shared_image_repositories: tuple[EcrRepositoryArn, ...] = Field(
        default=(),
        max_length=20,
        description="ECR repositories of shared base images (ARNs, no wildcards) every team's training jobs may pull from; a "
        "repository in another account must also allow the teams' execution roles in its repository policy",
    )
    alerts: tuple[AlertTarget, ...] = Field(
        default=(),
        description="Where platform alerts go: email addresses (subscribed to the controllers' alarm topics, and told of "
        "budgets) and existing SNS topic ARNs in the capacity account's region (alarms publish to them; e.g. AWS Chatbot)",
    )
    allow_unlisted_instance_types: tuple[
        Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9.-]*\.[a-z0-9]+$", max_length=40)], ...
    ] = Field(
        default=(),
        max_length=20,
        description="Instance types to accept although the installed botocore's service models do not list them (a type "
        "newer than botocore); every other type must be one the EC2 or SageMaker API lists",
    )
    stack_layout: Literal["single", "per_team"] = Field(
        default="single",
        description="single: every capacity-account resource in one stack (about 20 teams fit); per_team: shared "
        "resources in the capacity stack and each team's in a stack of its own (docs/architecture.md). Changing it "
        "moves resources between stacks, so choose once",
    )

    @model_validator(mode="after")
    def _organisation_is_consistent(self) -> GovernanceModel:
        problems = check_organisation(self)
        if problems:
            # Not a ValueError inside pydantic's machinery: raised as is, with every problem.
            raise _OrganisationProblems(problems)
        return self

    @classmethod
    def from_dict(cls, data: Any) -> GovernanceModel:
        """Build and check a model from plain data (parsed YAML or JSON)."""
        if not isinstance(data, dict):
            raise GovernanceError(
                [
                    Problem(
                        path="",
                        wrong="not a mapping",
                        value=type(data).__name__,
                        allowed="a mapping of governance settings",
                    )
                ]
            )
        keys = [key for key in data if not isinstance(key, str)]
        if keys:  # keyword arguments must be text; YAML turns `on:` or `1:` into True or 1
            raise GovernanceError(
                [
                    Problem(
                        path="",
                        wrong="a setting name is not text",
                        value=keys[0],
                        allowed="setting names as text; quote the key",
                    )
                ]
            )
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            # Unknown settings must not hide the checks across the file, which run only on a
            # model whose every field is valid: validate again without them and report both.
            first = governance_error_from(error, cls).problems
            problems = list(first)
            errors = error.errors(include_url=False)
            unknown = [item["loc"] for item in errors if item["type"] == "extra_forbidden"]
            missing = {path_of(item["loc"]) for item in errors if item["type"] == "missing"}
            # a misspelt required setting (`capcity`) is read under its right name the second time
            renamed = {
                loc: close
                for loc in unknown
                if (close := closest_setting(cls, loc)) and path_of((*loc[:-1], close)) in missing
            }
            # "capacity: missing" beside "capcity: ... did you mean capacity?" says nothing more
            moved = {path_of((*loc[:-1], close)) for loc, close in renamed.items()}
            problems = [p for p in problems if not (p.wrong == "missing" and p.path in moved)]
            if unknown:
                # what the objects holding them say without them is a guess: left out (a misspelt
                # `quota` would add "teams[0].quotas: no quota in any pool")
                holders = tuple(f"{path_of(loc[:-1])}." if len(loc) > 1 else "" for loc in unknown)
                try:
                    cls.model_validate(without_settings(data, unknown, renamed))
                except ValidationError as again:
                    problems += governance_error_from(again, cls).problems
                except _OrganisationProblems as again:
                    problems += again.problems
                kept = {str(p): p for p in problems if p in first or not _under(p.path, holders)}
                problems = list(kept.values())
            raise GovernanceError(problems) from None
        except _OrganisationProblems as error:
            raise GovernanceError(error.problems) from None

    def pool(self, name: str) -> AnyPool:
        return next(p for p in self.pools if p.name == name)

    def teams_in(self, pool_name: str) -> tuple[Team, ...]:
        """Teams with a quota in the pool, in declaration order."""
        return tuple(t for t in self.teams if pool_name in t.quotas)

    def member_principals(self, team: Team) -> tuple[str, ...]:
        """Who may act for ``team``: its members' ARNs, then the role ARN patterns of its
        permission sets (an undeclared account's permission sets are left out: validation
        reports them)."""
        patterns = []
        for permission_set in team.permission_sets:
            account = self.consumer_accounts.get(permission_set.account or team.account or "")
            if account is not None:
                patterns += identity_center_role_patterns(
                    account.account_id, permission_set.name, aws_partition(account.region)
                )
        return (*team.members, *patterns)

    def teams_of_account(self, account_name: str) -> tuple[Team, ...]:
        return tuple(t for t in self.teams if t.account == account_name)

    def group_of(self, team_name: str) -> TeamGroup | None:
        return next((g for g in self.groups if team_name in g.teams), None)

    def members_quota(self, group: TeamGroup, pool_name: str) -> dict[str, int]:
        """What ``group``'s direct members hold in a pool, per instance type: its teams' quotas (in
        whole instances) and each child group's quota there, or, for a child group without one,
        what that child's members hold."""
        pool = self.pool(pool_name)
        total: dict[str, int] = {}
        held = [instance_quota(t, pool) for t in self.teams if t.name in group.teams and pool_name in t.quotas]
        for child in self.groups:
            if child.parent == group.name:
                held.append(
                    dict(child.quotas[pool_name]) if pool_name in child.quotas else self.members_quota(child, pool_name)
                )
        for quota in held:
            for instance_type, count in quota.items():
                total[instance_type] = total.get(instance_type, 0) + count
        return total

    def project_of(self, team_name: str) -> Project | None:
        return next((p for p in self.projects if team_name in p.teams), None)

    def hyperpod_pools_of(self, project: Project) -> tuple[AnyPool, ...]:
        """The HyperPod pools (clusters) the project's teams have a quota in, in pool order."""
        used = {pool for team in self.teams if team.name in project.teams for pool in team.quotas}
        return tuple(p for p in self.pools if p.name in used and backend_of(p).family == "hyperpod")


# --- whole-organisation checks ----------------------------------------------------------------


def check_organisation(model: GovernanceModel) -> list[Problem]:
    """Every cross-reference and backend limit that a deploy would otherwise trip over."""
    problems: list[Problem] = []
    duplicates([p.name for p in model.priority_classes], "priority_classes", problems)
    duplicates([p.name for p in model.pools], "pools", problems)
    duplicates([t.name.lower() for t in model.teams], "teams", problems, "team names must differ (ignoring case)")
    problems += check_name_scopes(model)

    pools = {p.name: p for p in model.pools}
    for name in model.consumer_accounts:
        # The account's stack holds its teams' policies only: without a team it is empty, which
        # CloudFormation refuses ("Resources section must exist and be non-empty").
        if not model.teams_of_account(name):
            problems.append(
                Problem(
                    path=f"consumer_accounts.{name}",
                    wrong="no team's account: its stack would be empty, which CloudFormation refuses",
                    value=name,
                    allowed="the account of at least one team (teams[].account); otherwise remove it "
                    "(and destroy its stack if it was deployed)",
                )
            )
    for index, team in enumerate(model.teams):
        problems += _team_references(model, team, f"teams[{index}]", pools)
    for pool_index, pool in enumerate(model.pools):
        members = [(f"teams[{i}]", t) for i, t in enumerate(model.teams) if pool.name in t.quotas]
        problems += check_pool_teams(pool, members, f"pools[{pool_index}]")
    problems += raised_part_instance_quotas(model)
    if not problems:  # what a backend's own checks derive (Slurm names) needs a model whose references hold
        for pool in model.pools:
            if (checks := backend_of(pool).part("checks")) is not None:
                # Organisation-wide findings come once however many pools of the backend repeat them.
                problems += [p for p in checks.problems(model, pool) if p not in problems]
    problems += check_windows(model)
    problems += check_instance_types(model)
    problems += check_projects(model)
    problems += check_groups(model)
    problems += check_principals(model)
    problems += check_alert_topics(model)
    return problems


def _team_references(model: GovernanceModel, team: Team, path: str, pools: dict[str, AnyPool]) -> list[Problem]:
    """What one team names that the organisation must declare: its account, pools, priority classes."""
    problems: list[Problem] = []
    if team.account not in model.consumer_accounts:
        problems.append(
            Problem(
                path=f"{path}.account",
                wrong="undeclared account" if team.account else "missing",
                value=team.account,
                allowed=f"one of {sorted(model.consumer_accounts)}",
            )
        )
    if not team.quotas:
        problems.append(
            Problem(
                path=f"{path}.quotas",
                wrong="team has no quota in any pool",
                value={},
                allowed=f"at least one of {sorted(pools)}",
            )
        )
    if not team.members and not team.permission_sets:
        problems.append(
            Problem(
                path=f"{path}.members",
                wrong="nobody may act for the team",
                value=[],
                allowed="at least one IAM role or user ARN, or a permission_sets entry",
            )
        )
    for member_index, permission_set in enumerate(team.permission_sets):
        if permission_set.account is not None and permission_set.account not in model.consumer_accounts:
            problems.append(
                Problem(
                    path=f"{path}.permission_sets[{member_index}].account",
                    wrong="undeclared account",
                    value=permission_set.account,
                    allowed=f"one of {sorted(model.consumer_accounts)}",
                )
            )
    for pool_name in team.quotas:
        if pool_name not in pools:
            problems.append(
                Problem(
                    path=f"{path}.quotas.{pool_name}",
                    wrong="undeclared pool",
                    value=pool_name,
                    allowed=f"one of {sorted(pools)}",
                )
            )
    for pool_name in team.kubernetes:
        if (
            pool_name not in team.quotas
            or pools.get(pool_name) is None
            or not backend_of(pools[pool_name]).kubernetes_tenancy
        ):
            kubernetes_pools = sorted(p for p in team.quotas if p in pools and backend_of(pools[p]).kubernetes_tenancy)
            problems.append(
                Problem(
                    path=f"{path}.kubernetes.{pool_name}",
                    wrong=f"not a {' or '.join(backends_where(lambda b: b.kubernetes_tenancy))} pool the team has a quota in",
                    value=pool_name,
                    allowed=f"one of {kubernetes_pools}",
                )
            )
        declared = [c.name for c in model.priority_classes]
        for class_index, name in enumerate(team.kubernetes[pool_name].priority_classes or ()):
            if name not in declared:
                problems.append(
                    Problem(
                        path=f"{path}.kubernetes.{pool_name}.priority_classes[{class_index}]",
                        wrong="undeclared priority class",
                        value=name,
                        allowed=f"one of {declared}",
                    )
                )
    return problems


def check_alert_topics(model: GovernanceModel) -> list[Problem]:
    """CloudWatch alarms publish only to topics of their own region."""
    region = model.capacity_account.region
    return [
        Problem(
            path=f"alerts[{i}]",
            wrong="SNS topic in another region than the alarms",
            value=target,
            allowed=f"a topic in {region} (the capacity account's region)",
        )
        for i, target in enumerate(model.alerts)
        if target.startswith("arn:") and target.split(":")[3] != region
    ]


def _under(path: str, holders: tuple[str, ...]) -> bool:
    """Whether ``path`` is inside one of ``holders`` (paths ending in a dot; "" is the whole file)."""
    return any(holder == "" or f"{path}.".startswith(holder) for holder in holders)
