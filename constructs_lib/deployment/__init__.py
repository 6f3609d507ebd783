"""The deployable organisation built from a governance file: the capacity-account stack (and,
with ``stack_layout: per_team``, one stack per team), one stack per consumer account and the
optional guardrails stack; ``build_reference_app`` composes them and ``python -m
constructs_lib.deployment`` (``app.main``) is a CDK app for ``cdk.json`` that needs nothing but the
installed package."""

from .capacity import CapacityAccountStack
from .consumer import ConsumerAccountStack
from .guardrails import OrganisationGuardrailsStack
from .reference import (
    build_capacity_account,
    build_consumer_account,
    build_reference_app,
    consumer_stack_name,
    team_stack_name,
)
from .team import TeamStack

__all__ = [
    "CapacityAccountStack",
    "ConsumerAccountStack",
    "OrganisationGuardrailsStack",
    "TeamStack",
    "build_capacity_account",
    "build_consumer_account",
    "build_reference_app",
    "consumer_stack_name",
    "team_stack_name",
]
