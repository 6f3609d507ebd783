"""The reclaim / preemption controller: a scheduled Lambda that gives AWS Batch fair-share
queues and HyperPod Slurm the model's lend / borrow / reclaim semantics, observes Batch
quota-share queues and the Kueue ClusterQueues of HyperPod EKS clusters, and publishes per-team
metrics, alarms and a dashboard.

Minimal use, in the capacity account's stack::

    ReclaimController(self, "ReclaimController", model=model, targets=[
        ReclaimTarget(pool="ec2-gpu", job_queue_arn=queue.job_queue_arn),
    ])

Dry run by default: it plans, logs every decision and publishes metrics, and acts only with
``dry_run=False``.

Every ``hyperpod_slurm`` pool it knows the head node of (a target, or one of ``usage_targets``
for a pool it only observes) gets hourly usage from Slurm accounting (docs/chargeback.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import (
    Duration,
    Stack,
    Token,
    aws_cloudwatch as cloudwatch,
    aws_cloudwatch_actions as actions,
    aws_ec2 as ec2,
    aws_eks_v2 as eks,
    aws_events as events,
    aws_events_targets as event_targets,
    aws_lambda_destinations as lambda_destinations,
    aws_sns as sns,
)
from constructs import Construct

from constructs_lib.backends import backend_of, backends_where
from constructs_lib.controllers import reclaim_policy
from constructs_lib.controllers.base import GovernanceController, vpc_problems
from constructs_lib.core.chargeback import (
    reclaim_dashboard_name,
    route_alarm,
    subscribe_alerts,
    tag_for_cost_allocation,
    team_alert_topic,
)
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.placement import cluster_placement_problems, team_scope
from constructs_lib.core.runtime_asset import runtime_code
from constructs_lib.model import GovernanceModel
from constructs_lib.model.capacity import raising_windows
from constructs_lib.model.policy import policy_json
from gpu_governance_runtime.common.action_ledger import FUNCTION_TIMEOUT_SECONDS
from gpu_governance_runtime.contract import (
    EKS_USAGE_READER_GROUP,
    ENV_DRY_RUN,
    ENV_IN_VPC,
    ENV_LEDGER_TABLE,
    ENV_MAX_PREEMPTIONS_PER_TICK,
    ENV_METRICS_NAMESPACE,
    ENV_MIN_RUN_TIME_S,
    ENV_RAISED_GUARANTEES,
    ENV_RECLAIM_TARGETS,
    ENV_TICK_SECONDS,
    ENV_USAGE_TARGETS,
    MISSING_API_OPERATIONS,
    POOL_ERRORS,
    RECLAIM_NAMESPACE,
    SHARE_DIMENSIONS,
    raised_guarantees_parameter,
)

NAMESPACE = RECLAIM_NAMESPACE
POOL_ERROR_TICKS = 3
# Each a graph of every team's share on the pool's reclaim dashboard.
SHARE_GRAPHS = ("Guaranteed", "InUse", "Borrowed", "Lent")


@dataclass(frozen=True, kw_only=True)
class ReclaimTarget:
    """One governed pool. Batch pools (fair share: acted on; quota share: observed) need
    ``job_queue_arn``; a HyperPod Slurm pool needs the head node's SSM target
    ``head_node_instance_id`` and the ``instance_type`` its partitions hold. A HyperPod EKS pool
    (observed for usage only) needs nothing more: the model names its EKS cluster and
    ``gpus_per_instance``, and the cluster must be in this stack's account and region."""

    pool: str
    job_queue_arn: str | None = None
    head_node_instance_id: str | None = None
    instance_type: str | None = None


