"""The cdk-nag 3 packs every stack of the library is checked against: the standard ones and
the library's own GpuGovernance pack."""

from __future__ import annotations

from aws_cdk import Validations
from cdk_nag import (
    AwsSolutionsChecks,
    HIPAASecurityChecks,
    NIST80053R5Checks,
    PCIDSS321Checks,
    ServerlessChecks,
)
from constructs import Construct

# Re-exported: the acknowledgement helpers live apart so constructs can use them without
# importing the packs (the governance pack itself reads what the constructs record).
from .acknowledgements import acknowledge, acknowledge_wildcard_resources  # noqa: F401

STANDARD_PACKS = (AwsSolutionsChecks, NIST80053R5Checks, HIPAASecurityChecks, PCIDSS321Checks, ServerlessChecks)


def apply_standard_packs(scope: Construct) -> None:
    """Add the packs to an App or a Stage. With aws-cdk-lib 2.275 and cdk-nag 3, plugins on an
    App also check the stacks inside its Stages (tests/pipeline proves it), so add them once:
    to the App, or to each Stage when the App holds only a pipeline, never to both (every
    finding would be reported twice)."""
    # Imported here: the pack reads the metadata key batch.py defines, and batch.py imports us.
    from .nag import GpuGovernanceChecks

    Validations.of(scope).add_plugins(*(pack(scope) for pack in (*STANDARD_PACKS, GpuGovernanceChecks)))
