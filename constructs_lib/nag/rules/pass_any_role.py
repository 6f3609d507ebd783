from __future__ import annotations

import re

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from ..cfn import IDENTITY_POLICY_TYPES, StackIndex, identity_policy
from ..rule import GovernanceRule, Result

# '*', any IAM resource of an account ('arn:...:iam::ACCOUNT:*') or any role ('...:role/*').
_ANY_ROLE = re.compile(r"^\*$|:iam::[^:]*:\*$|:role/\*$")


def _check(node: CfnResource, index: StackIndex) -> Result:
    passing = [s for s in identity_policy(node).statements if s.allows("iam:PassRole")]
    if not passing:
        return NagRuleCompliance.NOT_APPLICABLE
    return sorted({f"Resource::{r}" for s in passing for r in s.resources if _ANY_ROLE.search(r)})


RULE = GovernanceRule(
    id="PassAnyRole",
    info="The IAM policy lets pass any role (iam:PassRole on every role).",
    explanation=(
        "A principal that may pass any role can start a training job or function as another team's "
        "execution role, or as an administrator's, and so read that team's data and spend its "
        "capacity. Name the roles it may pass, ideally with an iam:PassedToService condition."
    ),
    resource_types=IDENTITY_POLICY_TYPES,
    check=_check,
)
