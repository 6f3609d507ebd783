"""The quota-share job queue for SageMaker training jobs, under AWS Batch quota management.

It stays on L1s because aws-cdk-lib has no L2 for service environments, quota shares or
quota-share scheduling policies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import ArnFormat, Stack, aws_batch as batch, aws_iam as iam
from constructs import Construct

from constructs_lib.backends.base import Backend
from constructs_lib.backends.batch_queue import (
    MEMBER_TAG_KEYS_ONLY,
    TEAM_TAG,
    GovernedQueue,
    build_queue_pool,
)
from constructs_lib.core.chargeback import tag_for_cost_allocation
from constructs_lib.core.placement import team_scope
from constructs_lib.core.vocabulary import GOVERNANCE_METADATA, UNLIMITED_BORROW_LIMIT
from constructs_lib.model import BatchQuotaSharePool, GovernanceModel, SharingStrategy, Team
from constructs_lib.model.props import PoolGovernanceProps
from constructs_lib.model.quota import instance_quota
from constructs_lib.tenancy import TeamTenancy

from . import BACKEND

# Waiting RUNNABLE jobs whose reason says they can never run (they ask for more than the
# service environment or the quota share can ever hold) are terminated after the API's
# minimum of 10 minutes; jobs waiting for SageMaker capacity only after the pool's timeout.
_NEVER_RUNNABLE_REASONS = (
    "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
    "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
)
_CAPACITY_WAIT_REASON = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
_MIN_TIME_LIMIT_SECONDS = 600


@dataclass(frozen=True, kw_only=True)
class QuotaManagedTrainingQueueProps(PoolGovernanceProps):
    """Props of :class:`QuotaManagedTrainingQueue`: a ``batch_quota_share`` pool and its teams."""

    BACKEND: ClassVar[Backend] = BACKEND
    pool: BatchQuotaSharePool


class QuotaManagedTrainingQueue(GovernedQueue):
    """A SageMaker training job queue under AWS Batch quota management.

    Creates the SAGEMAKER_TRAINING service environment (capacity limits from ``pool.capacity``),
    a quota-share scheduling policy, the job queue and one ``AWS::Batch::QuotaShare`` per team
    with its capacity limits, sharing strategy, borrow limit and in-share preemption. Cross-share
    reclaim is always on in Batch. Each team's quota in ``team.quotas[pool.name]``.
    """

    WILDCARD_REASON = (
        "Service job ids do not exist before submission: service-job/* is limited to the team by the "
        "required team tag; DescribeServiceJob and ListServiceJobs support no resource-level permissions."
    )

    def __init__(self, scope: Construct, id: str, *, pool: BatchQuotaSharePool, teams: Sequence[Team]) -> None:
        super().__init__(scope, id, QuotaManagedTrainingQueueProps(pool=pool, teams=teams))
        limits = lambda capacity: [  # noqa: E731
            {"capacityUnit": unit, "maxCapacity": count} for unit, count in sorted(capacity.items())
        ]
        self.service_environment = batch.CfnServiceEnvironment(
            self,
            "ServiceEnvironment",
            service_environment_name=pool.name,
            service_environment_type="SAGEMAKER_TRAINING",
            capacity_limits=limits(pool.capacity),
            state="ENABLED",
        )
        self.scheduling_policy = batch.CfnSchedulingPolicy(
            self,
            "SchedulingPolicy",
            name=f"{pool.name}-quota-share",
            quota_share_policy=batch.CfnSchedulingPolicy.QuotaSharePolicyProperty(
                idle_resource_assignment_strategy="FIFO"
            ),
        )
        self.job_queue = batch.CfnJobQueue(
            self,
            "JobQueue",
            job_queue_name=pool.name,
            job_queue_type="SAGEMAKER_TRAINING",
            priority=1,
            scheduling_policy_arn=self.scheduling_policy.attr_arn,
            service_environment_order=[
                batch.CfnJobQueue.ServiceEnvironmentOrderProperty(
                    order=1, service_environment=self.service_environment.attr_service_environment_arn
                )
            ],
            job_state_time_limit_actions=self._time_limit_actions(pool),
            state="ENABLED",
        )
        self.quota_shares: dict[str, batch.CfnQuotaShare] = {}
        for team in self.teams:
            sharing = team.sharing
            sharing_config = {"strategy": sharing.strategy.value.upper()}
            if sharing.strategy is SharingStrategy.LEND_AND_BORROW:
                sharing_config["borrowLimit"] = (
                    UNLIMITED_BORROW_LIMIT if sharing.borrow_percent is None else sharing.borrow_percent
                )
            share = batch.CfnQuotaShare(
                team_scope(self, team.name),
                f"Share{team.name}",
                quota_share_name=team.name,
                job_queue=self.job_queue.attr_job_queue_arn,
                capacity_limits=limits(instance_quota(team, pool)),
                resource_sharing_configuration=sharing_config,
                preemption_configuration={
                    "inSharePreemption": "ENABLED" if sharing.in_share_preemption else "DISABLED"
                },
                # DISABLED: the share accepts no new job, those already submitted can still start and finish
                # [aws: batch.quota-share-disabled]; the reclaim controller terminates a paused team's queued jobs
                state="DISABLED" if team.paused else "ENABLED",
            )
            share.cfn_options.metadata = {
                GOVERNANCE_METADATA: {"team": team.name, "preset": team.preset.value if team.preset else None}
            }
            tag_for_cost_allocation(share, team, pool.name)  # Tags update in place (docs/chargeback.md)
            self.quota_shares[team.name] = share

    @staticmethod
    def _time_limit_actions(pool: BatchQuotaSharePool) -> list[batch.CfnJobQueue.JobStateTimeLimitActionProperty]:
        waits = [(reason, _MIN_TIME_LIMIT_SECONDS) for reason in _NEVER_RUNNABLE_REASONS]
        if pool.runnable_timeout_minutes is not None:
            waits.append((_CAPACITY_WAIT_REASON, pool.runnable_timeout_minutes * 60))
        return [
            batch.CfnJobQueue.JobStateTimeLimitActionProperty(
                action="TERMINATE", max_time_seconds=seconds, reason=reason, state="RUNNABLE"
            )
            for reason, seconds in waits
        ]

    def quota_share_arn(self, team_name: str) -> str:
        self._require_team(team_name)
        return Stack.of(self).format_arn(
            service="batch",
            resource="job-queue",
            resource_name=f"{self.pool.name}/quota-share/{team_name}",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )

    def submit_statements(self, team_name: str) -> list[iam.PolicyStatement]:
        """IAM for one team. Batch has no condition key for the quota share name; naming only the
        team's quota-share ARN as the optional resource of SubmitServiceJob restricts the share
        [aws: batch-iam.quota-share-resource], and the required team tag scopes terminate and
        update to the team's own jobs."""
        self._require_team(team_name)
        service_jobs = self._job_arn("service-job")
        team_tag_on_request = {"StringEquals": self._tags_on_request(team_name), **MEMBER_TAG_KEYS_ONLY}
        return [
            iam.PolicyStatement(
                actions=["batch:SubmitServiceJob"],
                resources=[self.job_queue_arn, self.quota_share_arn(team_name), service_jobs],
                conditions=team_tag_on_request,
            ),
            *self._team_tag_statements(team_name, service_jobs),
            iam.PolicyStatement(
                actions=["batch:TerminateServiceJob", "batch:UpdateServiceJob"],
                resources=[service_jobs],
                conditions={"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": team_name}},
            ),
            *self.observe_statements(),
        ]

    def observe_statements(self) -> list[iam.PolicyStatement]:
        return [
            # ListQuotaShares: whether the team's share is disabled at its GPU-hour limit (`status`)
            iam.PolicyStatement(
                actions=["batch:GetJobQueueSnapshot", "batch:ListQuotaShares"], resources=[self.job_queue_arn]
            ),
            # DescribeServiceJob and ListServiceJobs support no resource-level permissions.
            iam.PolicyStatement(actions=["batch:DescribeServiceJob", "batch:ListServiceJobs"], resources=["*"]),
        ]


def build_pool(
    scope: Construct, model: GovernanceModel, pool: BatchQuotaSharePool, tenants: Mapping[str, TeamTenancy]
) -> QuotaManagedTrainingQueue:
    """The batch_quota_share backend's construct builder (constructs_lib/backends/)."""
    return build_queue_pool(QuotaManagedTrainingQueue, scope, model, pool, tenants)
