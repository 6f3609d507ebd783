"""The reference stacks, defined in the package (constructs_lib.deployment) so an installed package builds them too."""

from constructs_lib.deployment import (
    CapacityAccountStack,
    ConsumerAccountStack,
    OrganisationGuardrailsStack,
    TeamStack,
    build_capacity_account,
    build_consumer_account,
    build_reference_app,
    consumer_stack_name,
    team_stack_name,
)

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
