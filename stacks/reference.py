from __future__ import annotations

from constructs import Construct

from constructs_lib.model import GovernanceModel

from .capacity_stack import CapacityAccountStack
from .consumer_stack import ConsumerAccountStack
from .guardrails_stack import OrganisationGuardrailsStack


def build_reference_app(scope: Construct, model: GovernanceModel) -> list:
    """The reference organisation: one capacity stack, one stack per consumer account and, when
    declared, the organisation guardrails."""
    prefix = model.organisation
    stacks = [CapacityAccountStack(scope, f"{prefix}-capacity", model=model)]
    for account_name in model.consumer_accounts:
        stacks.append(ConsumerAccountStack(scope, f"{prefix}-consumer-{account_name}", model=model, account_name=account_name))
    if model.guardrails is not None:  # organisation guardrails are opt-in
        stacks.append(OrganisationGuardrailsStack(scope, f"{prefix}-guardrails", model=model))
    return stacks