class ReclaimController(GovernanceController):
    """Exposes ``function``, ``role``, ``ledger``, ``topic``, ``alarms`` and ``dashboard``.

    ``schedule``: tick interval (default 1 minute); ``starved_ticks``: ticks a team may wait below
    its guarantee before its alarm fires (default 3); ``min_run_time`` (default one tick: longer
    makes reclaims take older victims, docs/performance.md) and ``max_preemptions_per_tick``: the
    planner's anti-thrash limits. Each pool's re-borrow backoff and borrow horizon are in the model
    (``reclaim`` of the pool). ``usage_targets``:
    ``hyperpod_slurm`` pools (head node and instance type, as in ``targets``) whose usage is read
    from Slurm accounting without reclaiming them (default none; Slurm targets get it anyway).
    ``vpc`` (with optional ``vpc_subnets`` and ``security_groups``): run the function in that VPC,
    e.g. the one of a HyperPod EKS cluster whose API endpoint is private (default: outside any VPC;
    what the VPC must then provide: docs/hyperpod-eks.md, Usage metrics). Let the cluster's security
    group accept it with ``cluster_sg.connections.allow_from(controller.function, ec2.Port.tcp(443))``.
    """

    namespace = NAMESPACE

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: GovernanceModel,
        targets: Sequence[ReclaimTarget],
        dry_run: bool = True,
        schedule: Duration = Duration.minutes(1),
        starved_ticks: int = 3,
        min_run_time: Duration = Duration.minutes(1),
        max_preemptions_per_tick: int = 20,
        usage_targets: Sequence[ReclaimTarget] = (),
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] = (),
    ) -> None:
        _check(
            model,
            targets,
            starved_ticks,
            max_preemptions_per_tick,
            Stack.of(scope),
            usage_targets,  # before any resource exists
            vpc_problems(vpc, vpc_subnets, security_groups),
        )
        super().__init__(
            scope,
            id,
            controller_id=f"{model.organisation}-reclaim",
            ledger_key="action_id",
            ledger_expiry_attribute="expires_at",
            ledger_backup_reason="Point-in-time recovery (35 days) backs up the action ledger; its items expire after a week "
            "and only guard against acting twice, so a separate backup plan adds nothing.",
            topic_name="GPU reclaim controller alarms",
            role_description="Reclaim controller: reads GPU queues, preempts planned victims",
            role_name=reclaim_controller_role_name(model.organisation),
            vpc=vpc,
            vpc_subnets=vpc_subnets,
            security_groups=security_groups,
        )
        self.model, self.targets, self.usage_targets, self.schedule = (
            model,
            tuple(targets),
            tuple(usage_targets),
            schedule,
        )
        # A capacity window raising a share of a governed pool: plan and report with the raise (capacity/raised.py).
        self.raised_guarantees = (
            raised_guarantees_parameter(model.organisation)
            if {w.feeds.pool for w in raising_windows(model)} & {t.pool for t in targets}
            else None
        )
        self._add_function(
            handler="gpu_governance_runtime.reclaim.handler.handler",
            code=runtime_code(policy_json(model)),
            # The handler never starts an action it cannot finish within this (the runtime's contract).
            timeout=Duration.seconds(FUNCTION_TIMEOUT_SECONDS),
            memory_size=1024,
            environment=self._environment(dry_run, min_run_time, max_preemptions_per_tick, in_vpc=vpc is not None),
            vpc_reason="The controller calls public AWS APIs (Batch, SSM, DynamoDB, EKS) and the public API endpoints of "
            "observed HyperPod EKS clusters (docs/hyperpod-eks.md, Usage metrics); a VPC would add NAT cost and no isolation.",
        )
        self._grant()
        self._schedule_ticks()
        subscribe_alerts(self.topic, model)
        self.team_topics: dict[str, sns.Topic | None] = {}  # per team with alarms: its owner's topic
        self._alarms(starved_ticks)
        self.dashboards = {target.pool: self._dashboard(target.pool) for target in self.targets}

    def _environment(
        self, dry_run: bool, min_run_time: Duration, max_preemptions_per_tick: int, *, in_vpc: bool
    ) -> dict[str, str]:
        """The handler's settings: its targets, the Slurm pools it reads usage of, and its limits."""
        model = self.model
        slurm_usage = [
            _usage_entry(model, t)
            for t in (*self.targets, *self.usage_targets)
            if backend_of(model.pool(t.pool)).reached_on_head_node
        ]
        return {
            ENV_RECLAIM_TARGETS: json.dumps([_target_entry(t, model) for t in self.targets], sort_keys=True),
            ENV_LEDGER_TABLE: self.ledger.table_name,
            ENV_DRY_RUN: "true" if dry_run else "false",
            ENV_METRICS_NAMESPACE: NAMESPACE,
            ENV_MIN_RUN_TIME_S: str(min_run_time.to_seconds()),
            ENV_MAX_PREEMPTIONS_PER_TICK: str(max_preemptions_per_tick),
            ENV_TICK_SECONDS: str(int(self.schedule.to_seconds())),
            **({ENV_USAGE_TARGETS: json.dumps(slurm_usage, sort_keys=True)} if slurm_usage else {}),
            **({ENV_RAISED_GUARANTEES: self.raised_guarantees} if self.raised_guarantees else {}),
            **({ENV_IN_VPC: "true"} if in_vpc else {}),  # private EKS endpoints are then worth trying
        }

    def _schedule_ticks(self) -> None:
        """One tick per ``schedule``, never retried."""
        # A missed tick is not worth retrying: the next one reads the queue afresh. Neither is a
        # failed one: Lambda retries a failed asynchronous invocation twice by default, which would
        # run two ticks within a minute (the ledger also caps preemptions per pool and minute).
        self.function.configure_async_invoke(
            retry_attempts=0,
            max_event_age=Duration.minutes(1),
            on_failure=lambda_destinations.SqsDestination(self.dead_letters),
        )
        target = event_targets.LambdaFunction(
            self.function, dead_letter_queue=self.dead_letters, retry_attempts=0, max_event_age=Duration.minutes(1)
        )
        events.Rule(self, "Schedule", schedule=events.Schedule.rate(self.schedule), targets=[target])

    def metric_share(
        self, pool: str, share: str, metric_name: str, *, statistic: str = "Maximum", period: Duration | None = None
    ) -> cloudwatch.Metric:
        """A per-share metric the handler publishes (Guaranteed, InUse, Borrowed, Lent, Pending,
        Preemptions, LostCapacitySeconds, StarvedBelowGuarantee), over ``period`` (default: one tick)."""
        return self.metric(
            metric_name,
            dimensions=dict(zip(SHARE_DIMENSIONS, (pool, share), strict=True)),
            statistic=statistic,
            period=period or self.schedule,
        )

    def metric_pool_errors(self, pool: str) -> cloudwatch.Metric:
        """1 for each tick of the pool that raised (reading the pool or writing the ledger failed);
        the other pools were still served and the invocation succeeded."""
        return self.metric(POOL_ERRORS, dimensions={"Pool": pool}, statistic="Sum", period=self.schedule)

    def metric_missing_api_operations(self) -> cloudwatch.Metric:
        """Published by every cold start that refuses to run: the count of operations the handler
        calls that the Lambda runtime's boto3 lacks (no dimensions)."""
        return self.metric(MISSING_API_OPERATIONS, period=self.schedule)

    def _every_share(self, pool: str, metric_name: str, statistic: str) -> cloudwatch.MathExpression:
        # One search expression draws every share of the pool: a dashboard holds at most 2,500
        # metrics, and one metric per team and graph would reach that near 200 teams.
        search = f"SEARCH('{{{NAMESPACE},Pool,Share}} MetricName=\"{metric_name}\" Pool=\"{pool}\"', '{statistic}', {int(self.schedule.to_seconds())})"
        return cloudwatch.MathExpression(expression=search, using_metrics={}, label="", period=self.schedule)

    def _grant(self) -> None:
        """The role's policy (controllers/reclaim_policy.py), and its Kubernetes identity on each
        observed EKS cluster: a group that may only get and list ClusterQueues."""
        statements = reclaim_policy.statements(
            Stack.of(self),
            self.model,
            self.targets,
            self.usage_targets,
            ledger_arn=self.ledger.table_arn,
            raised_guarantees=self.raised_guarantees,
        )
        self.usage_access_entries = {
            name: eks.CfnAccessEntry(
                self,
                f"UsageAccess{_pascal(name)}",
                cluster_name=name,
                principal_arn=self.role.role_arn,
                type="STANDARD",
                kubernetes_groups=[EKS_USAGE_READER_GROUP],
            )
            for name in reclaim_policy.observed_eks_clusters(self.model, self.targets)
        }
        for statement in statements:
            self.role.add_to_policy(statement)
        self.key.grant_encrypt_decrypt(self.role)
        reclaim_policy.acknowledge_policy(
            self.role.node.find_child("DefaultPolicy"), statements, self.model, self.targets
        )

    def _alarms(self, starved_ticks: int) -> None:
        specs = (
            [
                (
                    (team, t.pool),
                    f"Starved{_pascal(t.pool)}{_pascal(team.name)}",
                    self.metric_share(t.pool, team.name, "StarvedBelowGuarantee"),
                    starved_ticks,
                    f"team {team.name} waited below its guarantee in pool {t.pool} for {starved_ticks} ticks",
                )
                for t in self.targets
                for team in self.model.teams_in(t.pool)
            ]
            + [
                # A single failed tick is retried by the next; a pool unread for POOL_ERROR_TICKS ticks
                # is also a pool whose share metrics (and starvation alarms) have gone silent.
                (
                    None,
                    f"PoolErrors{_pascal(t.pool)}",
                    self.metric_pool_errors(t.pool),
                    POOL_ERROR_TICKS,
                    f"the reclaim controller could not read or act on pool {t.pool} for {POOL_ERROR_TICKS} ticks (see its pool_failed log lines)",
                )
                for t in (*self.targets, *self.usage_targets)
            ]
            + [
                (
                    None,
                    "ControllerErrors",
                    self.function.metric_errors(period=self.schedule),
                    1,
                    "the reclaim controller failed",
                ),
                (
                    None,
                    "MissingApiOperations",
                    self.metric_missing_api_operations(),
                    1,
                    "the Lambda runtime's boto3 lacks operations the reclaim controller calls; it refuses to start (see its ERROR log line)",
                ),
                (
                    None,
                    "DeadLetters",
                    self.dead_letters.metric_approximate_number_of_messages_visible(period=Duration.minutes(5)),
                    1,
                    "a reclaim tick was not delivered",
                ),
            ]
        )
        for owner, name, metric, periods, description in specs:
            team, pool = owner or (None, None)
            scope = self if team is None else team_scope(self, team.name)
            alarm = self._add_alarm(
                scope,
                name,
                metric,
                threshold=1,
                periods=periods,
                description=description,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            )
            route_alarm(alarm, self.model)
            if team is not None:  # the team's owner hears of it too
                if team.name not in self.team_topics:
                    self.team_topics[team.name] = team_alert_topic(self, team, self.key)
                if self.team_topics[team.name] is not None:
                    alarm.add_alarm_action(actions.SnsAction(self.team_topics[team.name]))
                tag_for_cost_allocation(alarm, team, pool)

    def _dashboard(self, pool: str) -> cloudwatch.Dashboard:
        """One dashboard per pool, every team a line of one search per graph: no dashboard grows
        with the teams (organisation/limits.py RECLAIM_DASHBOARD_WIDGETS counts its widgets). A
        search draws at most 500 series
        (https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_cloudwatch.SearchExpressionProps.html);
        each team's own dashboard (organisation/chargeback.py) shows the team in full."""
        dashboard = cloudwatch.Dashboard(
            self, f"Dashboard{_pascal(pool)}", dashboard_name=reclaim_dashboard_name(self.model.organisation, pool)
        )
        dashboard.add_widgets(cloudwatch.TextWidget(markdown=f"## Pool {pool}", width=24, height=1))
        dashboard.add_widgets(
            *(
                cloudwatch.GraphWidget(
                    title=f"{metric} (instances, per team)", width=6, left=[self._every_share(pool, metric, "Maximum")]
                )
                for metric in SHARE_GRAPHS
            )
        )
        if not backend_of(self.model.pool(pool)).preemptions_seen:  # Kueue preempts natively: no preemptions are read
            dashboard.add_widgets(
                cloudwatch.GraphWidget(
                    title="waiting workloads (Kueue)", width=8, left=[self._every_share(pool, "Pending", "Maximum")]
                )
            )
            return dashboard
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="pending work (instances)", width=8, left=[self._every_share(pool, "Pending", "Maximum")]
            ),
            cloudwatch.GraphWidget(title="preemptions", width=8, left=[self._every_share(pool, "Preemptions", "Sum")]),
            cloudwatch.GraphWidget(
                title="capacity-seconds lost to preemption",
                width=8,
                left=[self._every_share(pool, "LostCapacitySeconds", "Sum")],
            ),
        )
        return dashboard


