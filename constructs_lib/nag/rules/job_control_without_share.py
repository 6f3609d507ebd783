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
_TAG_RESOURCE = "batch:TagResource"
# A wildcard that reaches jobs or service jobs of other principals.
_ANY_JOB = re.compile(r"^\*$|:\*$|:(service-)?job/.*\*")


def _submit_service_job_restricted(statement: Statement) -> bool:
    # Batch has no condition key for the quota share: naming the share's ARN as the optional
    # resource of SubmitServiceJob is the restriction, and a queue wildcard would undo it.
    return any(_ONE_QUOTA_SHARE.search(r) for r in statement.resources) and not any(
        _ANY_QUEUE.search(r) for r in statement.resources
    )


def _submit_job_restricted(statement: Statement) -> bool:
    # SubmitJob needs the queue and the job authorised too: a statement on job definitions only
    # decides which definitions, not which share.
    only_definitions = bool(statement.resources) and all(":job-definition/" in r for r in statement.resources)
    return only_definitions or "batch:shareidentifier" in statement.condition_keys()


def _control_restricted(statement: Statement) -> bool:
    return _tag_scoped(statement) or not any("*" in r for r in statement.resources)


def _tag_scoped(statement: Statement) -> bool:
    return any(key.startswith("aws:resourcetag/") for key in statement.condition_keys())


def _values(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def _owner_pinned(statement: Statement) -> bool:
    """The grant sets one tag key to one value (``StringEquals aws:RequestTag/KEY = v``) and only
    where the resource's KEY is absent or already v (``StringEqualsIfExists aws:ResourceTag/KEY =
    v``): it takes no job from another owner and names no other. Batch authorises the tags of
    SubmitJob / SubmitServiceJob as batch:TagResource inside that call, and no page says how it
    builds that request's context [aws: batch-iam.tag-on-create-context]: a grant that needs a
    batch:* key there, or the new job's aws:ResourceTag absent (``Null = true``; IAM puts the
    requested tags there "in requests that create a resource with an attached tag"), may refuse
    every tagged submission, and is not accepted as the pin."""
    lowered = lambda operator: {  # noqa: E731
        key.lower(): _values(value) for key, value in statement.conditions.get(operator, {}).items()
    }
    equals, if_exists = lowered("StringEquals"), lowered("StringEqualsIfExists")
    return any(
        key.startswith("aws:requesttag/")
        and len(value) == 1
        and if_exists.get("aws:resourcetag/" + key.split("/", 1)[1]) == value
        for key, value in equals.items()
    )


def _retag_findings(statements: tuple[Statement, ...]) -> list[str]:
    """Tagging jobs after creation turns every aws:ResourceTag scope into a formality: tag the
    other team's job as your own, then stop it. Flagged where control is tag-scoped in the
    same policy, or where the tag grant itself relies on aws:RequestTag (a team-tag grant)."""
    control_by_tag = any(_tag_scoped(s) for s in statements if any(s.allows(a) for a in _JOB_CONTROL))
    for statement in statements:
        if not statement.allows(_TAG_RESOURCE) or not any(_ANY_JOB.search(r) for r in statement.resources):
            continue
        team_tag_grant = any(key.startswith("aws:requesttag/") for key in statement.condition_keys())
        if (control_by_tag or team_tag_grant) and not _owner_pinned(statement):
            return [f"Action::{_TAG_RESOURCE}"]
    return []


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
    retag = _retag_findings(policy.statements)
    applicable = applicable or bool(retag) or any(s.allows(_TAG_RESOURCE) for s in policy.statements)
    return findings + retag if applicable else NagRuleCompliance.NOT_APPLICABLE


RULE = GovernanceRule(
    id="JobControlWithoutShare",
    info="The IAM policy lets submit to, re-tag or stop jobs in a Batch queue without restriction to one share or team.",
    explanation=(
        "A principal that can submit to any share, or terminate any job, can spend another team's "
        "guaranteed capacity or stop its work. Restrict batch:SubmitServiceJob to a quota-share ARN "
        "(job-queue/QUEUE/quota-share/SHARE), batch:SubmitJob with the batch:ShareIdentifier condition "
        "key, and terminate, cancel and update to named jobs or an aws:ResourceTag condition. An "
        "aws:ResourceTag scope holds only if the tag cannot be changed: allow batch:TagResource on jobs "
        "only with the principal's own tag value (aws:RequestTag/KEY = v) on a job whose KEY is absent or "
        "already v (StringEqualsIfExists aws:ResourceTag/KEY = v), deny removing it, and have every "
        "submission to the queue set it."
    ),
    resource_types=IDENTITY_POLICY_TYPES,
    check=_check,
)
