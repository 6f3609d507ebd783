"""AWS services that act on the reference organisation's keys and buckets do so only for this
account's own resources (no confused deputy), and the access-log bucket takes no ACLs."""

from __future__ import annotations

import json

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Template

from constructs_lib.model.loader import load_model
from tests.foundation.org import synthesize_reference


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> list[tuple[Stack, dict]]:
    built = synthesize_reference(load_model(), tmp_path_factory.mktemp("cdk.out"))
    return [(s, Template.from_stack(s).to_json()) for s in built]


def resources(template: dict, kind: str) -> dict[str, dict]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == kind}


def service_statements(stacks) -> list[tuple[Stack, str, dict]]:
    return [
        (stack, name, statement)
        for stack, template in stacks
        for name, key in resources(template, "AWS::KMS::Key").items()
        for statement in key["Properties"]["KeyPolicy"]["Statement"]
        if "Service" in statement["Principal"]
    ]


def test_every_service_principal_on_a_key_is_pinned_to_the_account(stacks) -> None:
    statements = service_statements(stacks)
    services = {s["Principal"]["Service"] for _, _, s in statements}
    assert {"events.amazonaws.com", "cloudwatch.amazonaws.com", "logs.us-east-1.amazonaws.com"} <= services
    for stack, name, statement in statements:
        assert statement["Condition"]["StringEquals"]["aws:SourceAccount"] == stack.account, (name, statement)


def test_logs_may_use_a_key_only_for_this_accounts_log_groups_in_its_region(stacks) -> None:
    logs = [(stack, s) for stack, _, s in service_statements(stacks) if s["Principal"]["Service"].startswith("logs.")]
    assert logs
    for stack, statement in logs:
        context = json.dumps(statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"])
        assert f":logs:{stack.region}:{stack.account}:log-group:*" in context


def test_no_bucket_uses_acls_and_log_delivery_is_pinned_to_each_source_bucket(stacks) -> None:
    for stack, template in stacks:
        buckets = resources(template, "AWS::S3::Bucket")
        policies = {
            json.dumps(p["Properties"]["Bucket"]): p["Properties"]["PolicyDocument"]["Statement"]
            for p in resources(template, "AWS::S3::BucketPolicy").values()
        }
        for name, bucket in buckets.items():
            properties = bucket["Properties"]
            assert "AccessControl" not in properties, name
            assert properties["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}, name
            logging = properties.get("LoggingConfiguration")
            if not logging:
                continue
            target = logging["DestinationBucketName"]
            (delivery,) = [
                s
                for s in policies[json.dumps(target)]
                if s.get("Principal") == {"Service": "logging.s3.amazonaws.com"}
                and s["Condition"]["ArnLike"]["aws:SourceArn"] == {"Fn::GetAtt": [name, "Arn"]}
            ]
            assert delivery["Action"] == "s3:PutObject" and delivery["Effect"] == "Allow"
            assert delivery["Condition"]["StringEquals"] == {"aws:SourceAccount": stack.account}
            assert json.dumps(delivery["Resource"]).endswith(f'"/{logging["LogFilePrefix"]}*"]]}}')
