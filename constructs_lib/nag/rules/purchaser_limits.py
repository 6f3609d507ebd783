from __future__ import annotations

from decimal import Decimal, InvalidOperation

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from constructs_lib.core.vocabulary import PURCHASE_ACTIONS
from gpu_governance_runtime import contract

from ..cfn import (
    CAPACITY_CONTROLLER,
    IDENTITY_POLICY_TYPES,
    StackIndex,
    allowed,
    cfn_type,
    governance_metadata,
    identity_policy,
    properties,
    referenced_logical_id,
)
from ..rule import GovernanceRule, Result

BUDGET_VARIABLE = contract.ENV_BUDGET
PRICE_CAP_VARIABLE = contract.ENV_PRICE_CAP


def _buys_capacity(node: CfnResource, index: StackIndex, role_id: str) -> bool:
    role = index.resource(node, role_id)
    if role is not None and governance_metadata(role).get(CAPACITY_CONTROLLER):
        return True
    return any(
        role_id in policy.role_ids and allowed(policy.statements, PURCHASE_ACTIONS)
        for policy in (identity_policy(r) for r in index.resources(node) if cfn_type(r) in IDENTITY_POLICY_TYPES)
    )


def _positive_amount(value: object) -> bool:
    if not isinstance(value, str):
        return value is not None  # a reference (parameter, SSM) resolved at deploy time
    try:
        return Decimal(value) > 0
    except InvalidOperation:
        return False


def _check(node: CfnResource, index: StackIndex) -> Result:
    props = properties(node)
    role_id = referenced_logical_id(props.get("Role"))
    if role_id is None or not _buys_capacity(node, index, role_id):
        return NagRuleCompliance.NOT_APPLICABLE
    variables = (props.get("Environment") or {}).get("Variables") or {}
    findings = [
        f"Missing::{name}"
        for name in (BUDGET_VARIABLE, PRICE_CAP_VARIABLE)
        if not _positive_amount(variables.get(name))
    ]
    if props.get("ReservedConcurrentExecutions") != 1:
        findings.append("Concurrency::unreserved")
    return findings


RULE = GovernanceRule(
    id="PurchaserLimits",
    info="The capacity purchasing function has no budget or price cap, or may run concurrently.",
    explanation=(
        "A function that buys Capacity Blocks or training plans spends money that cannot be refunded. "
        f"It needs a budget ({BUDGET_VARIABLE}) and a price cap per purchase ({PRICE_CAP_VARIABLE}), "
        "positive amounts in the offering currency, and reserved concurrency 1 so that two invocations "
        "never buy the same gap twice."
    ),
    resource_types=frozenset({"AWS::Lambda::Function"}),
    check=_check,
)
