"""The cdk-nag 3 packs every stack of the library is checked against: the standard ones and
the library's own GpuGovernance pack. Constructs acknowledge findings with
``acknowledgements.acknowledge``, which needs no pack."""

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

from constructs_lib.nag import GpuGovernanceChecks

STANDARD_PACKS = (AwsSolutionsChecks, NIST80053R5Checks, HIPAASecurityChecks, PCIDSS321Checks, ServerlessChecks)


def apply_standard_packs(scope: Construct) -> None:
    """Add the packs to an App or a Stage. With aws-cdk-lib 2.275 and cdk-nag 3, plugins on an
    App also check the stacks inside its Stages (tests/pipeline proves it), so add them once:
    to the App, or to each Stage when the App holds only a pipeline, never to both (every
    finding would be reported twice)."""
    Validations.of(scope).add_plugins(*(pack(scope) for pack in (*STANDARD_PACKS, GpuGovernanceChecks)))
