"""The capacity controller: one Lambda function that plans, buys exactly once, rotates and
drains, with its ledger, notification topic, triggers, alarms and the only IAM role allowed to
buy capacity.

Minimal use, in the capacity account's stack::

    CapacityController(self, "CapacityController", model=model)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from aws_cdk import (
    Annotations,
    ArnFormat,
    Duration,
    Stack,
    Token,
    aws_cloudwatch as cloudwatch,
    aws_events as events,
    aws_events_targets as targets,
    aws_iam as iam,
    aws_lambda as lambda_,
)
from constructs import Construct

from constructs_lib.backends import backend_of
from constructs_lib.controllers.base import GovernanceController
from constructs_lib.controllers.reclaim_policy import ssm_target_arn
from constructs_lib.core.acknowledgements import acknowledge, acknowledge_wildcard_resources
from constructs_lib.core.chargeback import route_alarm, subscribe_alerts
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.hyperpod_cluster_iam import acknowledge_update_cluster, update_cluster_statements
from constructs_lib.core.placement import team_scope
from constructs_lib.core.runtime_asset import runtime_code
from constructs_lib.model import GovernanceModel
from constructs_lib.model.capacity import BatchComputeEnvironmentFeed, capacity_controller_id, raising_windows
from constructs_lib.model.policy import policy_json
from constructs_lib.nag import declare_capacity_controller
from gpu_governance_runtime.contract import (
    ALARM_EVENT_SOURCE,
    ALARM_STATE,
    ALARM_STATE_CHANGE_DETAIL_TYPE,
    CAPACITY_EVENT_SOURCE,
    CAPACITY_NAMESPACE,
    CAPACITY_REQUEST_DETAIL_TYPE,
    CONSUMER_BATCH_COMPUTE_ENVIRONMENT,
    CONSUMER_EKS_NODE_GROUP,
    CONSUMER_HYPERPOD_INSTANCE_GROUP,
    CONSUMER_SAGEMAKER_TRAINING_JOBS,
    ENV_BUDGET,
    ENV_CONTROLLER_ID,
    ENV_LEDGER_TABLE,
    ENV_PRICE_CAP,
    ENV_RAISED_GUARANTEES,
    ENV_RAISED_GUARANTEES_KEY,
    ENV_SLURM_HEAD_NODES,
    ENV_TEAM_SPEND,
    ENV_TICK_SECONDS,
    ENV_TOPIC_ARN,
    PURCHASE_TAG_KEYS,
    STACK_EVENT_SOURCE,
    STACK_STATUS_CHANGE_DETAIL_TYPE,
    STACK_UPDATED_STATUSES,
    TAG_MANAGED_BY,
    TAG_REQUEUED_FROM,
    raised_guarantees_parameter,
    team_training_plans_parameter,
)
from gpu_governance_runtime.planners.market import SCHEDULE_LIMIT

TAG_KEYS = list(PURCHASE_TAG_KEYS)
BLOCK_EVENT_PREFIX = "Capacity Block"  # "... Delivered", "... (Reservation) Expiration Warning"
# An SSM Run Command target: an EC2 instance or a hybrid managed instance.
SSM_TARGET = re.compile(r"(i-[0-9a-f]{8}|i-[0-9a-f]{17}|mi-[0-9a-f]{17})")


def capacity_controller_role_name(organisation: str) -> str:
    """The fixed name the capacity controller's role carries, so an SCP in another account can
    name it exactly (a generated name cannot be known there)."""
    return f"{organisation}-capacity-controller"


class CapacityController(GovernanceController):
    """Buys the model's capacity windows (dry run unless a window says otherwise).

    ``schedule``: how often the controller plans (default every 15 minutes; approvals are acted
    on at the next run). Exposes ``function``, ``role``, ``ledger``, ``topic`` and ``alarms``;
    ``metric()`` gives any metric the function publishes in the contract's ``CAPACITY_NAMESPACE``:
    ``WindowsUncovered``, ``Purchases``, ``PurchaseFailures``, ``PurchasesInFlight``,
    ``AwaitingApproval``, ``PurchasesFoundLate``, ``PurchasesDeferred``, ``RunErrors``,
    ``ConsumerErrors``, ``MissingApiOperations``; per ``Window``: ``Spend``, ``BudgetUsedPercent``;
    for chargeback (docs/chargeback.md) ``PurchaseFees`` per ``Team`` and, per ``Window``, ``Team``
    and ``Reservation``, ``PurchasedInstanceHours``, ``PurchasedUsedInstanceHours``,
    ``PurchasedUtilisation`` (scheduled runs cover ``schedule`` each); once a day, when a team declares
    ``monthly_budget_usd``, ``TeamSpendUsd`` per ``Team`` (month to date, from Cost Explorer).


    ``slurm_head_nodes``: for each ``hyperpod_slurm`` pool a window feeds, the SSM target id of
    its head node (``i-...`` or ``mi-...``), where the controller puts the window's nodes in the
    owner's partition, drains and resumes them (docs/capacity.md). A fed pool without one is a synth warning, and an error the
    controller reports every run: its nodes are left as they are. With a head node the controller
    runs at least every 5 minutes (``market.SCHEDULE_LIMIT``; a longer ``schedule`` is
    shortened to it): a Slurm window's jobs are requeued, and a Batch compute environment's jobs on a
    block stopped and copied, from 40 minutes before the end (``requeue.STOP_LEAD``), so two runs
    land before the instances go at 30 and one failed run leaves the next.
    """

    namespace = CAPACITY_NAMESPACE

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: GovernanceModel,
        schedule: Duration = Duration.minutes(15),
        slurm_head_nodes: Mapping[str, str] | None = None,
    ) -> None:
        if not model.capacity_windows:  # before any resource exists: nothing half-built on bad props
            raise GovernanceError.single(
                "capacity_windows", "no capacity windows declared", [], "at least one window for a capacity controller"
            )
        head_nodes = _checked_head_nodes(model, dict(slurm_head_nodes or {}))
        super().__init__(
            scope,
            id,
            controller_id=capacity_controller_id(model.organisation),
            ledger_key="pk",
            ledger_backup_reason="Point-in-time recovery (35 days) is the ledger's backup; it is small and every purchase is "
            "also tagged on the reservation itself, so it can be rebuilt from AWS.",
            topic_name="GPU capacity windows",
            role_name=capacity_controller_role_name(model.organisation),
            role_description="The only role allowed to buy GPU capacity (Capacity Blocks, training plans)",
        )
        windows = model.capacity_windows
        self.slurm_head_nodes = head_nodes
        # The raises it applies, published for the reclaim controller (capacity/raised.py); None when no window raises a quota.
        self.raised_guarantees = raised_guarantees_parameter(model.organisation) if raising_windows(model) else None
        limit = Duration.minutes(int(SCHEDULE_LIMIT.total_seconds() // 60))
        feeds_batch = any(w.feeds.kind == CONSUMER_BATCH_COMPUTE_ENVIRONMENT for w in windows)
        if (
            head_nodes or feeds_batch
        ) and schedule.to_seconds() > limit.to_seconds():  # the drain and requeue come with the runs
            schedule = limit
        unreached = [pool for pool in _slurm_pools_fed(model) if pool not in head_nodes]
        if unreached:  # deployable (the head node may not be known yet), but the window's nodes are left as they are
            Annotations.of(self).add_warning_v2(
                "gpu-governance:slurm-head-node",
                (
                    f"capacity windows feed hyperpod_slurm pools {unreached} but slurm_head_nodes names no head node for them: their nodes are "
                    "neither drained before a plan ends nor resumed after (the controller reports it every run, ConsumerErrors)"
                ),
            )
        declare_capacity_controller(self.role)
        self._add_function(
            handler="gpu_governance_runtime.capacity.handler.handle",
            code=runtime_code(policy_json(model)),
            timeout=Duration.minutes(5),
            memory_size=512,
            logging_format=lambda_.LoggingFormat.JSON,
            vpc_reason="The controller calls only public AWS APIs (EC2, SageMaker, DynamoDB, SNS); "
            "a VPC would add NAT cost and no isolation.",
        )
        # Set on the L1 rather than through the L2's lazy environment, which cdk-nag rules reading
        # the resource's properties (GpuGovernance-PurchaserLimits) see as empty.
        self.function.node.default_child.environment = lambda_.CfnFunction.EnvironmentProperty(
            variables={
                ENV_CONTROLLER_ID: self.controller_id,
                ENV_LEDGER_TABLE: self.ledger.table_name,
                ENV_TOPIC_ARN: self.topic.topic_arn,
                # A second, independent statement of the limits: the handler refuses a policy above them.
                ENV_BUDGET: str(max(w.budget.amount for w in windows)),
                ENV_PRICE_CAP: str(max(w.max_price_per_instance_hour for w in windows)),
                **(
                    {ENV_RAISED_GUARANTEES: self.raised_guarantees, ENV_RAISED_GUARANTEES_KEY: self.key.key_arn}
                    if self.raised_guarantees
                    else {}
                ),
                **(
                    {ENV_SLURM_HEAD_NODES: json.dumps(self.slurm_head_nodes, sort_keys=True)}
                    if self.slurm_head_nodes
                    else {}
                ),
                ENV_TICK_SECONDS: str(
                    int(schedule.to_seconds())
                ),  # the hours one scheduled run's block utilisation covers
                **(
                    {ENV_TEAM_SPEND: "daily"} if polls_team_spend(model) else {}
                ),  # each team's spend from Cost Explorer (capacity/spend.py)
            }
        )
        self.ledger.grant_read_write_data(self.role)
        self.topic.grant_publish(self.role)
        self._grant_capacity(model)

        target = targets.LambdaFunction(
            self.function, dead_letter_queue=self.dead_letters, retry_attempts=2, max_event_age=Duration.hours(1)
        )
        events.Rule(self, "Schedule", schedule=events.Schedule.rate(schedule), targets=[target])
        events.Rule(
            self,
            "BlockEvents",
            event_pattern=events.EventPattern(source=["aws.ec2"], detail_type=events.Match.prefix(BLOCK_EVENT_PREFIX)),
            targets=[target],
        )
        # On-demand windows asked for by an event (a person's tool, an alarm's action): see capacity/requests.py.
        events.Rule(
            self,
            "CapacityRequests",
            event_pattern=events.EventPattern(
                source=[CAPACITY_EVENT_SOURCE], detail_type=[CAPACITY_REQUEST_DETAIL_TYPE]
            ),
            targets=[target],
        )
        # On-demand windows asked for by a window's alarms going to ALARM (requests.from_alarm), one rule per window.
        for window in windows:
            if window.alarm_requests:
                events.Rule(
                    self,
                    f"AlarmRequests{window.name}",
                    event_pattern=events.EventPattern(
                        source=[ALARM_EVENT_SOURCE],
                        detail_type=[ALARM_STATE_CHANGE_DETAIL_TYPE],
                        detail={
                            "alarmName": sorted(a.alarm_name for a in window.alarm_requests),
                            "state": {"value": [ALARM_STATE]},
                        },
                    ),
                    targets=[target],
                )
        self.raised_stacks = self._quota_stacks(model)
        if self.raised_stacks:
            # An update of a stack holding a raised quota redeploys the declared quota: run at once
            # to raise it again, not at the next scheduled run (docs/capacity.md, the remaining gap).
            events.Rule(
                self,
                "QuotaStackUpdates",
                event_pattern=events.EventPattern(
                    source=[STACK_EVENT_SOURCE],
                    detail_type=[STACK_STATUS_CHANGE_DETAIL_TYPE],
                    detail={
                        "stack-id": events.Match.any_of(
                            *(events.Match.prefix(self._stack_id_prefix(name)) for name in self.raised_stacks)
                        ),
                        "status-details": {"status": list(STACK_UPDATED_STATUSES)},
                    },
                ),
                targets=[target],
            )
        subscribe_alerts(self.topic, model)
        self._alarms(model)

    def grant_read_raised_guarantees(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` (the reclaim controller's role) decrypt the raised guarantees: a
        SecureString under this controller's key, which only this controller's role may encrypt
        with, so nobody else can write a document the reader accepts (capacity/raised.py). The
        reader still needs ``ssm:GetParameter`` on it (the reclaim controller has it)."""
        stack = Stack.of(self)
        parameter = stack.format_arn(
            service="ssm", resource="parameter", resource_name=self.raised_guarantees.lstrip("/")
        )
        # SSM decrypts a SecureString with the parameter's ARN as encryption context: this key opens nothing else.
        only_this_parameter = {"StringEquals": {"kms:EncryptionContext:PARAMETER_ARN": parameter}}
        # The key policy names the role itself (it delegates nothing to IAM but administration).
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[grantee.grant_principal],
                actions=["kms:Decrypt"],
                resources=["*"],
                conditions=only_this_parameter,
            )
        )
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["kms:Decrypt"], resource_arns=[self.key.key_arn], conditions=only_this_parameter
        )

    def _quota_stacks(self, model: GovernanceModel) -> list[str]:
        """Names of the stacks holding a quota a window raises: this stack (the pools' service
        environments) and the stack each raising team's quota share or compute quota goes to."""
        raising = raising_windows(model)
        if not raising:
            return []
        return sorted({Stack.of(self).stack_name} | {Stack.of(team_scope(self, w.team)).stack_name for w in raising})

    def _stack_id_prefix(self, stack_name: str) -> str:
        # A stack id is arn:<partition>:cloudformation:<region>:<account>:stack/<name>/<uuid>; the uuid is known after creation only.
        return Stack.of(self).format_arn(
            service="cloudformation",
            resource="stack",
            resource_name=f"{stack_name}/",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )

    def _grant_capacity(self, model: GovernanceModel) -> None:
        stack = Stack.of(self)
        arn = lambda service, resource: stack.format_arn(
            service=service, resource=resource, resource_name="*", arn_format=ArnFormat.SLASH_RESOURCE_NAME
        )  # noqa: E731
        tagged_by_us = {
            "StringEquals": {f"aws:RequestTag/{TAG_MANAGED_BY}": self.controller_id},
            "ForAllValues:StringEquals": {"aws:TagKeys": TAG_KEYS},
        }
        reservations = arn("ec2", "capacity-reservation")
        statements = [
            # No instance-type condition key exists for these actions: region (via the ARN) and our
            # own tags are as tight as IAM allows; the price cap and budget live in the controller.
            iam.PolicyStatement(
                actions=["ec2:PurchaseCapacityBlock"], resources=[reservations], conditions=tagged_by_us
            ),
            iam.PolicyStatement(
                actions=["ec2:CreateTags"],
                resources=[reservations],
                conditions={"StringEquals": {"ec2:CreateAction": "PurchaseCapacityBlock"}},
            ),
            iam.PolicyStatement(
                actions=["ec2:PurchaseCapacityBlockExtension"],
                resources=[reservations],
                conditions={"StringEquals": {f"aws:ResourceTag/{TAG_MANAGED_BY}": self.controller_id}},
            ),
            iam.PolicyStatement(
                actions=[
                    "ec2:DescribeCapacityReservations",
                    "ec2:DescribeCapacityBlockOfferings",
                    "ec2:DescribeCapacityBlockExtensionOfferings",
                    "ec2:DescribeCapacityBlockExtensionHistory",
                    "ec2:DescribeLaunchTemplateVersions",
                ],
                resources=["*"],
            ),
            iam.PolicyStatement(
                actions=["events:PutEvents"],
                resources=[stack.format_arn(service="events", resource="event-bus", resource_name="default")],
            ),
        ]
        feeds = [w.feeds for w in model.capacity_windows]
        templates = [f for f in feeds if hasattr(f, "launch_template_name")]
        if templates:
            statements += [
                iam.PolicyStatement(
                    actions=["ec2:CreateLaunchTemplateVersion"], resources=[arn("ec2", "launch-template")]
                ),
                # consumers.py: the zones of the consumer's subnets, where a block can be used (no resource-level permission).
                iam.PolicyStatement(actions=["ec2:DescribeSubnets"], resources=["*"]),
            ]
        batch_feeds = [f for f in feeds if f.kind == CONSUMER_BATCH_COMPUTE_ENVIRONMENT]
        requeue_statements = []
        if batch_feeds:
            statements += [
                # rotation.py: only the block compute environments are updated and only their queues reordered; the on-demand
                # compute environments, where running work stays, are never touched.
                iam.PolicyStatement(
                    actions=["batch:UpdateComputeEnvironment"],
                    resources=sorted({f.block_compute_environment for f in batch_feeds}),
                ),
                iam.PolicyStatement(
                    actions=list(BatchComputeEnvironmentFeed.queue_reorders),
                    resources=sorted({f.job_queue for f in batch_feeds}),
                ),
                iam.PolicyStatement(
                    actions=[
                        "batch:DescribeComputeEnvironments",
                        "batch:DescribeJobQueues",
                        "batch:ListJobs",
                        "batch:DescribeJobs",
                        "ec2:DescribeInstances",
                        "ec2:DescribeInstanceTypes",
                    ],
                    resources=["*"],
                ),
            ]
            # Requeue at drain: the queue, job definition and ECS cluster are Batch's, known at run time only.
            # A copy carries its original's tags and the requeue mark (common/batch_copy.py), which its
            # submission and the tagging inside it must name: documented keys only [aws: batch-iam.tag-on-create-context].
            copy = {"Null": {f"aws:RequestTag/{TAG_REQUEUED_FROM}": "false"}}
            requeue_statements = [
                iam.PolicyStatement(actions=["ecs:ListContainerInstances"], resources=[arn("ecs", "cluster")]),
                iam.PolicyStatement(actions=["batch:TerminateJob"], resources=[arn("batch", "job")]),
                iam.PolicyStatement(actions=["batch:TagResource"], resources=[arn("batch", "job")], conditions=copy),
                iam.PolicyStatement(
                    actions=["batch:SubmitJob"],
                    resources=[arn("batch", "job-queue"), arn("batch", "job-definition"), arn("batch", "job")],
                    conditions=copy,
                ),
            ]
        node_groups = sorted(
            {
                stack.format_arn(
                    service="eks", resource="nodegroup", resource_name=f"{f.cluster_name}/{f.nodegroup_name}/*"
                )
                for f in feeds
                if f.kind == CONSUMER_EKS_NODE_GROUP
            }
        )
        if node_groups:
            # rotation.py: read the node group, move its version, scale it up at a block's start and to zero before its end.
            statements.append(
                iam.PolicyStatement(
                    actions=["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "eks:UpdateNodegroupVersion"],
                    resources=node_groups,
                )
            )
        pools = {p.name: p for p in model.pools}
        clusters = sorted({pools[f.pool].cluster_arn for f in feeds if f.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP})
        cluster_statements = update_cluster_statements(self, clusters) if clusters else []
        if any(w.market == "training_plan" for w in model.capacity_windows):
            plans = arn("sagemaker", "training-plan")
            statements += [
                iam.PolicyStatement(
                    actions=["sagemaker:CreateTrainingPlan", "sagemaker:AddTags"],
                    resources=[plans],
                    conditions=tagged_by_us,
                ),
                iam.PolicyStatement(
                    actions=["sagemaker:CreateReservedCapacity"], resources=[arn("sagemaker", "reserved-capacity")]
                ),
                iam.PolicyStatement(
                    actions=["sagemaker:DescribeTrainingPlan", "sagemaker:DescribeTrainingPlanExtensionHistory"],
                    resources=[plans],
                ),
                iam.PolicyStatement(
                    actions=["sagemaker:ExtendTrainingPlan"],
                    resources=[plans],
                    conditions={"StringEquals": {f"aws:ResourceTag/{TAG_MANAGED_BY}": self.controller_id}},
                ),
                iam.PolicyStatement(
                    actions=["sagemaker:SearchTrainingPlanOfferings", "sagemaker:ListTrainingPlans"], resources=["*"]
                ),
            ]
        raising = raising_windows(model)
        raised = sorted({(w.feeds.pool, w.team) for w in raising if w.feeds.kind == CONSUMER_SAGEMAKER_TRAINING_JOBS})
        if raised:  # the owner's quota share raised while its plan is active (capacity/shares.py)
            queue = lambda pool: stack.format_arn(service="batch", resource="job-queue", resource_name=pool)  # noqa: E731
            environment = lambda pool: stack.format_arn(
                service="batch", resource="service-environment", resource_name=pool
            )  # noqa: E731
            statements += [
                iam.PolicyStatement(
                    actions=["batch:ListQuotaShares"], resources=sorted({queue(pool) for pool, _ in raised})
                ),
                # The pool's service environment holds the raised guarantees (the environment is named after the pool).
                iam.PolicyStatement(
                    actions=["batch:UpdateServiceEnvironment"],
                    resources=sorted({environment(pool) for pool, _ in raised}),
                ),
                iam.PolicyStatement(actions=["batch:DescribeServiceEnvironments"], resources=["*"]),
                iam.PolicyStatement(
                    actions=["batch:DescribeQuotaShare", "batch:UpdateQuotaShare"],
                    resources=[f"{queue(pool)}/quota-share/{team}" for pool, team in raised],
                ),
            ]
        quota_clusters = sorted(
            {pools[w.feeds.pool].cluster_arn for w in raising if w.feeds.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP}
        )
        if quota_clusters:  # the owner's HyperPod compute quota raised while its plan is active (capacity/shares.py)
            # Compute quota ARNs end in an id SageMaker generates; the controller finds each team's by cluster and name.
            quotas = sorted(
                {"{}:{}:{}:{}:{}:compute-quota/*".format(*cluster.split(":")[:5]) for cluster in quota_clusters}
            )
            statements += [
                iam.PolicyStatement(actions=["sagemaker:ListComputeQuotas"], resources=["*"]),
                iam.PolicyStatement(
                    actions=["sagemaker:DescribeComputeQuota", "sagemaker:UpdateComputeQuota"], resources=quotas
                ),
            ]
        slurm_statements = []
        if self.slurm_head_nodes:  # the window's nodes drained and resumed on the head node (capacity/slurm_window.py)
            document = stack.format_arn(
                service="ssm",
                account="",
                resource="document",
                resource_name="AWS-RunShellScript",
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
            slurm_clusters = sorted({pools[pool].cluster_arn for pool in self.slurm_head_nodes})
            slurm_statements = [
                iam.PolicyStatement(
                    actions=["ssm:SendCommand"],
                    resources=[
                        document,
                        *(ssm_target_arn(stack, node) for _, node in sorted(self.slurm_head_nodes.items())),
                    ],
                ),
                iam.PolicyStatement(actions=["ssm:CancelCommand", "ssm:GetCommandInvocation"], resources=["*"]),
                iam.PolicyStatement(
                    actions=["sagemaker:ListClusterNodes", "sagemaker:DescribeClusterNode"], resources=slurm_clusters
                ),
            ]
        plan_teams = sorted(
            {w.team for w in model.capacity_windows if w.feeds.kind == CONSUMER_SAGEMAKER_TRAINING_JOBS}
        )
        if plan_teams:  # each team's active training plans, published by the controller (capacity/delivery.py)
            statements.append(
                iam.PolicyStatement(
                    actions=["ssm:GetParameter", "ssm:PutParameter"],
                    resources=[
                        stack.format_arn(
                            service="ssm",
                            resource="parameter",
                            resource_name=team_training_plans_parameter(model.organisation, team).lstrip("/"),
                        )
                        for team in plan_teams
                    ],
                )
            )
        if raising_windows(model):  # the raises applied, for the reclaim controller (capacity/raised.py)
            statements.append(
                iam.PolicyStatement(
                    actions=["ssm:GetParameter", "ssm:PutParameter"],
                    resources=[
                        stack.format_arn(
                            service="ssm",
                            resource="parameter",
                            resource_name=raised_guarantees_parameter(model.organisation).lstrip("/"),
                        )
                    ],
                )
            )
        if polls_team_spend(model):
            statements.append(iam.PolicyStatement(actions=["ce:GetCostAndUsage"], resources=["*"]))
        for statement in statements + requeue_statements + cluster_statements + slurm_statements:
            self.role.add_to_policy(statement)
        policy = self.role.node.find_child("DefaultPolicy")
        acknowledge(
            policy,
            "The purchase permission must stay with this one role: an inline policy cannot be attached to "
            "any other principal, a managed policy could.",
            "IAMNoInlinePolicy",
        )
        acknowledge(
            policy,
            "DynamoDB and SNS grants name these KMS wildcards; the key policy itself allows this role only "
            "Encrypt, Decrypt, GenerateDataKey and DescribeKey on this one key.",
            "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
            "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
        )
        acknowledge_wildcard_resources(
            policy,
            [r for s in statements for r in s.resources] + ["*"],
            "Describe/List/Search calls and Cost Explorer's GetCostAndUsage (granted when a team declares a monthly budget) "
            "support no resource-level permission; purchases are limited to this region's "
            "capacity-reservation / training-plan ARNs carrying the controller's tags (no instance-type condition key exists); "
            "launch template and compute quota ARNs carry ids, not the names the governance file declares."
            + (
                " ssm:GetCommandInvocation and ssm:CancelCommand support none either: they read and cancel commands this role sent, and ssm:SendCommand "
                "is limited to AWS-RunShellScript on the declared Slurm head nodes."
                if slurm_statements
                else ""
            ),
        )
        if cluster_statements:
            acknowledge_update_cluster(policy)
        if requeue_statements:
            acknowledge_wildcard_resources(
                policy,
                [r for s in requeue_statements for r in s.resources],
                "Requeueing a Batch job at drain terminates it and submits a copy to the queue that ran it with its own job "
                "definition; queue, job definition and the compute environment's ECS cluster are named by Batch at run time. "
                "The controller only touches jobs of the window's job queue: on its own Capacity Block, or running on demand, "
                "tagged checkpointable, moved onto the block.",
            )
            acknowledge(
                policy,
                "At drain the controller requeues whichever team's job runs on its own expiring Capacity Block (and "
                "moves a checkpointing job from on demand onto the block, or one that would be cut off it): it stops the "
                "job and submits an identical copy with the job's own share identifier and tags, so no team takes "
                "another's place.",
                "GpuGovernance-JobControlWithoutShare[Action::batch:SubmitJob]",
                "GpuGovernance-JobControlWithoutShare[Action::batch:TerminateJob]",
                "GpuGovernance-JobControlWithoutShare[Action::batch:TagResource]",
            )

    def _alarms(self, model: GovernanceModel) -> None:
        # (name, metric, threshold, periods that must breach in a row, description)
        specs = [
            (
                "WindowsUncovered",
                self.metric("WindowsUncovered"),
                0,
                1,
                "a capacity window cannot be covered (price cap, budget or no offering)",
            ),
            ("PurchaseFailures", self.metric("PurchaseFailures", statistic="Sum"), 0, 1, "a capacity purchase failed"),
            (
                "ConsumerErrors",
                self.metric("ConsumerErrors", statistic="Sum"),
                0,
                1,
                "a requeue or HyperPod instance-group update failed, the declared instance group is missing, or the day's read of "
                "the teams' spend from Cost Explorer failed",
            ),
            (
                "RunErrors",
                self.metric("RunErrors", statistic="Sum"),
                0,
                1,
                "a step of a capacity controller run failed (a window's offerings, an intent or a purchase); the other windows "
                "were served and the next run retries: see the 'Capacity controller step failed' message or ERROR log line",
            ),
            (
                "PurchasesFoundLate",
                self.metric("PurchasesFoundLate", statistic="Sum"),
                0,
                1,
                "a capacity purchase settled as failed was listed after all: its fee is counted again and the occurrence may "
                "have been bought twice; check the 'Capacity purchase found after it was settled as failed' message",
            ),
            # One deferral is caught up by the next run; deferrals two periods running mean runs keep
            # running out of time and purchases are not being made.
            (
                "PurchasesDeferred",
                self.metric("PurchasesDeferred", statistic="Sum"),
                0,
                2,
                "capacity purchases were deferred for lack of invocation time in two periods running",
            ),
            (
                "MissingApiOperations",
                self.metric("MissingApiOperations"),
                0,
                1,
                "the Lambda runtime's boto3 lacks operations the capacity controller calls; it refuses to start (see its ERROR log line)",
            ),
            (
                "ControllerErrors",
                self.function.metric_errors(period=Duration.minutes(15)),
                0,
                1,
                "the capacity controller failed",
            ),
            (
                "DeadLetters",
                self.dead_letters.metric_approximate_number_of_messages_visible(period=Duration.minutes(15)),
                0,
                1,
                "a capacity event or run was not delivered",
            ),
        ] + [
            (
                f"Budget{w.name}",
                self.metric("BudgetUsedPercent", dimensions={"Window": w.name}),
                90,
                1,
                f"window {w.name} used over 90% of its budget",
            )
            for w in model.capacity_windows
        ]
        for name, source, threshold, periods, description in specs:
            alarm = self._add_alarm(
                self,
                name,
                source,
                threshold=threshold,
                periods=periods,
                description=description,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            )
            route_alarm(alarm, model)


def polls_team_spend(model: GovernanceModel) -> bool:
    """Whether the capacity controller reads each team's spend from Cost Explorer once a day:
    when a team declares a monthly budget, which needs the team tag activated for cost allocation anyway."""
    return any(team.monthly_budget_usd is not None for team in model.teams)


def _slurm_pools_fed(model: GovernanceModel) -> list[str]:
    pools = {p.name: p for p in model.pools}
    return sorted(
        {
            w.feeds.pool
            for w in model.capacity_windows
            if w.feeds.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP
            and pools.get(w.feeds.pool) is not None
            and backend_of(pools[w.feeds.pool]).drains_on_head_node
        }
    )


def _checked_head_nodes(model: GovernanceModel, head_nodes: dict[str, str]) -> dict[str, str]:
    """Head nodes only of ``hyperpod_slurm`` pools windows feed, each an SSM target id."""
    fed = _slurm_pools_fed(model)
    problems = []
    for pool, node in sorted(head_nodes.items()):
        if pool not in fed:
            problems.append(
                Problem(
                    path=f"slurm_head_nodes.{pool}",
                    wrong="no capacity window feeds this hyperpod_slurm pool",
                    value=pool,
                    allowed=f"one of {fed}" if fed else "no slurm_head_nodes without such a window",
                )
            )
        elif not isinstance(node, str) or (not Token.is_unresolved(node) and not SSM_TARGET.fullmatch(node)):
            problems.append(
                Problem(
                    path=f"slurm_head_nodes.{pool}",
                    wrong="not an SSM target id",
                    value=node,
                    allowed="the head node's SSM target id (i-<8 or 17 hex> or mi-<17 hex>)",
                )
            )
    if problems:
        raise GovernanceError(problems)
    return head_nodes
