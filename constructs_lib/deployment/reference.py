from __future__ import annotations

from constructs import Construct

from constructs_lib.model import GovernanceModel

from .capacity import CapacityAccountStack
from .consumer import ConsumerAccountStack
from .guardrails import OrganisationGuardrailsStack
from .team import TeamStack


def build_reference_app(scope: Construct, model: GovernanceModel) -> list:
    """The reference organisation: one capacity stack (with ``stack_layout: per_team``, plus one
    stack per team), one stack per consumer account and, when declared, the organisation
    guardrails."""
    prefix = model.organisation
    team_stacks = {}
    if model.stack_layout == "per_team":
        team_stacks = {team.name: TeamStack(scope, team_stack_name(model, team.name), model=model, team_name=team.name) for team in model.teams}
    stacks = [CapacityAccountStack(scope, f"{prefix}-capacity", model=model, team_stacks=team_stacks), *team_stacks.values()]
    for account_name in model.consumer_accounts:
        stacks.append(ConsumerAccountStack(scope, f"{prefix}-consumer-{account_name}", model=model, account_name=account_name))
    if model.guardrails is not None:  # organisation guardrails are opt-in
        stacks.append(OrganisationGuardrailsStack(scope, f"{prefix}-guardrails", model=model))
    return stacks


def team_stack_name(model: GovernanceModel, team_name: str) -> str:
    """Keyed by the team's name, never by its position: adding or removing a team leaves every
    other team's stack as it is."""
    return f"{model.organisation}-team-{team_name}"
