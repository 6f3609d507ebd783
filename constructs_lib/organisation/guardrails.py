"""Organisation guardrails for the management (or delegated administrator) account: one service
control policy that leaves buying GPU capacity and changing quotas to the platform's roles, and
a tag policy that allows only the declared team names in the team tag.

Optional: the reference app deploys them only when the governance file has a ``guardrails``
section. Minimal use, in a stack of the management account::

    OrganisationGuardrails(self, "Guardrails", model=model)
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import aws_organizations as organizations
from constructs import Construct

from constructs_lib.backends import BACKENDS, backend_of
from constructs_lib.controllers.capacity import capacity_controller_role_name
from constructs_lib.controllers.reclaim import reclaim_controller_role_name
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.vocabulary import PURCHASE_ACTIONS
from constructs_lib.model import GovernanceModel, Guardrails, account_of, check_exemptions
from constructs_lib.model.capacity import raising_windows
from gpu_governance_runtime.contract import TAG_TEAM as TEAM_TAG

QUOTA_CHANGE_ACTIONS = (
    "batch:CreateQuotaShare",
    "batch:UpdateQuotaShare",
    "batch:DeleteQuotaShare",
    "batch:UpdateSchedulingPolicy",
    "batch:DeleteSchedulingPolicy",
    "batch:CreateJobQueue",
    "batch:UpdateJobQueue",
    "batch:DeleteJobQueue",
    "batch:UpdateServiceEnvironment",
    "batch:DeleteServiceEnvironment",
    "sagemaker:CreateComputeQuota",
    "sagemaker:UpdateComputeQuota",
    "sagemaker:DeleteComputeQuota",
    "sagemaker:CreateClusterSchedulerConfig",
    "sagemaker:UpdateClusterSchedulerConfig",
    "sagemaker:DeleteClusterSchedulerConfig",
)
"""Every IAM action that changes who is guaranteed how much of the shared capacity, or how it is
shared: quota shares, fair-share weights, queues on the shared compute and service environments,
service environment capacity, HyperPod compute quotas and scheduler configs. A new scheduling
policy or service environment changes nothing until a job queue uses it, and that is denied."""

# AWS Organizations quotas on a policy document, in characters.
SCP_MAX_CHARACTERS = 5120
TAG_POLICY_MAX_CHARACTERS = 10_000


def _role_arn(account_id: str, name: str) -> str:
    # "arn:*": the account id already pins the principal; the partition need not be guessed.
    return f"arn:*:iam::{account_id}:role/{name}"


def purchase_exemptions(model: GovernanceModel, guardrails: Guardrails) -> tuple[str, ...]:
    """Principals that may still buy capacity: the platform admins, the capacity controller of
    the capacity account and any extra exemptions. CloudFormation buys nothing, so its role is
    not among them."""
    controller = _role_arn(model.capacity_account.account_id, capacity_controller_role_name(model.organisation))
    return _unique((*model.platform_admins, controller, *guardrails.exempt_principals))


def deployment_role_arn(model: GovernanceModel, guardrails: Guardrails) -> str:
    """The CDK CloudFormation execution role of the capacity account, for the declared bootstrap
    qualifier: it deploys the quotas. A wildcard qualifier would also exempt a role that anyone
    allowed to create roles there names cdk-x-cfn-exec-role-..."""
    account = model.capacity_account
    return _role_arn(
        account.account_id,
        f"cdk-{guardrails.cdk_bootstrap_qualifier}-cfn-exec-role-{account.account_id}-{account.region}",
    )


def quota_change_exemptions(model: GovernanceModel, guardrails: Guardrails) -> tuple[str, ...]:
    """Principals that may still change quota shares, queues, compute quotas and scheduler
    configs: the platform admins, the CDK CloudFormation execution role of the capacity account
    and any extra exemptions."""
    return _unique((*model.platform_admins, deployment_role_arn(model, guardrails), *guardrails.exempt_principals))


QUOTA_RAISES = {
    (kind, name): actions for name, backend in BACKENDS.items() for kind, actions in backend.quota_raises.items()
}
"""What the capacity controller does to quotas, by what a window feeds and on which backend: it
raises the owner's quota share and the pool's service environment (Batch) or the owner's compute
quota (HyperPod EKS) while the window's training plan is active and lowers them back
(capacity/shares.py). Its own IAM names those resources."""


def quota_raise_actions(model: GovernanceModel) -> tuple[str, ...]:
    """The quota and queue updates the capacity controller makes for this model's windows (none
    when no window feeds a quota it raises or a queue it reorders)."""
    raised = {
        action
        for w in raising_windows(model)
        for action in backend_of(model.pool(w.feeds.pool)).quota_raises[w.feeds.kind]
    }
    # What a window's feed reorders (``queue_reorders`` of its kind: the window's block compute
    # environment goes ahead of the on-demand one while a block is active, capacity/rotation.py).
    reordered = (action for w in model.capacity_windows for action in w.feeds.queue_reorders)
    return tuple(
        dict.fromkeys(
            (*(action for actions in QUOTA_RAISES.values() for action in actions if action in raised), *reordered)
        )
    )


def hour_limit_switch_actions(model: GovernanceModel) -> tuple[str, ...]:
    """The updates the reclaim controller makes to stop a team's admissions at its GPU-hour limit
    and let them in next period (reclaim/gpu_hours.py): none when no team with a limit has a
    quota in a pool whose backend it switches."""
    return tuple(
        dict.fromkeys(
            action
            for team in model.teams
            if team.gpu_hour_limit
            for pool in team.quotas
            for action in backend_of(model.pool(pool)).gpu_hour_limit_switch
        )
    )


def _unique(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def quota_resources(model: GovernanceModel) -> list[str]:
    """The shared capacity's queues, quotas and clusters live in the capacity account; every
    quota action names such a resource, so the denial leaves other accounts' own Batch and
    SageMaker resources alone."""
    account = model.capacity_account.account_id
    return [f"arn:*:batch:*:{account}:*", f"arn:*:sagemaker:*:{account}:*"]


def service_control_policy(model: GovernanceModel, guardrails: Guardrails) -> dict[str, Any]:
    """One SCP (an account or OU may hold at most five). Each denial comes twice: once unless the
    principal is one of the exempt ARNs, once unless it belongs to one of their accounts, so an
    exemption holds only for that role in that account."""
    quota_exempt = quota_change_exemptions(model, guardrails)
    groups = [
        ("DenyGpuCapacityPurchase", PURCHASE_ACTIONS, "*", purchase_exemptions(model, guardrails)),
        ("DenyGpuQuotaChanges", QUOTA_CHANGE_ACTIONS, quota_resources(model), quota_exempt),
    ]
    # The controllers are exempt from the quota updates they need alone, in one statement (the SCP's
    # 5,120 characters): the capacity controller's raises for its windows, the reclaim controller's
    # admission switches at GPU-hour limits. Each role's own IAM names the quotas it may change.
    account = model.capacity_account.account_id
    needs = {
        capacity_controller_role_name(model.organisation): quota_raise_actions(model),
        reclaim_controller_role_name(model.organisation): hour_limit_switch_actions(model),
    }
    updates = tuple(dict.fromkeys(a for actions in needs.values() for a in actions))
    if updates:
        controllers = tuple(_role_arn(account, role) for role, actions in needs.items() if actions)
        groups[1] = (
            "DenyGpuQuotaChanges",
            tuple(a for a in QUOTA_CHANGE_ACTIONS if a not in updates),
            quota_resources(model),
            quota_exempt,
        )
        groups.append(("DenyGpuQuotaRaises", updates, quota_resources(model), _unique((*quota_exempt, *controllers))))
    statements = []
    for sid, actions, resources, exempt in groups:
        accounts = sorted({account_of(arn) for arn in exempt})
        for suffix, condition in (
            ("", {"ArnNotLike": {"aws:PrincipalArn": list(exempt)}}),
            ("OutsidePlatformAccounts", {"StringNotEquals": {"aws:PrincipalAccount": accounts}}),
        ):
            statements.append(
                {
                    "Sid": sid + suffix,
                    "Effect": "Deny",
                    "Action": list(actions),
                    "Resource": resources,
                    "Condition": condition,
                }
            )
    return {"Version": "2012-10-17", "Statement": statements}


def team_tag_policy(model: GovernanceModel, guardrails: Guardrails) -> dict[str, Any]:
    """Tag policy: the team tag keeps its exact spelling and holds a declared team name. Reported
    as non-compliant everywhere, refused only on ``guardrails.tag_enforced_for``."""
    rule: dict[str, Any] = {
        "tag_key": {"@@assign": TEAM_TAG},
        "tag_value": {"@@assign": [team.name for team in model.teams]},
    }
    if guardrails.tag_enforced_for:
        rule["enforced_for"] = {"@@assign": list(guardrails.tag_enforced_for)}
    # The policy's own key is the lower-case tag key (TEAM_TAG already is).
    return {"tags": {TEAM_TAG.lower(): rule}}


def document_size(document: dict[str, Any]) -> int:
    """Characters Organizations counts: the document as JSON without insignificant whitespace."""
    return len(json.dumps(document, separators=(",", ":")))


def declared_guardrails(model: GovernanceModel, guardrails: Guardrails | None = None) -> Guardrails:
    """``guardrails`` if given, else the model's section; an error when neither is declared."""
    found = guardrails or model.guardrails
    if found is None:
        raise GovernanceError.single(
            "guardrails",
            "missing",
            None,
            "a guardrails section (management_account, target_ids) or the guardrails argument",
        )
    return found


