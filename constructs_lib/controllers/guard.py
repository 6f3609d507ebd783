"""The submission guard: a Lambda on Batch service-job state changes of the governed quota-share
queues that checks what IAM cannot see, the SageMaker payload of each service job
[aws: batch-iam.service-job-payload-unchecked], against the submitting team (code:
``gpu_governance_runtime.guard``; docs/security.md).

Minimal use, in the capacity account's stack::

    SubmissionGuard(self, "SubmissionGuard", model=model, job_queues={"sagemaker-training": queue.job_queue_arn})

Dry run by default: it records and alerts, and stops jobs (``TerminateServiceJob``) only with
``dry_run=False``.
"""

from __future__ import annotations

import json
from collections.abc import Container, Mapping

from aws_cdk import (
    ArnFormat,
    Duration,
    Stack,
    Token,
    aws_cloudwatch as cloudwatch,
    aws_events as events,
    aws_events_targets as event_targets,
    aws_iam as iam,
    aws_sns as sns,
)
from constructs import Construct

from constructs_lib.backends import backend_of, backends_where
from constructs_lib.controllers.base import GovernanceController
from constructs_lib.core.acknowledgements import acknowledge, acknowledge_wildcard_resources
from constructs_lib.core.chargeback import route_alarm, subscribe_alerts, team_alert_topic
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.runtime_asset import runtime_code
from constructs_lib.model import TRAINING_ROLE_SUFFIX, GovernanceModel, repository_name, team_role_arn
from constructs_lib.model.policy import policy_json
from constructs_lib.model.run_limits import any_class_max_run_minutes, max_run_by_weight
from gpu_governance_runtime.common.action_ledger import FUNCTION_TIMEOUT_SECONDS
from gpu_governance_runtime.contract import (
    ENV_DEAD_LETTERS_URL,
    ENV_DRY_RUN,
    ENV_GUARD_NAMES,
    ENV_GUARD_QUEUES,
    ENV_LEDGER_TABLE,
    ENV_TOPIC_ARN,
    GUARD_FILE_NAME,
    GUARD_NAMESPACE,
    GUARDED_STATES,
    MISSING_API_OPERATIONS,
    SERVICE_JOB_EVENT,
    TAG_TEAM,
    TEAM_PLACEHOLDER,
)

GUARDED = backends_where(lambda b: b.guards_submissions)  # the backends whose queues the guard watches
# How many events it checks at once (docs/security.md, "Beyond IAM, row 4"). Batch accepts 5
# SubmitServiceJob a second per account [aws: events.submit-service-job-rate]; a job sends about
# four guarded state changes, of which two cost a DescribeServiceJob (the first, and the first that
# names its training job; the others find the job admitted in the ledger): at most about 20 events
# and 10 reads a second. An event takes about 0.3 s to check (a read, a tag read, a ledger write) or
# 0.05 s once admitted: about 3.5 at once at that peak. Ten leave room for cold starts and retries
# while bounding the guard's share of the account's Batch reads, whose rate no page gives
# [aws: events.describe-service-job-rate].
CONCURRENCY = 10
# How long throttled events wait in Lambda's queue: the longest Lambda allows. Older ones are
# dead-lettered and checked again every REDRIVE_EVERY.
MAX_EVENT_AGE = Duration.hours(6)
REDRIVE_EVERY = Duration.minutes(10)
# Lambda retries a failed event after one minute, then two: an older event was throttled, or more.
EVENT_AGE_ALARM = Duration.minutes(5)


