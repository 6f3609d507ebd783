from __future__ import annotations

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from ..cfn import StackIndex, properties, team_of
from ..rule import GovernanceRule, Result


def _check(node: CfnResource, index: StackIndex) -> Result:
    if team_of(node) is None:
        return NagRuleCompliance.NOT_APPLICABLE  # not a team's data key: the rule governs tenants' keys only
    props = properties(node)
    if props.get("KeySpec", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT":
        return NagRuleCompliance.NOT_APPLICABLE  # KMS rotates only symmetric encryption keys
    return NagRuleCompliance.COMPLIANT if props.get("EnableKeyRotation") is True else NagRuleCompliance.NON_COMPLIANT


RULE = GovernanceRule(
    id="KeyRotation",
    info="The team's KMS key does not rotate its key material.",
    explanation=(
        "Tenant data keys protect each team's datasets and checkpoints for years; without automatic "
        "rotation one exposed key version decrypts everything ever written with it. Set "
        "EnableKeyRotation (enable_key_rotation=True)."
    ),
    resource_types=frozenset({"AWS::KMS::Key"}),
    check=_check,
)
