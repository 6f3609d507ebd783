"""The pack on someone else's stack: nothing GPU in it, everything at CDK's defaults, no finding
(the rules govern teams' keys, GPU queues and capacity purchases, not every key or role); an
AWS-managed policy that can buy capacity is caught wherever it is attached."""

from __future__ import annotations

import json

import pytest
from aws_cdk import (
    App,
    Stack,
    Validations,
    aws_dynamodb as dynamodb,
    aws_iam as iam,
    aws_kms as kms,
    aws_lambda as lambda_,
    aws_s3 as s3,
    aws_sns as sns,
    aws_sqs as sqs,
)

from constructs_lib import GpuGovernanceChecks


def plain_stack(app: App) -> Stack:
    stack = Stack(app, "Plain")
    key = kms.Key(stack, "Key")  # CDK's default: the account root may use it, no rotation
    s3.Bucket(stack, "Bucket", encryption_key=key)
    function = lambda_.Function(
        stack,
        "Function",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
    )
    key.grant_encrypt_decrypt(function)
    sqs.Queue(stack, "Queue")
    sns.Topic(stack, "Topic")
    dynamodb.Table(stack, "Table", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    iam.Role(
        stack,
        "Auditor",
        assumed_by=iam.AccountRootPrincipal(),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("ReadOnlyAccess")],
    )
    return stack


def findings(tmp_path, build) -> dict[str, set[str]]:
    """Synthesize with the pack; the GpuGovernance findings by construct path (none: synthesis passes)."""
    app = App(outdir=str(tmp_path))
    build(app)
    Validations.of(app).add_plugins(GpuGovernanceChecks(app))
    try:
        app.synth()
    except RuntimeError as error:
        assert "ValidationFailed" in str(error)
    report = tmp_path / "validation-report.json"
    if not report.exists():
        return {}
    found: dict[str, set[str]] = {}
    for plugin in json.loads(report.read_text())["pluginReports"]:
        for violation in plugin["violations"]:
            for construct in violation["violatingConstructs"]:
                found.setdefault(construct["constructPath"], set()).add(violation["ruleName"])
    return found


def test_a_plain_stack_with_defaults_has_no_finding(tmp_path):
    assert findings(tmp_path, plain_stack) == {}


@pytest.mark.parametrize("name", ["AdministratorAccess", "PowerUserAccess"])
def test_a_role_with_an_aws_managed_policy_that_buys_capacity_is_a_finding(name, tmp_path):
    def build(app):
        stack = plain_stack(app)
        iam.Role(
            stack,
            "Operator",
            assumed_by=iam.AccountRootPrincipal(),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name)],
        )

    assert findings(tmp_path, build) == {
        "Plain/Operator/Resource": {f"GpuGovernance-CapacityPurchaseGrant[ManagedPolicy::{name}]"}
    }
