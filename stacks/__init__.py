"""The reference app's stacks: the library's (constructs_lib.deployment), named here for app.py."""

from constructs_lib.deployment import (
    CapacityAccountStack, ConsumerAccountStack, OrganisationGuardrailsStack, TeamStack, build_reference_app, team_stack_name,
)

__all__ = ["CapacityAccountStack", "ConsumerAccountStack", "OrganisationGuardrailsStack", "TeamStack", "build_reference_app", "team_stack_name"]
