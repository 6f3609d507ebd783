"""Who acts for a team, checked across the organisation: its members' and permission sets'
accounts, the names its roles and jobs take, roles shared between teams, and the guardrails'
exemptions."""

from __future__ import annotations

import bisect
from fnmatch import fnmatchcase

from constructs_lib.core.errors import Problem
from constructs_lib.core.wording import listed

from .base import (
    OrganisationView,
    account_of,
    aws_partition,
    identity_center_role_patterns,
    library_role,
    team_name_scopes,
)
from .guardrails import Guardrails


def check_name_scopes(model: OrganisationView) -> list[Problem]:
    """No name scope derived from a team's name covers another team's, in any case: training-job
    names and their log streams, secrets, discovery parameters and HyperPod namespaces are granted
    by name (no tags there), so ``AWSBatch<team>`` or ``<team>-x`` beside ``<team>`` would reach
    the other team's. One problem per later team of a clashing pair, naming both scopes.

    Scopes are literals with at most a trailing ``*`` (``scopes_overlap``): sorted by literal, an
    open scope overlaps exactly the run of literals that start with it, so a pass over the sorted
    list finds every clash without comparing every pair (organisations have hundreds of teams)."""
    entries = sorted(
        (pattern.lower().rstrip("*"), pattern.endswith("*"), index, order, what, pattern)
        for index, team in enumerate(model.teams)
        for order, (what, pattern) in enumerate(
            (w, p) for w, ps in team_name_scopes(model.organisation, team.name).items() for p in ps
        )
    )
    literals = [entry[0] for entry in entries]
    clashes: dict[
        int, tuple[int, int, str, str, str]
    ] = {}  # later team -> (earlier team, order, what, its pattern, the earlier's)
    for literal, is_open, index, order, what, pattern in entries:
        position = bisect.bisect_left(literals, literal)
        while position < len(entries) and (
            literals[position].startswith(literal) if is_open else literals[position] == literal
        ):
            _, _, other, other_order, other_what, other_pattern = entries[position]
            position += 1
            if other == index or model.teams[other].name.lower() == model.teams[index].name.lower():
                continue  # the duplicate check names equal names
            clash = (
                (other, order, what, pattern, other_pattern)
                if index > other
                else (index, other_order, other_what, other_pattern, pattern)
            )
            later = max(index, other)
            clashes[later] = min(clashes.get(later, clash), clash)
    return [
        Problem(
            path=f"teams[{later}].name",
            wrong=f"its {what} scope '{mine}' overlaps team {model.teams[earlier].name}'s '{theirs}'",
            value=model.teams[later].name,
            allowed="a name whose derived names (docs/security.md) no other team's name covers, ignoring case",
        )
        for later, (earlier, _, what, mine, theirs) in sorted(clashes.items())
    ]


def check_principals(model: OrganisationView) -> list[Problem]:
    """Who may act where: admins only from the capacity account, members only from declared
    accounts, exemptions only in the platform's accounts, and never a role the library creates."""
    problems: list[Problem] = []
    capacity = model.capacity_account.account_id
    declared = {capacity, *(account.account_id for account in model.consumer_accounts.values())}
    for index, account_id in enumerate(model.external_accounts):
        if account_id in declared:
            problems.append(
                Problem(
                    path=f"external_accounts[{index}]",
                    wrong="already a declared account",
                    value=account_id,
                    allowed="an account that is neither the capacity account nor a consumer account",
                )
            )
    checked: list[tuple[str, str, set[str], str]] = [
        (
            f"platform_admins[{i}]",
            arn,
            {capacity},
            f"a role or user of the capacity account {capacity}: admins hold every tenant key, cluster and guardrail exemption",
        )
        for i, arn in enumerate(model.platform_admins)
    ]
    member_accounts = declared | set(model.external_accounts)
    checked += [
        (
            f"teams[{t}].members[{m}]",
            arn,
            member_accounts,
            "an account of capacity_account or consumer_accounts, or one listed in external_accounts",
        )
        for t, team in enumerate(model.teams)
        for m, arn in enumerate(team.members)
    ]
    for p, project in enumerate(model.projects):
        people = [
            (f"projects[{p}].owner", project.owner),
            *((f"projects[{p}].members[{m}]", arn) for m, arn in enumerate(project.members)),
        ]
        if project.unified_studio is not None:
            people += [
                (f"projects[{p}].unified_studio.policy_grants[{g}].principal", grant.principal)
                for g, grant in enumerate(project.unified_studio.policy_grants)
            ]
        checked += [
            (
                path,
                arn,
                member_accounts,
                "an account of capacity_account or consumer_accounts, or one listed in external_accounts",
            )
            for path, arn in people
        ]
    problems += _principal_problems(model, checked)
    problems += _shared_member_roles(model)
    problems += _overlapping_identity_center_members(model)
    if model.guardrails is not None:
        problems += check_exemptions(model, model.guardrails)
    return problems


def _shared_member_roles(model: OrganisationView) -> list[Problem]:
    """An IAM role listed among the members of two teams: whoever can act as it (every member of a
    Unified Studio project, for a project's role) gets both teams' roles, keys, buckets and jobs,
    so the teams are no longer apart. A person in two teams is listed by a role of their own per
    team (docs/unified-studio.md). Role names are unique per account ignoring case (and path)."""
    listings: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for t, team in enumerate(model.teams):
        for m, arn in enumerate(team.members):
            kind, _, path_and_name = arn.split(":", 5)[-1].partition("/")
            if kind == "role":
                role = (account_of(arn), path_and_name.rsplit("/", 1)[-1].lower())
                listings.setdefault(role, []).append((f"teams[{t}].members[{m}]", team.name, arn))
    problems = []
    for holders in listings.values():
        teams = sorted({team for _, team, _ in holders})
        if len(teams) > 1:
            for path, _, arn in holders:
                problems.append(
                    Problem(
                        path=path,
                        wrong=f"role is a member of teams {listed(teams)}",
                        value=arn,
                        allowed="a role of one team only: whoever acts as it (every member of a project, for a Unified Studio project role) "
                        "would get every team's access; list each person's own role in each team instead",
                    )
                )
    return problems


