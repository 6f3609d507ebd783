from __future__ import annotations

import re

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from ..cfn import IDENTITY_POLICY_TYPES, StackIndex, Statement, identity_policy
from ..rule import GovernanceRule, Result

_SUBMIT_SERVICE_JOB = "batch:SubmitServiceJob"
_SUBMIT_JOB = "batch:SubmitJob"
_JOB_CONTROL = ("batch:TerminateServiceJob", "batch:UpdateServiceJob", "batch:TerminateJob", "batch:CancelJob")
# A quota-share ARN that names one share: .../job-queue/QUEUE/quota-share/SHARE, no wildcard in SHARE.
_ONE_QUOTA_SHARE = re.compile(r":job-queue/[^*/]+/quota-share/[^*/]+$")
_ANY_QUEUE = re.compile(r"^\*$|:job-queue/\*$|:\*$")


def _submit_service_job_restricted(statement: Statement) -> bool:
    # Batch has no condition key for the quota share: naming the share's ARN as the optional
    # resource of SubmitServiceJob is the restriction, and a queue wildcard would undo it.
    return any(_ONE_QUOTA_SHARE.search(r) for r in statement.resources) and not any(_ANY_QUEUE.search(r) for r in statement.resources)


def _submit_job_restricted(statement: Statement) -> bool:
    return "batch:shareidentifier" in statement.condition_keys()


def _control_restricted(statement: Statement) -> bool:
    tag_scoped = any(key.startswith("aws:resourcetag/") for key in statement.condition_keys())
    return tag_scoped or not any("*" in r for r in statement.resources)


_RESTRICTIONS = (
    ((_SUBMIT_SERVICE_JOB,), _submit_service_job_restricted),
    ((_SUBMIT_JOB,), _submit_job_restricted),
    (_JOB_CONTROL, _control_restricted),
)


def _check(node: CfnResource, index: StackIndex) -> Result:
    policy = identity_policy(node)
    findings: list[str] = []
    applicable = False
    for actions, restricted in _RESTRICTIONS:
        for action in actions:
            statements = [s for s in policy.statements if s.allows(action)]
            applicable = applicable or bool(statements)
            if any(not restricted(s) for s in statements):
                findings.append(f"Action::{action}")
    return findings if applicable else NagRuleCompliance.NOT_APPLICABLE


RULE = GovernanceRule(
    id="JobControlWithoutShare",
    info="The IAM policy lets submit to or stop jobs in a Batch queue without restriction to one share or team.",
    explanation=(
        "A principal that can submit to any share, or terminate any job, can spend another team's "
        "guaranteed capacity or stop its work. Restrict batch:SubmitServiceJob to a quota-share ARN "
        "(job-queue/QUEUE/quota-share/SHARE), batch:SubmitJob with the batch:ShareIdentifier condition "
        "key, and terminate, cancel and update to named jobs or an aws:ResourceTag condition."
    ),
    resource_types=IDENTITY_POLICY_TYPES,
    check=_check,
)
