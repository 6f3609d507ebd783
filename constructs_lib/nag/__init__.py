"""The GpuGovernance cdk-nag 3 pack: governance rules for shared GPU capacity in any CDK app."""

from .cfn import declare_capacity_controller, declare_platform_admin
from .pack import PACK_NAME, GpuGovernanceChecks
from .rules import RULES
from .rules.purchaser_limits import BUDGET_VARIABLE, PRICE_CAP_VARIABLE

__all__ = [
    "BUDGET_VARIABLE",
    "PACK_NAME",
    "PRICE_CAP_VARIABLE",
    "RULES",
    "GpuGovernanceChecks",
    "declare_capacity_controller",
    "declare_platform_admin",
]
