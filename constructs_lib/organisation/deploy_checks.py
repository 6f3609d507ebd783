"""What CloudFormation, IAM and KMS refuse only at deployment, found in a synthesized cloud
assembly instead (docs/delivery.md, "What only a deployment would refuse").

Each check reads the templates as CloudFormation will receive them and returns
:class:`Problem` lines naming the stack, the resource and what the service would say. The
reference app runs them after synthesis (exit 1); any app can call :func:`check_deployable` on
its own ``cdk.out``. No aws_cdk import.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from constructs_lib.core.errors import Problem

# A principal written as a literal IAM role or user ARN: IAM ("Invalid principal in policy") and
# KMS (MalformedPolicyDocumentException) refuse it unless it exists when the policy is written,
# and keep it as the principal's unique id, so a re-created role silently loses access:
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html#principal-roles
# https://docs.aws.amazon.com/kms/latest/APIReference/API_PutKeyPolicy.html
_NAMED_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/")
_POLICIES = {  # resource type -> its resource-based policy property
    "AWS::IAM::Role": "AssumeRolePolicyDocument",
    "AWS::KMS::Key": "KeyPolicy",
    "AWS::S3::BucketPolicy": "PolicyDocument",
    "AWS::ECR::Repository": "RepositoryPolicyText",
}
# Names unique per account (IAM: in every region) or per account and region. The value is the
# name property; types with generated names are left out.
_GLOBAL_IN_ACCOUNT = {"AWS::IAM::Role": "RoleName", "AWS::IAM::ManagedPolicy": "ManagedPolicyName"}
_REGIONAL = {
    "AWS::KMS::Alias": "AliasName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::SSM::Parameter": "Name",
    "AWS::Batch::JobQueue": "JobQueueName",
    "AWS::Batch::SchedulingPolicy": "Name",
    "AWS::Batch::ServiceEnvironment": "ServiceEnvironmentName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::SageMaker::ComputeQuota": "Name",
}
_BUCKET_NAME = "BucketName"  # S3 bucket names are unique across all of AWS


def check_deployable(outdir: str | Path) -> list[Problem]:
    """Every check below on the stacks of the cloud assembly in ``outdir``."""
    stacks = list(read_stacks(outdir))
    problems: list[Problem] = []
    for stack in stacks:
        problems += named_principals(stack) + key_lockouts(stack) + retained_fixed_names(stack)
    return problems + duplicate_names(stacks) + unresolvable_imports(stacks)


class StackTemplate:
    """One stack of an assembly: its name, account, region and template."""

    def __init__(self, name: str, account: str, region: str, template: dict[str, Any]) -> None:
        self.name, self.account, self.region, self.template = name, account, region, template

    def resources(self) -> Iterator[tuple[str, dict[str, Any]]]:
        return iter(self.template.get("Resources", {}).items())


def read_stacks(outdir: str | Path) -> Iterator[StackTemplate]:
    """The stacks of ``outdir`` and of its nested assemblies (Stages), each in its environment."""
    outdir = Path(outdir)
    manifest = json.loads((outdir / "manifest.json").read_text())
    for name, artifact in manifest.get("artifacts", {}).items():
        if artifact.get("type") == "cdk:cloud-assembly":
            yield from read_stacks(outdir / artifact["properties"]["directoryName"])
        elif artifact.get("type") == "aws:cloudformation:stack":
            account, region = artifact["environment"].removeprefix("aws://").split("/")
            template = json.loads((outdir / artifact["properties"]["templateFile"]).read_text())
            yield StackTemplate(artifact.get("displayName", name), account, region, template)


def _statements(document: Any) -> list[dict]:
    statements = document.get("Statement", []) if isinstance(document, dict) else []
    return statements if isinstance(statements, list) else [statements]


def _aws_principals(statement: dict) -> list[Any]:
    principal = statement.get("Principal")
    if not isinstance(principal, dict):
        return [principal] if principal is not None else []
    values = principal.get("AWS", [])
    return values if isinstance(values, list) else [values]


def named_principals(stack: StackTemplate) -> list[Problem]:
    """A role or user written into a resource policy as its literal ARN: refused while it does
    not exist, lost when it is re-created. Name its account and match ``aws:PrincipalArn``
    (constructs_lib.tenancy.team.principals_named) or reference a role the stack creates."""
    problems = []
    for logical_id, resource in stack.resources():
        document = resource.get("Properties", {}).get(_POLICIES.get(resource.get("Type"), ""))
        for statement in _statements(document):
            for value in _aws_principals(statement):
                if isinstance(value, str) and _NAMED_PRINCIPAL.match(value):
                    problems.append(
                        Problem(
                            path=f"{stack.name}.{logical_id}",
                            wrong="names a principal that must exist at deployment and is lost when re-created",
                            value=value,
                            allowed="its account as principal and the ARN in an aws:PrincipalArn condition",
                        )
                    )
    return problems


def _allows_put_key_policy(statement: dict) -> bool:
    actions = statement.get("Action", [])
    actions = actions if isinstance(actions, list) else [actions]
    return statement.get("Effect") == "Allow" and any(
        isinstance(a, str) and fnmatch.fnmatchcase("kms:putkeypolicy", a.lower()) for a in actions
    )


def _is_deployer(value: Any, stack: StackTemplate) -> bool:
    """The principal that creates the key: the CDK bootstrap's CloudFormation execution role, or
    the key's account unconditioned (which lets that role's IAM policies decide)."""
    text = json.dumps(value)
    if isinstance(value, str):
        return (
            "cfn-exec-role" in value
            or value == stack.account
            or re.fullmatch(rf"arn:aws[a-z-]*:iam::{stack.account}:root", value) is not None
        )
    # Fn::Join / Fn::Sub of the partition (and the account) with ':root', or of the bootstrap role.
    return "cfn-exec-role" in text or (
        text.endswith(':root"]]}') and (f":iam::{stack.account}:root" in text or "AWS::AccountId" in text)
    )


def key_lockouts(stack: StackTemplate) -> list[Problem]:
    """KMS refuses a key policy that would not let the principal creating it change it again (the
    lockout safety check of CreateKey and PutKeyPolicy):
    https://docs.aws.amazon.com/kms/latest/APIReference/API_CreateKey.html"""
    problems = []
    for logical_id, resource in stack.resources():
        if resource.get("Type") != "AWS::KMS::Key":
            continue
        statements = _statements(resource.get("Properties", {}).get("KeyPolicy"))
        if resource.get("Properties", {}).get("BypassPolicyLockoutSafetyCheck") is True:
            continue
        if not any(
            _allows_put_key_policy(s)
            and not s.get("Condition")
            and any(_is_deployer(p, stack) for p in _aws_principals(s))
            for s in statements
        ):
            problems.append(
                Problem(
                    path=f"{stack.name}.{logical_id}",
                    wrong="key policy would lock out the deploying role (KMS refuses it)",
                    value=[s.get("Sid", "") for s in statements],
                    allowed="an unconditioned kms:PutKeyPolicy for the CDK execution role or the account",
                )
            )
    return problems


