"""The deployable organisation built from a governance file: the capacity-account stack (and,
with ``stack_layout: per_team``, one stack per team), one stack per consumer account and the
optional guardrails stack; ``build_reference_app`` composes them and ``python -m
constructs_lib.deployment`` (``app.main``) is a CDK app for ``cdk.json`` that needs nothing but the
installed package.

Names load on first use (PEP 562), so that ``python -m constructs_lib.deployment`` and ``app.py``
can silence jsii's banner (``app.main``) before anything here starts aws_cdk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

_DEFINED_IN = {
    "CapacityAccountStack": "capacity",
    "ConsumerAccountStack": "consumer",
    "OrganisationGuardrailsStack": "guardrails",
    "TeamStack": "team",
    "build_capacity_account": "reference",
    "build_consumer_account": "reference",
    "build_reference_app": "reference",
    "consumer_stack_name": "reference",
    "team_stack_name": "reference",
}
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
__getattr__, __dir__ = lazy_exports(__name__, _DEFINED_IN)

if TYPE_CHECKING:
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
