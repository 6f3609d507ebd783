"""Hand-written L1 resources, good and bad, shared by the rule tests and the bad-app test."""

from __future__ import annotations

from aws_cdk import (
    CfnResource,
    CfnTag,
    Stack,
    aws_batch as batch,
    aws_eks as eks,
    aws_iam as iam,
    aws_kms as kms,
    aws_lambda as lambda_,
)

from constructs_lib.core.vocabulary import GOVERNANCE_METADATA
from gpu_governance_runtime.contract import TAG_TEAM

ACCOUNT = "111111111111"
QUEUE = f"arn:aws:batch:us-east-1:{ACCOUNT}:job-queue/gpu"
ALLOW = "Allow"


def document(*statements: dict) -> dict:
    return {"Version": "2012-10-17", "Statement": [{"Effect": ALLOW, **s} for s in statements]}


def quota_share(stack: Stack, id: str, sharing: dict, preset: str | None = None) -> batch.CfnQuotaShare:
    share = batch.CfnQuotaShare(
        stack,
        id,
        quota_share_name=id,
        job_queue=QUEUE,
        capacity_limits=[{"capacityUnit": "ml.p5.48xlarge", "maxCapacity": 2}],
        resource_sharing_configuration=sharing,
        preemption_configuration={"inSharePreemption": "DISABLED"},
    )
    if preset:
        share.cfn_options.metadata = {GOVERNANCE_METADATA: {"team": id, "preset": preset}}
    return share


def compute_quota(stack: Stack, id: str, sharing: dict | None, preset: str | None = None) -> CfnResource:
    config = {
        "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Count": 2}],
        "PreemptTeamTasks": "LowerPriority",
    }
    if sharing is not None:
        config["ResourceSharingConfig"] = sharing
    quota = CfnResource(
        stack,
        id,
        type="AWS::SageMaker::ComputeQuota",
        properties={
            "Name": id.lower(),
            "ClusterArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:cluster/abcdefghijkl",
            "ComputeQuotaTarget": {"TeamName": id.lower(), "FairShareWeight": 10},
            "ComputeQuotaConfig": config,
        },
    )
    if preset:
        quota.cfn_options.metadata = {GOVERNANCE_METADATA: {"team": id.lower(), "preset": preset}}
    return quota


def job_queue(stack: Stack, id: str, scheduling_policy_arn: str | None) -> batch.CfnJobQueue:
    return batch.CfnJobQueue(
        stack,
        id,
        priority=1,
        scheduling_policy_arn=scheduling_policy_arn,
        compute_environment_order=[
            {"order": 1, "computeEnvironment": f"arn:aws:batch:us-east-1:{ACCOUNT}:compute-environment/ce"}
        ],
    )


def role(stack: Stack, id: str, *statements: dict) -> iam.CfnRole:
    return iam.CfnRole(
        stack,
        id,
        assume_role_policy_document=document(
            {"Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ),
        policies=[{"policyName": "inline", "policyDocument": document(*statements)}] if statements else None,
    )


def policy(stack: Stack, id: str, roles: list, *statements: dict, users: list | None = None) -> iam.CfnPolicy:
    return iam.CfnPolicy(
        stack, id, policy_name=id, policy_document=document(*statements), roles=roles or None, users=users
    )


def key(
    stack: Stack,
    id: str,
    *statements: dict,
    rotation: bool | None = True,
    key_spec: str | None = None,
    team: str | None = "a",
) -> kms.CfnKey:
    """A team's data key (tagged with the team, as the constructs tag theirs), or with ``team=None`` any other key."""
    return kms.CfnKey(
        stack,
        id,
        enable_key_rotation=rotation,
        key_spec=key_spec,
        key_policy={
            "Version": "2012-10-17",
            "Statement": [{"Effect": ALLOW, "Resource": "*", **s} for s in statements],
        },
        tags=[CfnTag(key=TAG_TEAM, value=team)] if team else None,
    )


def access_entry(
    stack: Stack,
    id: str,
    *,
    policies: list[tuple[str, str]] = (),
    groups: list[str] | None = None,
    type: str | None = None,
) -> eks.CfnAccessEntry:
    return eks.CfnAccessEntry(
        stack,
        id,
        cluster_name="gpu",
        principal_arn=f"arn:aws:iam::{ACCOUNT}:role/{id}",
        type=type,
        kubernetes_groups=groups,
        access_policies=[
            {
                "policyArn": f"arn:aws:eks::aws:cluster-access-policy/{name}",
                "accessScope": {"type": scope, **({"namespaces": ["hyperpod-ns-a"]} if scope == "namespace" else {})},
            }
            for name, scope in policies
        ]
        or None,
    )


def function(
    stack: Stack, id: str, role_arn: str, *, variables: dict | None, concurrency: int | None
) -> lambda_.CfnFunction:
    return lambda_.CfnFunction(
        stack,
        id,
        role=role_arn,
        runtime="python3.12",
        handler="index.handler",
        code={"zipFile": "def handler(event, context):\n    return None\n"},
        environment={"variables": variables} if variables is not None else None,
        reserved_concurrent_executions=concurrency,
    )
