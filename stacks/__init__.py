"""Thin reference stacks: the capacity account and one stack per consumer account."""

from .capacity_stack import CapacityAccountStack
from .consumer_stack import ConsumerAccountStack
from .guardrails_stack import OrganisationGuardrailsStack
from .reference import build_reference_app, team_stack_name
from .team_stack import TeamStack

__all__ = ["CapacityAccountStack", "ConsumerAccountStack", "OrganisationGuardrailsStack", "TeamStack", "build_reference_app", "team_stack_name"]
