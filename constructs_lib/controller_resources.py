"""What every controller in the capacity account is built on: its own rotated key, a ledger
table (RETAIN, point-in-time recovery), an encrypted topic, an encrypted dead-letter queue and
the Lambda role, created directly in the controller's scope so their construct ids stay
``Key``, ``Ledger``, ``Topic``, ``DeadLetters`` and ``Role``."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import (
    Duration,
    RemovalPolicy,
    Stack,
    aws_dynamodb as dynamodb,
    aws_iam as iam,
    aws_kms as kms,
    aws_sns as sns,
    aws_sqs as sqs,
)
from constructs import Construct

from .acknowledgements import acknowledge
from .tenancy import KEY_ADMIN_ACTIONS, KEY_USE_ACTIONS


@dataclass(frozen=True, kw_only=True)
class ControllerResources:
    key: kms.Key
    ledger: dynamodb.Table
    topic: sns.Topic
    dead_letters: sqs.Queue
    role: iam.Role


def controller_resources(
    scope: Construct,
    *,
    controller_id: str,
    ledger_key: str,
    ledger_backup_reason: str,
    topic_name: str,
    role_description: str,
    ledger_expiry_attribute: str | None = None,
    role_name: str | None = None,
) -> ControllerResources:
    # The account administers the key; only the controller role and the services named use it.
    key = kms.Key(
        scope, "Key", description=f"{controller_id}: ledger, topic, logs, function environment and dead letters",
        enable_key_rotation=True, removal_policy=RemovalPolicy.RETAIN,
        policy=iam.PolicyDocument(statements=[iam.PolicyStatement(
            principals=[iam.AccountRootPrincipal()], actions=KEY_ADMIN_ACTIONS, resources=["*"])]),
    )
    ledger = dynamodb.Table(
        scope, "Ledger", partition_key=dynamodb.Attribute(name=ledger_key, type=dynamodb.AttributeType.STRING),
        time_to_live_attribute=ledger_expiry_attribute, billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED, encryption_key=key,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
        deletion_protection=True, removal_policy=RemovalPolicy.RETAIN,
    )
    acknowledge(ledger, ledger_backup_reason, "DynamoDBInBackupPlan")
    topic = sns.Topic(scope, "Topic", display_name=topic_name, master_key=key, enforce_ssl=True)
    dead_letters = sqs.Queue(scope, "DeadLetters", encryption=sqs.QueueEncryption.KMS, encryption_master_key=key,
                             enforce_ssl=True, retention_period=Duration.days(14))
    acknowledge(dead_letters, "This queue is itself the dead-letter queue of the controller and its triggers.",
                "AwsSolutions-SQS3", "Serverless-SQSRedrivePolicy")
    role = iam.Role(scope, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                    role_name=role_name, description=role_description)
    key.add_to_resource_policy(iam.PolicyStatement(principals=[role], actions=KEY_USE_ACTIONS, resources=["*"]))
    # cloudwatch: alarm actions publish to the topic; logs and events encrypt with the key too -
    # each only for this account's own resources (no confused deputy), logs only for this
    # account's log groups in this region.
    stack = Stack.of(scope)
    own_account = {"StringEquals": {"aws:SourceAccount": stack.account}}
    log_groups = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
    for service, conditions in (
        (f"logs.{stack.region}.amazonaws.com", {**own_account, "ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups}}),
        ("events.amazonaws.com", own_account),
        ("cloudwatch.amazonaws.com", own_account),
    ):
        key.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal(service)], actions=KEY_USE_ACTIONS, resources=["*"], conditions=conditions))
    return ControllerResources(key=key, ledger=ledger, topic=topic, dead_letters=dead_letters, role=role)