def reclaim_controller_role_name(organisation: str) -> str:
    """The fixed name the reclaim controller's role carries, so the organisation's SCP can exempt
    it from the quota-share and compute-quota updates of GPU-hour limits (organisation/guardrails.py)."""
    return f"{organisation}-capacity-reclaimer"  # a role of the capacity stack (model.base.library_role)


def _target_entry(target: ReclaimTarget, model: GovernanceModel) -> dict:
    """The target's entry of the handler's RECLAIM_TARGETS (its backend's ``reclaim`` module says what it holds)."""
    pool = model.pool(target.pool)
    return backend_of(pool).part("reclaim").entry(target, pool)


# A pool that is an AWS Batch job queue, as its backend's ``reclaim`` module takes it.


def job_queue_target(pool, queue) -> ReclaimTarget:
    """The deployed queue's target: the reclaim controller reads (and acts on) the queue."""
    return ReclaimTarget(pool=pool.name, job_queue_arn=queue.job_queue_arn)


def job_queue_entry(target: ReclaimTarget, pool) -> dict:
    return {"pool": target.pool, "job_queue": target.job_queue_arn}


def job_queue_problems(path: str, target: ReclaimTarget, pool, stack: Stack) -> list[Problem]:
    if target.job_queue_arn and (Token.is_unresolved(target.job_queue_arn) or ":job-queue/" in target.job_queue_arn):
        return []
    return [
        Problem(
            path=f"{path}.job_queue_arn",
            wrong="missing or not a job queue ARN",
            value=target.job_queue_arn,
            allowed="arn:aws:batch:<region>:<account>:job-queue/<name>",
        )
    ]


