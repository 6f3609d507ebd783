from __future__ import annotations

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from ...core.vocabulary import UNLIMITED_BORROW_LIMIT
from ...model import MAX_BORROW_LIMIT
from ..cfn import StackIndex, cfn_type, properties
from ..rule import GovernanceRule, Result

# HyperPod's ceiling (percent of the team's quota) is the only way to say "no limit" there;
# its default when BorrowLimit is left out is 50.
_HYPERPOD_NO_LIMIT = MAX_BORROW_LIMIT


def _check(node: CfnResource, index: StackIndex) -> Result:
    props = properties(node)
    if cfn_type(node) == "AWS::Batch::QuotaShare":
        sharing = props.get("ResourceSharingConfiguration") or {}
        if sharing.get("Strategy") != "LEND_AND_BORROW":
            return NagRuleCompliance.NOT_APPLICABLE
        limit = sharing.get("BorrowLimit")
        return (
            NagRuleCompliance.NON_COMPLIANT if limit in (None, UNLIMITED_BORROW_LIMIT) else NagRuleCompliance.COMPLIANT
        )
    sharing = (props.get("ComputeQuotaConfig") or {}).get("ResourceSharingConfig") or {}
    if sharing.get("Strategy", "LendAndBorrow") != "LendAndBorrow":  # SageMaker's default strategy
        return NagRuleCompliance.NOT_APPLICABLE
    limit = sharing.get("BorrowLimit")
    if isinstance(limit, int) and limit >= _HYPERPOD_NO_LIMIT and not sharing.get("AbsoluteBorrowLimits"):
        return NagRuleCompliance.NON_COMPLIANT
    return NagRuleCompliance.COMPLIANT


RULE = GovernanceRule(
    id="BorrowWithoutLimit",
    info="The quota share or compute quota borrows idle capacity without a limit.",
    explanation=(
        "A team that may borrow without limit can take a whole pool whenever others are idle; every "
        "lender then waits for reclaim to preempt the borrower's jobs before its own start. Set a "
        "BorrowLimit (Batch: percent of the share's capacity, not -1; HyperPod: below "
        f"{_HYPERPOD_NO_LIMIT} percent or AbsoluteBorrowLimits)."
    ),
    resource_types=frozenset({"AWS::Batch::QuotaShare", "AWS::SageMaker::ComputeQuota"}),
    check=_check,
)
