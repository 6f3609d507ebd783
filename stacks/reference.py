from __future__ import annotations

from constructs import Construct

from constructs_lib.model import GovernanceModel

from .capacity_stack import CapacityAccountStack
from .consumer_stack import ConsumerAccountStack


def build_reference_app(scope: Construct, model: GovernanceModel) -> list:
    """The reference organisation: one capacity stack and one stack per consumer account."""
    prefix = model.organisation
    stacks = [CapacityAccountStack(scope, f"{prefix}-capacity", model=model)]
    for account_name in model.consumer_accounts:
        stacks.append(ConsumerAccountStack(scope, f"{prefix}-consumer-{account_name}", model=model, account_name=account_name))
    return stacks
