"""The skeleton every controller in the capacity account is built on (``GovernanceController``):
its own rotated key, a ledger table (RETAIN, point-in-time recovery), an encrypted topic, an
encrypted dead-letter queue, the Lambda role, the function with its encrypted log group, alarms
that notify the topic, and ``metric`` in the controller's namespace. The resources are created
directly in the controller's scope, so their construct ids stay ``Key``, ``Ledger``, ``Topic``,
``DeadLetters``, ``Role``, ``Logs`` and ``Function``. A new controller subclasses it, adds its
permissions, triggers and alarms, and reads the policy through the runtime's contract.

The function runs outside any VPC unless ``vpc`` is given (optionally with ``vpc_subnets``, by
default the VPC's private subnets, and ``security_groups``, by default one that allows all
outbound traffic): then it runs in that VPC, and reaches AWS through the VPC's endpoints or NAT."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import (
    Duration,
    RemovalPolicy,
    Stack,
    aws_cloudwatch as cloudwatch,
    aws_cloudwatch_actions as actions,
    aws_dynamodb as dynamodb,
    aws_ec2 as ec2,
    aws_iam as iam,
    aws_kms as kms,
    aws_lambda as lambda_,
    aws_logs as logs,
    aws_sns as sns,
    aws_sqs as sqs,
)
from constructs import Construct

from constructs_lib.core.acknowledgements import acknowledge
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.vocabulary import KEY_ADMIN_ACTIONS, KEY_USE_ACTIONS

VPC_ACCESS_POLICY = "AWSLambdaVPCAccessExecutionRole"


class GovernanceController(Construct):
    """Exposes ``key``, ``ledger``, ``topic``, ``dead_letters``, ``role``, ``function`` (after
    :meth:`_add_function`) and ``alarms``. Subclasses set ``namespace``, the CloudWatch namespace
    their function publishes in (the runtime's contract names it)."""

    namespace: str

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        controller_id: str,
        ledger_key: str,
        ledger_backup_reason: str,
        topic_name: str,
        role_description: str,
        ledger_expiry_attribute: str | None = None,
        role_name: str | None = None,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] = (),
    ) -> None:
        problems = vpc_problems(vpc, vpc_subnets, security_groups)
        if problems:
            raise GovernanceError(problems)
        super().__init__(scope, id)
        self.controller_id = controller_id
        self._placement = (
            {"vpc": vpc, "vpc_subnets": vpc_subnets, "security_groups": list(security_groups) or None}
            if vpc is not None
            else {}
        )
        self.alarms: list[cloudwatch.Alarm] = []
        self.key = self._key()
        self.ledger = self._ledger(ledger_key, ledger_expiry_attribute, ledger_backup_reason)
        self.topic = sns.Topic(self, "Topic", display_name=topic_name, master_key=self.key, enforce_ssl=True)
        self.dead_letters = self._dead_letters()
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            role_name=role_name,
            description=role_description,
        )
        self._let_use_key()

    def _key(self) -> kms.Key:
        # The account administers the key; only the controller role and the services named use it
        # (_let_use_key).
        return kms.Key(
            self,
            "Key",
            description=f"{self.controller_id}: ledger, topic, logs, function environment and dead letters",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
            policy=iam.PolicyDocument(
                statements=[
                    iam.PolicyStatement(
                        principals=[iam.AccountRootPrincipal()], actions=KEY_ADMIN_ACTIONS, resources=["*"]
                    )
                ]
            ),
        )

    def _ledger(self, key: str, expiry_attribute: str | None, backup_reason: str) -> dynamodb.Table:
        ledger = dynamodb.Table(
            self,
            "Ledger",
            partition_key=dynamodb.Attribute(name=key, type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=expiry_attribute,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(ledger, backup_reason, "DynamoDBInBackupPlan")
        return ledger

    def _dead_letters(self) -> sqs.Queue:
        dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        acknowledge(
            dead_letters,
            "This queue is itself the dead-letter queue of the controller and its triggers.",
            "AwsSolutions-SQS3",
            "Serverless-SQSRedrivePolicy",
        )
        return dead_letters

    def _let_use_key(self) -> None:
        """The key's users: the controller's role, and the services that encrypt with it."""
        self.key.add_to_resource_policy(
            iam.PolicyStatement(principals=[self.role], actions=KEY_USE_ACTIONS, resources=["*"])
        )
        # cloudwatch: alarm actions publish to the topic; logs and events encrypt with the key too -
        # each only for this account's own resources (no confused deputy), logs only for this
        # account's log groups in this region.
        stack = Stack.of(self)
        own_account = {"StringEquals": {"aws:SourceAccount": stack.account}}
        log_groups = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
        for service, conditions in (
            (
                f"logs.{stack.region}.amazonaws.com",
                {**own_account, "ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups}},
            ),
            ("events.amazonaws.com", own_account),
            ("cloudwatch.amazonaws.com", own_account),
        ):
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    principals=[iam.ServicePrincipal(service)],
                    actions=KEY_USE_ACTIONS,
                    resources=["*"],
                    conditions=conditions,
                )
            )

    def _add_function(
        self,
        *,
        handler: str,
        code: lambda_.Code,
        timeout: Duration,
        memory_size: int,
        vpc_reason: str,
        environment: Mapping[str, str] | None = None,
        logging_format: lambda_.LoggingFormat | None = None,
        reserved_concurrency: int = 1,
    ) -> lambda_.Function:
        """The controller's one function: by default one invocation at a time (an overlapping one is
        throttled, not run twice; a controller whose events are independent, each claimed in its
        ledger, may run more), its own encrypted log group kept for a year, traced, failed events to
        the dead-letter queue, environment encrypted with the controller's key."""
        log_group = logs.LogGroup(
            self,
            "Logs",
            retention=logs.RetentionDays.ONE_YEAR,
            encryption_key=self.key,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            handler=handler,
            code=code,
            role=self.role,
            timeout=timeout,
            memory_size=memory_size,
            reserved_concurrent_executions=reserved_concurrency,
            log_group=log_group,
            logging_format=logging_format,
            tracing=lambda_.Tracing.ACTIVE,
            dead_letter_queue=self.dead_letters,
            environment_encryption=self.key,
            environment=dict(environment) if environment else None,
            **self._placement,
        )
        if self._placement:
            # Lambda creates the function's network interfaces in the VPC with the function's role (the
            # CDK attaches this policy only to roles it makes itself).
            self.role.add_managed_policy(
                iam.ManagedPolicy.from_aws_managed_policy_name(f"service-role/{VPC_ACCESS_POLICY}")
            )
            acknowledge(
                self.role,
                f"{VPC_ACCESS_POLICY} is the policy AWS maintains for what Lambda needs to create, describe "
                "and delete a function's network interfaces in a VPC (EC2 allows describing them on no narrower resource).",
                f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{VPC_ACCESS_POLICY}]",
            )
        else:
            acknowledge(self.function, vpc_reason, "LambdaInsideVPC")
        return self.function

    def metric(
        self,
        metric_name: str,
        *,
        dimensions: Mapping[str, str] | None = None,
        statistic: str = "Maximum",
        period: Duration = Duration.minutes(15),
    ) -> cloudwatch.Metric:
        """A metric the controller's function publishes in its namespace."""
        return cloudwatch.Metric(
            namespace=self.namespace,
            metric_name=metric_name,
            dimensions_map=dict(dimensions) if dimensions else None,
            statistic=statistic,
            period=period,
        )

    def _add_alarm(
        self,
        scope: Construct,
        name: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        periods: int,
        description: str,
        comparison: cloudwatch.ComparisonOperator,
    ) -> cloudwatch.Alarm:
        """An alarm that notifies the controller's topic; missing data (no work) is not a breach."""
        alarm = cloudwatch.Alarm(
            scope,
            f"{name}Alarm",
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            alarm_description=description,
            comparison_operator=comparison,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        self.alarms.append(alarm)
        return alarm


def vpc_problems(
    vpc: ec2.IVpc | None, vpc_subnets: ec2.SubnetSelection | None, security_groups: Sequence[ec2.ISecurityGroup]
) -> list[Problem]:
    """Subnets and security groups place the function in a VPC: without one they would be ignored."""
    if vpc is not None:
        return []
    return [
        Problem(path=name, wrong="given without vpc", value=value, allowed="only with vpc (the VPC they belong to)")
        for name, value in (("vpc_subnets", vpc_subnets), ("security_groups", list(security_groups)))
        if value
    ]