def retained_fixed_names(stack: StackTemplate) -> list[Problem]:
    """A resource that outlives its stack (DeletionPolicy Retain) under a fixed name: re-creating
    the stack, after removing a team or a failed first deployment, fails with "already exists"."""
    problems = []
    for logical_id, resource in stack.resources():
        if resource.get("DeletionPolicy") not in ("Retain", "RetainExceptOnCreate"):
            continue
        kind = resource.get("Type")
        name_property = (
            _GLOBAL_IN_ACCOUNT.get(kind) or _REGIONAL.get(kind) or (_BUCKET_NAME if kind == "AWS::S3::Bucket" else None)
        )
        name = resource.get("Properties", {}).get(name_property) if name_property else None
        if name is not None:
            problems.append(
                Problem(
                    path=f"{stack.name}.{logical_id}",
                    wrong=f"retained {kind} with a fixed name collides when the stack is created again",
                    value=name,
                    allowed="a generated name, or a removal policy that deletes it with the stack",
                )
            )
    return problems


def _names(stacks: Iterable[StackTemplate]) -> Iterator[tuple[tuple[str, ...], str]]:
    for stack in stacks:
        for logical_id, resource in stack.resources():
            kind, props = resource.get("Type"), resource.get("Properties", {})
            where = f"{stack.name}.{logical_id}"
            if kind in _GLOBAL_IN_ACCOUNT and isinstance(props.get(_GLOBAL_IN_ACCOUNT[kind]), str):
                yield (
                    (
                        stack.account,
                        kind,
                        props.get("Path", "/") if kind == "AWS::IAM::ManagedPolicy" else "",
                        props[_GLOBAL_IN_ACCOUNT[kind]].lower(),
                    ),
                    where,
                )
            elif kind in _REGIONAL and isinstance(props.get(_REGIONAL[kind]), str):
                yield (stack.account, stack.region, kind, props[_REGIONAL[kind]]), where
            elif kind == "AWS::S3::Bucket" and isinstance(props.get(_BUCKET_NAME), str):
                yield ("s3", props[_BUCKET_NAME]), where


def duplicate_names(stacks: list[StackTemplate]) -> list[Problem]:
    """Two resources of the assembly under one name where AWS wants it unique (IAM role and policy
    names per account, case-insensitively; most others per account and region; S3 buckets
    everywhere): the second to deploy fails with "already exists"."""
    first: dict[tuple[str, ...], str] = {}
    problems = []
    for key, where in _names(stacks):
        if key in first:
            problems.append(
                Problem(
                    path=where,
                    wrong=f"name already used by {first[key]}",
                    value=key[-1],
                    allowed="a name unique where AWS requires it",
                )
            )
        else:
            first[key] = where
    return problems


def _imports(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Fn::ImportValue":
                yield inner
            else:
                yield from _imports(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _imports(inner)


def unresolvable_imports(stacks: list[StackTemplate]) -> list[Problem]:
    """Fn::ImportValue resolves only exports of the same account and region; CloudFormation fails
    the stack ("No export named ...") otherwise, and nothing across accounts can be imported."""
    exports = {
        (s.account, s.region, o["Export"]["Name"])
        for s in stacks
        for o in s.template.get("Outputs", {}).values()
        if isinstance(o.get("Export", {}).get("Name"), str)
    }
    elsewhere = {name: (account, region) for account, region, name in exports}
    problems = []
    for stack in stacks:
        for name in _imports(stack.template.get("Resources", {})):
            if isinstance(name, str) and (stack.account, stack.region, name) not in exports:
                where = elsewhere.get(name)
                problems.append(
                    Problem(
                        path=stack.name,
                        wrong="imports a value no stack of its account and region exports"
                        + (f" (exported in {where[0]}/{where[1]})" if where else ""),
                        value=name,
                        allowed="an export of the same account and region, or the value itself (a deterministic name)",
                    )
                )
    return problems