# A pool on an EKS cluster whose Kueue ClusterQueues the controller reads (usage only: Kueue
# reclaims natively), as its backend's ``reclaim`` module takes it.


def eks_cluster_target(pool, cluster) -> ReclaimTarget | None:
    """Observed for usage once the governance file gives the pool's GPUs per instance."""
    return ReclaimTarget(pool=pool.name) if pool.gpus_per_instance else None


def eks_cluster_problems(path: str, target: ReclaimTarget, pool, stack: Stack) -> list[Problem]:
    """Usage is reported in instances of the pool's types (Kueue counts GPUs), and the role's
    access entry can only be made on a cluster of this stack's account and region."""
    found = [
        Problem(
            path=f"{path}.pool",
            wrong=f"the pool declares no gpus_per_instance for {instance_type}",
            value=pool.name,
            allowed="gpus_per_instance (GPUs of one instance, 1-64) for every instance type of the pool's capacity",
        )
        for instance_type in sorted(set(pool.capacity) - set(pool.gpus_per_instance))
    ]
    return found + cluster_placement_problems(
        f"{path}.pool", pool.cluster_arn, stack, subject="the pool's cluster", deployer="the controller"
    )


def _usage_entry(model: GovernanceModel, target: ReclaimTarget) -> dict:
    gpus = model.pool(target.pool).gpus_per_instance[target.instance_type]  # slurm_problems requires it for every type
    return {**_target_entry(target, model), "gpus_per_instance": gpus}


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("_", "-").split("-"))