def _overlapping_identity_center_members(model: OrganisationView) -> list[Problem]:
    """A team's permission set admits the roles Identity Center makes for it by the pattern
    ``AWSReservedSSO_<name>_*`` in its account, and that pattern also matches the role of another
    team's permission set there named the same or ``<name>_<more>`` (``ML`` admits ``ML_Research``),
    and any member ARN of another team it matches: those people would act for both teams."""
    admitted = []  # (path, team, permission set, account id, its role patterns)
    for t, team in enumerate(model.teams):
        for p, permission_set in enumerate(team.permission_sets):
            account = model.consumer_accounts.get(permission_set.account or team.account or "")
            if account is not None:
                patterns = identity_center_role_patterns(
                    account.account_id, permission_set.name, aws_partition(account.region)
                )
                admitted.append(
                    (
                        f"teams[{t}].permission_sets[{p}].name",
                        team.name,
                        permission_set.name,
                        account.account_id,
                        patterns,
                    )
                )
    # Every team's principals: its members, and a role Identity Center may make for each of its
    # permission sets (with and without a region in the path; any suffix stands for all).
    principals = [(team.name, arn, f"member {arn}") for team in model.teams for arn in team.members] + [
        (team, pattern.replace("*", "0123456789abcdef"), f"permission set {name}")
        for _, team, name, _, patterns in admitted
        for pattern in patterns
    ]
    problems = []
    for path, team, name, account, patterns in admitted:
        caught = sorted(
            {
                f"team {other}'s {what}"
                for other, arn, what in principals
                if other != team and any(fnmatchcase(arn, pattern) for pattern in patterns)
            }
        )
        if caught:
            problems.append(
                Problem(
                    path=path,
                    wrong=f"its Identity Center roles (AWSReservedSSO_{name}_* in account {account}) also match "
                    f"{listed(caught)}",
                    value=name,
                    allowed="a permission set named neither as another team's in that account nor as another's name "
                    "followed by '_': its users would act for both teams",
                )
            )
    return problems


def shared_account_warnings(model: OrganisationView) -> list[str]:
    """What ``validate`` warns of: member roles of two teams in one account. IAM tells the teams
    apart by role ARN (the submission roles trust exact ARNs), but whether one team's member can
    become the other's is for that account's IAM, which the library neither writes nor reads: a
    role whose trust policy names its account can be assumed by any principal there that an
    identity policy allows to (PowerUserAccess allows sts:AssumeRole on every role), and then acts
    for the role's team. Identity Center roles (``permission_sets``) and users are not counted:
    Identity Center alone assumes its roles, and nobody assumes a user."""
    roles: dict[str, dict[str, list[str]]] = {}  # account -> team -> its member roles' names
    first: dict[str, int] = {}  # account -> the first team with a member role there
    for t, team in enumerate(model.teams):
        for arn in team.members:
            kind, _, path = arn.split(":", 5)[-1].partition("/")
            if kind == "role" and not path.startswith("aws-reserved/"):
                roles.setdefault(account_of(arn), {}).setdefault(team.name, []).append(path.rsplit("/", 1)[-1])
                first.setdefault(account_of(arn), t)
    return [
        f"teams[{first[account]}].members: member roles of {len(teams)} teams in account {account}: "
        f"{listed([f'{team} ({listed(names)})' for team, names in teams.items()])} - IAM keeps these teams apart only "
        "as far as that account's own policies do: a member role whose trust policy names the account can be assumed "
        "by any principal there allowed sts:AssumeRole on it, another team's member included, who then acts for the "
        "role's team. Make each member role trust only its own people (an identity provider, or Identity Center "
        "through permission_sets), or give each team an account of its own"
        for account, teams in sorted(roles.items())
        if len(teams) > 1
    ]


def check_exemptions(model: OrganisationView, guardrails: Guardrails) -> list[Problem]:
    """Guardrail exemptions must be roles of the platform's accounts (capacity, management), not
    roles a tenant can create in its own account, and not roles the library creates. Also used
    for guardrails handed to the construct apart from the model."""
    capacity, management = model.capacity_account.account_id, guardrails.management_account.account_id
    allowed = f"a role of the capacity ({capacity}) or management ({management}) account"
    return _principal_problems(
        model,
        [
            (f"guardrails.exempt_principals[{i}]", arn, {capacity, management}, allowed)
            for i, arn in enumerate(guardrails.exempt_principals)
        ],
    )


def _principal_problems(model: OrganisationView, checked: list[tuple[str, str, set[str], str]]) -> list[Problem]:
    """``checked``: (path, principal ARN, the accounts it may belong to, what is allowed)."""
    problems: list[Problem] = []
    for path, arn, accounts, allowed in checked:
        if account_of(arn) not in accounts:
            problems.append(
                Problem(path=path, wrong=f"account {account_of(arn)} is not allowed here", value=arn, allowed=allowed)
            )
        reason = library_role(arn, model.organisation)
        if reason:
            problems.append(
                Problem(
                    path=path,
                    wrong=reason,
                    value=arn,
                    allowed="a role the platform or the team owns, not one this library creates",
                )
            )
    return problems
