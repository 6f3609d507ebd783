from __future__ import annotations

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from constructs_lib.core.vocabulary import PURCHASE_ACTIONS, PURCHASING_MANAGED_POLICIES

from ..cfn import (
    CAPACITY_CONTROLLER,
    IDENTITY_POLICY_TYPES,
    StackIndex,
    allowed,
    aws_managed_policies,
    cfn_type,
    identity_policy,
)
from ..rule import GovernanceRule, Result


def _check(node: CfnResource, index: StackIndex) -> Result:
    policy = identity_policy(node)
    purchasing = [s for s in policy.statements if allowed([s], PURCHASE_ACTIONS)]
    # an AWS-managed policy buys as well as a written one, on every resource, for whoever holds it
    managed = (
        [f"ManagedPolicy::{name}" for name in aws_managed_policies(node) if name in PURCHASING_MANAGED_POLICIES]
        if cfn_type(node) in ("AWS::IAM::Role", "AWS::IAM::User", "AWS::IAM::Group")
        else []
    )
    if not purchasing:
        return managed or NagRuleCompliance.NOT_APPLICABLE
    findings = managed + (["Resource::*"] if any("*" in s.resources for s in purchasing) else [])
    findings += [
        f"Principal::<{role}>" for role in policy.role_ids if not index.is_declared(node, role, CAPACITY_CONTROLLER)
    ]
    findings += [f"Principal::{name}" for name in policy.role_names + policy.users_or_groups]
    return findings


RULE = GovernanceRule(
    id="CapacityPurchaseGrant",
    info="An IAM policy (own or AWS-managed) lets buy GPU capacity on '*', or lets another principal than the controller buy.",
    explanation=(
        "ec2:PurchaseCapacityBlock, ec2:PurchaseCapacityBlockExtension and sagemaker:CreateTrainingPlan "
        "spend money up front and cannot be cancelled. Only the capacity controller, which checks the "
        "budget and price cap and records every purchase, may call them, on capacity-reservation or "
        "training-plan ARNs with tag conditions. Declare its role with declare_capacity_controller()."
    ),
    resource_types=IDENTITY_POLICY_TYPES,
    check=_check,
)
