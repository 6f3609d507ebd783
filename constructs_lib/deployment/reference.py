from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from constructs_lib.model import GovernanceModel

from .capacity import CapacityAccountStack
from .consumer import ConsumerAccountStack
from .guardrails import OrganisationGuardrailsStack
from .team import TeamStack


def build_reference_app(scope: Construct, model: GovernanceModel) -> list[Stack]:
    """The reference organisation: the capacity account's stacks, one stack per consumer account
    and, when declared, the organisation guardrails. Each deploys after the capacity stack (CDK
    stack dependencies, which ``cdk deploy`` follows across accounts too): consumer policies and
    team stacks name what it creates, the guardrails' exemptions its deployment role."""
    capacity, *team_stacks = build_capacity_account(scope, model)
    stacks: list[Stack] = [capacity, *team_stacks]
    for account_name in model.consumer_accounts:
        stacks.append(build_consumer_account(scope, model, account_name))
    if model.guardrails is not None:  # organisation guardrails are opt-in
        stacks.append(OrganisationGuardrailsStack(scope, f"{model.organisation}-guardrails", model=model))
    for stack in stacks[1:]:
        stack.add_stack_dependency(capacity, "deploys after the capacity stack, whose resources it names")
    return stacks


def build_capacity_account(scope: Construct, model: GovernanceModel) -> list[Stack]:
    """The capacity account's stacks: ``<org>-capacity`` first, then (``stack_layout: per_team``)
    one ``<org>-team-<team>`` per team, which depend on it. For a pipeline's capacity stage."""
    team_stacks = {}
    if model.stack_layout == "per_team":
        team_stacks = {
            team.name: TeamStack(scope, team_stack_name(model, team.name), model=model, team_name=team.name)
            for team in model.teams
        }
    capacity = CapacityAccountStack(scope, f"{model.organisation}-capacity", model=model, team_stacks=team_stacks)
    for team_stack in team_stacks.values():
        team_stack.add_stack_dependency(
            capacity, "the team's resources use the capacity stack's queues, provider and log bucket"
        )
    return [capacity, *team_stacks.values()]


def build_consumer_account(scope: Construct, model: GovernanceModel, account_name: str) -> ConsumerAccountStack:
    """The stack of consumer account ``account_name``: ``<org>-consumer-<account>``. For a
    pipeline's consumer wave."""
    return ConsumerAccountStack(scope, consumer_stack_name(model, account_name), model=model, account_name=account_name)


def team_stack_name(model: GovernanceModel, team_name: str) -> str:
    """Keyed by the team's name, never by its position: adding or removing a team leaves every
    other team's stack as it is."""
    return f"{model.organisation}-team-{team_name}"


def consumer_stack_name(model: GovernanceModel, account_name: str) -> str:
    return f"{model.organisation}-consumer-{account_name}"
