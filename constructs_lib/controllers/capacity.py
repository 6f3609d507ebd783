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
from constructs_lib.controllers.capacity_policy import grant_capacity, polls_team_spend
from constructs_lib.core.chargeback import route_alarm, subscribe_alerts
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.placement import team_scope
from constructs_lib.core.runtime_asset import runtime_code
from constructs_lib.model import GovernanceModel
from constructs_lib.model.capacity import capacity_controller_id, raising_windows
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
    CONSUMER_HYPERPOD_INSTANCE_GROUP,
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
    STACK_EVENT_SOURCE,
    STACK_STATUS_CHANGE_DETAIL_TYPE,
    STACK_UPDATED_STATUSES,
    raised_guarantees_parameter,
)
from gpu_governance_runtime.planners.market import SCHEDULE_LIMIT

BLOCK_EVENT_PREFIX = "Capacity Block"  # "... Delivered", "... (Reservation) Expiration Warning"
# An SSM Run Command target: an EC2 instance or a hybrid managed instance.
SSM_TARGET = re.compile(r"(i-[0-9a-f]{8}|i-[0-9a-f]{17}|mi-[0-9a-f]{17})")


# Alarms on what the function publishes, each above 0: (metric, statistic (None: the metric's default),
# periods that must breach in a row, description).
PUBLISHED_METRIC_ALARMS = (
    ("WindowsUncovered", None, 1, "a capacity window cannot be covered (price cap, budget or no offering)"),
    ("PurchaseFailures", "Sum", 1, "a capacity purchase failed"),
    (
        "ConsumerErrors",
        "Sum",
        1,
        "a requeue or HyperPod instance-group update failed, the declared instance group is missing, or the day's read of "
        "the teams' spend from Cost Explorer failed",
    ),
    (
        "RunErrors",
        "Sum",
        1,
        "a step of a capacity controller run failed (a window's offerings, an intent or a purchase); the other windows "
        "were served and the next run retries: see the 'Capacity controller step failed' message or ERROR log line",
    ),
    (
        "PurchasesFoundLate",
        "Sum",
        1,
        "a capacity purchase settled as failed was listed after all: its fee is counted again and the occurrence may "
        "have been bought twice; check the 'Capacity purchase found after it was settled as failed' message",
    ),
    # One deferral is caught up by the next run; deferrals two periods running mean runs keep
    # running out of time and purchases are not being made.
    (
        "PurchasesDeferred",
        "Sum",
        2,
        "capacity purchases were deferred for lack of invocation time in two periods running",
    ),
    (
        "MissingApiOperations",
        None,
        1,
        "the Lambda runtime's boto3 lacks operations the capacity controller calls; it refuses to start (see its ERROR log line)",
    ),
)


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
        self.slurm_head_nodes = head_nodes
        # The raises it applies, published for the reclaim controller (capacity/raised.py); None when no window raises a quota.
        self.raised_guarantees = raised_guarantees_parameter(model.organisation) if raising_windows(model) else None
        schedule = self._run_schedule(model, schedule)
        declare_capacity_controller(self.role)
        self._add_controller_function(model, schedule)
        self.ledger.grant_read_write_data(self.role)
        self.topic.grant_publish(self.role)
        grant_capacity(self, model)
        self._add_triggers(model, schedule)
        subscribe_alerts(self.topic, model)
        self._alarms(model)

    def _run_schedule(self, model: GovernanceModel, schedule: Duration) -> Duration:
        """``schedule``, shortened to ``market.SCHEDULE_LIMIT`` when the controller drains Slurm nodes or
        requeues Batch jobs (the drain and requeue come with the runs); warns of fed Slurm pools with no head node."""
        limit = Duration.minutes(int(SCHEDULE_LIMIT.total_seconds() // 60))
        feeds_batch = any(w.feeds.kind == CONSUMER_BATCH_COMPUTE_ENVIRONMENT for w in model.capacity_windows)
        if (self.slurm_head_nodes or feeds_batch) and schedule.to_seconds() > limit.to_seconds():
            schedule = limit
        unreached = [pool for pool in _slurm_pools_fed(model) if pool not in self.slurm_head_nodes]
        if unreached:  # deployable (the head node may not be known yet), but the window's nodes are left as they are
            Annotations.of(self).add_warning_v2(
                "gpu-governance:slurm-head-node",
                (
                    f"capacity windows feed hyperpod_slurm pools {unreached} but slurm_head_nodes names no head node for them: their nodes are "
                    "neither drained before a plan ends nor resumed after (the controller reports it every run, ConsumerErrors)"
                ),
            )
        return schedule

    def _add_controller_function(self, model: GovernanceModel, schedule: Duration) -> None:
        windows = model.capacity_windows
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

    def _add_triggers(self, model: GovernanceModel, schedule: Duration) -> None:
        """What runs the function: its schedule, EC2's Capacity Block events, capacity requests, the
        windows' alarms and updates of the stacks holding a raised quota."""
        windows = model.capacity_windows
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

    def _alarms(self, model: GovernanceModel) -> None:
        for name, source, threshold, periods, description in self._alarm_specs(model):
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

    def _alarm_specs(self, model: GovernanceModel) -> list[tuple[str, cloudwatch.IMetric, int, int, str]]:
        """(name, metric, threshold, periods that must breach in a row, description) of every alarm."""
        published = [
            (name, self.metric(name, **({"statistic": statistic} if statistic else {})), 0, periods, description)
            for name, statistic, periods, description in PUBLISHED_METRIC_ALARMS
        ]
        return [
            *published,
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
