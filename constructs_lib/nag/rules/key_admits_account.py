from __future__ import annotations

import fnmatch
import re

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from ..cfn import StackIndex, as_list, properties, team_of, text
from ..rule import GovernanceRule, Result

_KEY_USE = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom")
# An account root in any spelling: bare id, arn:...:iam::ID:root (also built with Fn::Join), '*'.
_WHOLE_ACCOUNT = re.compile(r"^\d{12}$|:root$|^\*$")
# Condition keys that narrow the principal to particular roles or tagged principals.
_NARROWING_KEYS = ("aws:principalarn", "aws:principaltag/", "aws:userid")


def _principals(statement: dict) -> list[str]:
    principal = statement.get("Principal")
    if principal == "*":
        return ["*"]
    return [text(p) for p in as_list(principal.get("AWS"))] if isinstance(principal, dict) else []


def _narrowed(statement: dict) -> bool:
    keys = [
        k.lower() for block in (statement.get("Condition") or {}).values() if isinstance(block, dict) for k in block
    ]
    return any(k.startswith(n) for k in keys for n in _NARROWING_KEYS)


def _grants_use(statement: dict) -> bool:
    actions = [text(a).lower() for a in as_list(statement.get("Action"))]
    return any(fnmatch.fnmatch(use.lower(), pattern) for use in _KEY_USE for pattern in actions)


def _check(node: CfnResource, index: StackIndex) -> Result:
    if team_of(node) is None:
        return NagRuleCompliance.NOT_APPLICABLE  # not a team's data key: the rule governs tenants' keys only
    policy = properties(node).get("KeyPolicy") or {}
    findings = set()
    for statement in as_list(policy.get("Statement")):
        if statement.get("Effect") != "Allow" or not _grants_use(statement) or _narrowed(statement):
            continue
        findings |= {f"Principal::{p}" for p in _principals(statement) if _WHOLE_ACCOUNT.search(p)}
    return sorted(findings)


RULE = GovernanceRule(
    id="KeyAdmitsAccount",
    info="The team's KMS key policy lets a whole account (or anyone) use the key, not named roles.",
    explanation=(
        "A key policy statement for an account root lets every role of that account that its IAM "
        "policies allow decrypt with the key: one broad IAM policy anywhere in the account opens a "
        "team's data to everybody. Name the tenant's roles as principals (or narrow the statement with "
        "aws:PrincipalArn) and keep the account root to key administration."
    ),
    resource_types=frozenset({"AWS::KMS::Key"}),
    check=_check,
)
