from __future__ import annotations

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from constructs_lib.core.vocabulary import PURCHASE_ACTIONS

from ..cfn import CAPACITY_CONTROLLER, IDENTITY_POLICY_TYPES, StackIndex, allowed, identity_policy
from ..rule import GovernanceRule, Result


def _check(node: CfnResource, index: StackIndex) -> Result:
    policy = identity_policy(node)
    purchasing = [s for s in policy.statements if allowed([s], PURCHASE_ACTIONS)]
    if not purchasing:
        return NagRuleCompliance.NOT_APPLICABLE
    findings = ["Resource::*"] if any("*" in s.resources for s in purchasing) else []
    findings += [f"Principal::<{role}>" for role in policy.role_ids if not index.is_declared(node, role, CAPACITY_CONTROLLER)]
    findings += [f"Principal::{name}" for name in policy.role_names + policy.users_or_groups]
    return findings


RULE = GovernanceRule(
    id="CapacityPurchaseGrant",
    info="The IAM policy lets buy GPU capacity on '*' or a principal other than a declared capacity controller.",
    explanation=(
        "ec2:PurchaseCapacityBlock, ec2:PurchaseCapacityBlockExtension and sagemaker:CreateTrainingPlan "
        "spend money up front and cannot be cancelled. Only the capacity controller, which checks the "
        "budget and price cap and records every purchase, may call them, on capacity-reservation or "
        "training-plan ARNs with tag conditions. Declare its role with declare_capacity_controller()."
    ),
    resource_types=IDENTITY_POLICY_TYPES,
    check=_check,
)