def _check(
    model: GovernanceModel,
    targets: Sequence[ReclaimTarget],
    starved_ticks: int,
    max_preemptions: int,
    stack: Stack,
    usage_targets: Sequence[ReclaimTarget] = (),
    placement_problems: Sequence[Problem] = (),
) -> None:
    problems: list[Problem] = list(placement_problems)
    pools = {p.name: p for p in model.pools}
    if not targets and not usage_targets:
        problems.append(
            Problem(path="targets", wrong="no pool to govern", value=[], allowed="at least one ReclaimTarget")
        )
    seen: set[str] = set()
    for path, target in [(f"targets[{i}]", t) for i, t in enumerate(targets)] + [
        (f"usage_targets[{i}]", t) for i, t in enumerate(usage_targets)
    ]:
        pool = pools.get(target.pool)
        if target.pool in seen:
            problems.append(
                Problem(path=f"{path}.pool", wrong="pool governed twice", value=target.pool, allowed="each pool once")
            )
        seen.add(target.pool)
        if pool is None:
            problems.append(
                Problem(
                    path=f"{path}.pool", wrong="undeclared pool", value=target.pool, allowed=f"one of {sorted(pools)}"
                )
            )
            continue
        if path.startswith("usage_") and not backend_of(pool).reached_on_head_node:
            problems.append(
                Problem(
                    path=f"{path}.pool",
                    wrong=f"a {pool.backend} pool",
                    value=target.pool,
                    allowed=f"a {' or '.join(backends_where(lambda b: b.reached_on_head_node))} pool (the other backends' usage comes with their targets)",
                )
            )
        else:
            problems += backend_of(pool).part("reclaim").problems(path, target, pool, stack)
    if not 1 <= starved_ticks <= 100:
        problems.append(Problem(path="starved_ticks", wrong="out of range", value=starved_ticks, allowed="1-100"))
    if not 0 <= max_preemptions <= 1000:
        problems.append(
            Problem(path="max_preemptions_per_tick", wrong="out of range", value=max_preemptions, allowed="0-1000")
        )
    if problems:
        raise GovernanceError(problems)
