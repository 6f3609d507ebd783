"""Thin reference stacks: the capacity account and one stack per consumer account."""

from .capacity_stack import CapacityAccountStack
from .consumer_stack import ConsumerAccountStack
from .guardrails_stack import OrganisationGuardrailsStack
from .reference import build_reference_app

__all__ = ["CapacityAccountStack", "ConsumerAccountStack", "OrganisationGuardrailsStack", "build_reference_app"]