class SubmissionGuard(GovernanceController):
    """Exposes ``function``, ``role``, ``ledger``, ``topic`` (the platform's: the organisation's
    alert emails), ``team_topics`` (each guarded team with an ``owner``: its owner's topic),
    ``rule`` and ``alarms``. ``job_queues``: pool name -> job queue ARN, for ``batch_quota_share``
    pools (the queues the organisation's teams submit service jobs to)."""

    namespace = GUARD_NAMESPACE

    def __init__(
        self, scope: Construct, id: str, *, model: GovernanceModel, job_queues: Mapping[str, str], dry_run: bool = True
    ) -> None:
        _check(model, job_queues)
        super().__init__(
            scope,
            id,
            controller_id=f"{model.organisation}-guard",
            ledger_key="action_id",
            ledger_expiry_attribute="expires_at",
            ledger_backup_reason="Point-in-time recovery (35 days) backs up the guard's ledger; its items expire after a week and only "
            "keep one job from being stopped or reported twice (the log group keeps each decision for a year).",
            topic_name="GPU submission guard",
            role_description="Submission guard: reads service jobs, stops those outside their team",
        )
        stack = Stack.of(self)
        self.model, self.job_queues = model, dict(job_queues)
        self.team_topics = self._team_topics()
        team_topic_pattern = stack.format_arn(
            service="sns", resource=guard_topic_name(model.organisation, TEAM_PLACEHOLDER)
        )
        self._add_guard_function(stack, team_topic_pattern, dry_run)
        self.rule = self._rules()
        self._grant(stack, team_topic_pattern.replace(TEAM_PLACEHOLDER, "*") if self.team_topics else None)
        subscribe_alerts(self.topic, model)
        self._alarms(model)

    def _team_topics(self) -> dict[str, sns.Topic]:
        """Each guarded team's alert topic, where its owner hears of its stopped jobs."""
        model = self.model
        guarded = {team.name: team for pool in sorted(self.job_queues) for team in model.teams_in(pool)}
        # Named, and referred to by ARN: with stack_layout per_team they are in the team stacks, which
        # depend on this one (a reference to them from here would be a dependency cycle).
        return {
            name: topic
            for name in sorted(guarded)
            if (
                topic := team_alert_topic(
                    self, guarded[name], self.key, topic_name=guard_topic_name(model.organisation, name)
                )
            )
            is not None
        }

    def _add_guard_function(self, stack: Stack, team_topic_pattern: str, dry_run: bool) -> None:
        """The function, its package's guard file and its environment, and how its events are retried."""
        model, job_queues = self.model, self.job_queues
        names = {
            "execution_role_arn": team_role_arn(stack.account, TEAM_PLACEHOLDER, TRAINING_ROLE_SUFFIX, stack.partition),
            "registry": f"{stack.account}.dkr.ecr.{stack.region}.{stack.url_suffix}",
            "team_topic": team_topic_pattern,
        }
        queues = [{"job_queue": arn, "pool": pool} for pool, arn in sorted(job_queues.items())]
        document = _guard_document(model, job_queues, owners=self.team_topics)
        self._add_function(
            handler="gpu_governance_runtime.guard.handler.handler",
            code=runtime_code(policy_json(model), {GUARD_FILE_NAME: json.dumps(document, indent=2, sort_keys=True)}),
            # Its claims in the ledger go stale after this (the reclaim ledger's contract, reused).
            timeout=Duration.seconds(FUNCTION_TIMEOUT_SECONDS),
            memory_size=256,
            environment={
                ENV_GUARD_QUEUES: stack.to_json_string(queues),
                ENV_GUARD_NAMES: stack.to_json_string(names),
                ENV_LEDGER_TABLE: self.ledger.table_name,
                ENV_TOPIC_ARN: self.topic.topic_arn,
                ENV_DEAD_LETTERS_URL: self.dead_letters.queue_url,
                ENV_DRY_RUN: "true" if dry_run else "false",
            },
            reserved_concurrency=CONCURRENCY,
            vpc_reason="The guard calls only public AWS APIs (Batch, SageMaker, SNS, SQS, DynamoDB); a VPC would add NAT cost and no isolation.",
        )
        # The rule's events reach the function through Lambda's asynchronous queue
        # [aws: events.eventbridge-invokes-lambda-asynchronously]. Lambda retries an event the guard could not
        # decide twice [aws: events.lambda-async-retries], then dead-letters it; throttled events wait in the
        # queue up to MAX_EVENT_AGE [aws: events.lambda-async-throttled-events-wait].
        self.function.configure_async_invoke(retry_attempts=2, max_event_age=MAX_EVENT_AGE)
        acknowledge(
            self.function.node.find_child("EventInvokeConfig"),
            "The function's dead-letter queue receives each event that exhausts its retries as the event itself, which the "
            "guard's scheduled redrive checks again; an on-failure destination would add a second copy in another shape.",
            "Serverless-LambdaAsyncFailureDestination",
        )

    def _rules(self) -> events.Rule:
        """The service jobs' state changes, and the redrive of what was dead-lettered."""
        # Every state before the training job runs, and RUNNING as the last chance; a repeated event finds the
        # ledger's claim. EventBridge's own retries cover only handing the event to Lambda
        # [aws: events.eventbridge-retries-delivery-only]: as long and as often as it allows.
        source, detail_type = SERVICE_JOB_EVENT
        rule = events.Rule(
            self,
            "ServiceJobStates",
            targets=[
                event_targets.LambdaFunction(
                    self.function,
                    dead_letter_queue=self.dead_letters,
                    retry_attempts=185,
                    max_event_age=Duration.hours(24),
                )
            ],
            event_pattern=events.EventPattern(
                source=[source],
                detail_type=[detail_type],
                detail={
                    "jobQueue": [arn for _, arn in sorted(self.job_queues.items())],
                    "status": list(GUARDED_STATES),
                },
            ),
        )
        # The dead-lettered events, checked again until they are read (handler.redrive).
        events.Rule(
            self,
            "Redrive",
            schedule=events.Schedule.rate(REDRIVE_EVERY),
            targets=[
                event_targets.LambdaFunction(
                    self.function, dead_letter_queue=self.dead_letters, retry_attempts=0, max_event_age=REDRIVE_EVERY
                )
            ],
        )
        return rule

    def _alarms(self, model: GovernanceModel) -> None:
        """Every way an event waits, fails or is lost: the metrics of the asynchronous path
        [aws: events.lambda-async-metrics] and of the rule [aws: events.eventbridge-failed-invocations]."""
        every = Duration.minutes(5)
        for name, metric, threshold, description in (
            (
                "ControllerErrors",
                self.function.metric_errors(period=every),
                1,
                "the submission guard could not decide on a job (a read or a stop failed): the event is retried, "
                "then dead-lettered and checked again every ten minutes",
            ),
            (
                "Throttles",
                self.function.metric_throttles(period=every),
                1,
                "more service job events at once than the submission guard's reserved concurrency: they wait in Lambda's queue",
            ),
            (
                "EventAge",
                self.function.metric("AsyncEventAge", statistic="Maximum", period=every),
                EVENT_AGE_ALARM.to_milliseconds(),
                "service job events waited more than five minutes for the submission guard (throttled, or retried after errors)",
            ),
            (
                "DeliveryFailures",
                cloudwatch.Metric(
                    namespace="AWS/Events",
                    metric_name="FailedInvocations",
                    dimensions_map={"RuleName": self.rule.rule_name},
                    statistic="Sum",
                    period=every,
                ),
                1,
                "EventBridge could not hand a service job state change to the submission guard (retried for a day, "
                "then dead-lettered)",
            ),
            (
                "DeadLetters",
                self.dead_letters.metric_approximate_number_of_messages_visible(period=every),
                1,
                "service job events the submission guard could not check yet: it checks them again every ten minutes",
            ),
            (
                "DeadLetterErrors",
                self.function.metric("DeadLetterErrors", statistic="Sum", period=every),
                1,
                "an event the submission guard could not check was lost: Lambda could not write it to the dead-letter queue",
            ),
            (
                "MissingApiOperations",
                self.metric(MISSING_API_OPERATIONS, period=every),
                1,
                "the Lambda runtime's boto3 lacks operations the submission guard calls; it refuses to start",
            ),
        ):
            route_alarm(
                self._add_alarm(
                    self,
                    name,
                    metric,
                    threshold=threshold,
                    periods=1,
                    description=description,
                    comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                ),
                model,
            )

    def _grant(self, stack: Stack, team_topics: str | None) -> None:
        service_jobs = stack.format_arn(
            service="batch", resource="service-job", resource_name="*", arn_format=ArnFormat.SLASH_RESOURCE_NAME
        )
        plans, training_jobs = (
            stack.format_arn(
                service="sagemaker", resource=resource, resource_name="*", arn_format=ArnFormat.SLASH_RESOURCE_NAME
            )
            for resource in ("training-plan", "training-job")
        )
        statements = [
            iam.PolicyStatement(
                actions=["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
                resources=[self.ledger.table_arn],
            ),
            # Its own dead-letter queue, whose events it checks again (the key policy lets it decrypt them).
            iam.PolicyStatement(
                actions=["sqs:ReceiveMessage", "sqs:DeleteMessage"], resources=[self.dead_letters.queue_arn]
            ),
            iam.PolicyStatement(actions=["batch:DescribeServiceJob"], resources=["*"]),  # no resource-level permission
            # Only service jobs with a team tag: the governed teams' (every job of a governed queue
            # carries its team's, which no team may change or remove, backends/batch_queue.py). Not a list of
            # the teams: that would grow the inline policy past IAM's 10,240 characters at a few
            # hundred teams.
            iam.PolicyStatement(
                actions=["batch:TerminateServiceJob"],
                resources=[service_jobs],
                conditions={"Null": {f"aws:ResourceTag/{TAG_TEAM}": "false"}},
            ),
            # Whose plan a payload names, and which tags the training job Batch created carries.
            iam.PolicyStatement(actions=["sagemaker:ListTags"], resources=[plans, training_jobs]),
            iam.PolicyStatement(
                actions=["sns:Publish"], resources=[self.topic.topic_arn, *filter(None, [team_topics])]
            ),
        ]
        for statement in statements:
            self.role.add_to_policy(statement)
        policy = self.role.node.find_child("DefaultPolicy")
        acknowledge(
            policy,
            "An inline policy keeps the permission to stop service jobs with this one role; a managed policy could be "
            "attached to other principals.",
            "IAMNoInlinePolicy",
        )
        acknowledge_wildcard_resources(
            policy,
            ["*", service_jobs, plans, training_jobs, *filter(None, [team_topics])],
            "batch:DescribeServiceJob supports no resource-level permission; batch:TerminateServiceJob is limited to service jobs "
            "tagged with a governed team (their ids do not exist before submission); sagemaker:ListTags reads the tags of any "
            "training plan a payload names, to tell whose it is, and of the training jobs Batch creates (named by Batch); sns:Publish reaches the guard's own team owner topics by their "
            "name prefix (one ARN per team would outgrow the inline policy limit).",
        )


def _guard_document(model: GovernanceModel, job_queues: Mapping[str, str], owners: Container[str]) -> dict:
    """The package's guard file: what grows with the teams (Lambda allows 4 KB of environment in
    all); the environment keeps what only the deployment resolves (contract.GUARD_FILE_NAME).
    ``owners``: the teams with an alert topic."""
    return {
        "shared_repositories": [_repository_uri(arn) for arn in model.shared_image_repositories],
        "pools": {
            pool: {
                "teams": {
                    team.name: {
                        "repository_name": repository_name(model.organisation, team.name),
                        "cost_centre": team.cost_centre,
                        "owner": team.name in owners,
                        **_runtime_limits(model, team, model.pool(pool)),
                    }
                    for team in model.teams_in(pool)
                }
            }
            for pool in sorted(job_queues)
        },
    }


def _runtime_limits(model: GovernanceModel, team, pool) -> dict:
    """A team's run-time limits in the guard's document, in seconds (checks.TeamRules); none without one."""
    overall = any_class_max_run_minutes(team, pool, model.priority_classes)
    by_weight = max_run_by_weight(model, team, pool)
    limits = {"max_runtime_seconds": overall * 60} if overall is not None else {}
    if by_weight:
        limits["max_runtime_by_priority"] = {str(weight): minutes * 60 for weight, minutes in sorted(by_weight.items())}
    return limits


def guard_topic_name(organisation: str, team_name: str) -> str:
    """The name of the guard's topic for a team's owner (SNS: up to 256 letters, digits, - and _)."""
    return f"{organisation}-gpu-guard-{team_name}"


def _repository_uri(arn: str) -> str:
    """The image URI prefix of an ECR repository ARN: arn:<partition>:ecr:<region>:<account>:repository/<name>."""
    _, partition, _, region, account, resource = arn.split(":", 5)
    return (
        f"{account}.dkr.ecr.{region}.amazonaws.com{'.cn' if partition == 'aws-cn' else ''}/{resource.split('/', 1)[1]}"
    )


def _check(model: GovernanceModel, job_queues: Mapping[str, str]) -> None:
    pools = {p.name: p for p in model.pools}
    problems = (
        [
            Problem(
                path="job_queues",
                wrong="no queue to guard",
                value={},
                allowed=f"at least one {' or '.join(GUARDED)} pool name -> its job queue ARN",
            )
        ]
        if not job_queues
        else []
    )
    for pool, arn in job_queues.items():
        if pools.get(pool) is None or not backend_of(pools[pool]).guards_submissions:
            problems.append(
                Problem(
                    path=f"job_queues.{pool}",
                    wrong=f"not a {' or '.join(GUARDED)} pool",
                    value=pool,
                    allowed=f"one of {sorted(p for p in pools if pools[p].backend in GUARDED)}",
                )
            )
        if not Token.is_unresolved(arn) and ":job-queue/" not in str(arn):
            problems.append(
                Problem(
                    path=f"job_queues.{pool}",
                    wrong="not a job queue ARN",
                    value=arn,
                    allowed="arn:aws:batch:<region>:<account>:job-queue/<name>",
                )
            )
    if problems:
        raise GovernanceError(problems)