def _size_problem(path: str, kind: str, document: dict[str, Any], limit: int, remedy: str) -> list[Problem]:
    size = document_size(document)
    if size <= limit:
        return []
    return [
        Problem(
            path=path,
            wrong=f"{kind} document too long for AWS Organizations (characters)",
            value=size,
            allowed=f"at most {limit} characters; {remedy}",
        )
    ]


def guardrail_size_problems(model: GovernanceModel, guardrails: Guardrails) -> list[Problem]:
    """The AWS Organizations size quotas of both documents (also estimated by `validate`)."""
    return _size_problem(
        "guardrails",
        "service control policy",
        service_control_policy(model, guardrails),
        SCP_MAX_CHARACTERS,
        "name fewer platform_admins / exempt_principals (one wildcard ARN can cover several roles)",
    ) + _size_problem(
        "teams",
        "tag policy",
        team_tag_policy(model, guardrails),
        TAG_POLICY_MAX_CHARACTERS,
        "declare fewer teams or shorter team names",
    )


class OrganisationGuardrails(Construct):
    """The service control policy and the team tag policy, attached to ``guardrails.target_ids``
    (default: the model's ``guardrails`` section). Exposes ``service_control_policy`` and
    ``tag_policy`` (L1 ``CfnPolicy``). Raises :class:`GovernanceError` when nothing is declared,
    an exemption lies outside the platform's accounts, or a document would exceed its AWS
    Organizations size quota."""

    def __init__(
        self, scope: Construct, id: str, *, model: GovernanceModel, guardrails: Guardrails | None = None
    ) -> None:
        super().__init__(scope, id)
        guardrails = declared_guardrails(model, guardrails)
        scp = service_control_policy(model, guardrails)
        tags = team_tag_policy(model, guardrails)
        problems = check_exemptions(model, guardrails) + guardrail_size_problems(model, guardrails)
        if problems:
            raise GovernanceError(problems)
        targets = list(guardrails.target_ids)
        self.service_control_policy = organizations.CfnPolicy(
            self,
            "CapacityServiceControlPolicy",
            name=f"{model.organisation}-gpu-capacity-guardrails",
            type="SERVICE_CONTROL_POLICY",
            content=scp,
            target_ids=targets,
            description="Only the GPU platform's roles may buy capacity or change quota shares, queues, compute quotas and scheduler configs",
        )
        self.tag_policy = organizations.CfnPolicy(
            self,
            "TeamTagPolicy",
            name=f"{model.organisation}-gpu-team-tag",
            type="TAG_POLICY",
            content=tags,
            target_ids=targets,
            description=f"{TEAM_TAG} holds one of the declared GPU teams",
        )
