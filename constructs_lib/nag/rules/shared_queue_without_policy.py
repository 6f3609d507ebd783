from __future__ import annotations

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from ..cfn import StackIndex, governance_metadata, properties
from ..rule import GovernanceRule, Result


def _check(node: CfnResource, index: StackIndex) -> Result:
    if governance_metadata(node).get("team"):
        return NagRuleCompliance.NOT_APPLICABLE  # declared as one team's own queue
    return (
        NagRuleCompliance.COMPLIANT if properties(node).get("SchedulingPolicyArn") else NagRuleCompliance.NON_COMPLIANT
    )


RULE = GovernanceRule(
    id="SharedQueueWithoutPolicy",
    info="The Batch job queue has no scheduling policy (fair-share or quota-share).",
    explanation=(
        "Without a scheduling policy a job queue runs first in, first out: one team's burst of "
        "submissions holds every GPU until it drains, and no share, weight or quota applies. Attach a "
        "fair-share or quota-share scheduling policy (the type cannot be changed later), or record "
        'GpuGovernance metadata {"team": NAME} on a queue that only one team uses.'
    ),
    resource_types=frozenset({"AWS::Batch::JobQueue"}),
    check=_check,
)
