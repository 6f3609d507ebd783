"""The fair-share job queue over existing EC2 or EKS compute environments, built from
aws-cdk-lib's L2s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import Duration, Stack, aws_batch as batch, aws_iam as iam
from constructs import Construct

from constructs_lib.backends.base import Backend
from constructs_lib.backends.batch_queue import (
    MEMBER_TAG_KEYS_ONLY,
    TEAM_TAG,
    GovernedQueue,
    build_queue_pool,
    l1_logical_id,
)
from constructs_lib.model import BatchFairSharePool, GovernanceModel, Team
from constructs_lib.model.props import PoolGovernanceProps
from constructs_lib.tenancy import TeamTenancy

from . import BACKEND


@dataclass(frozen=True, kw_only=True)
class FairShareJobQueueProps(PoolGovernanceProps):
    """Props of :class:`FairShareJobQueue`: a ``batch_fair_share`` pool and its teams."""

    BACKEND: ClassVar[Backend] = BACKEND
    pool: BatchFairSharePool


def fair_share_weight_factor(weight: int) -> float:
    """Batch gives a share compute inversely to its weight factor; the model's weight is
    "higher gets more", so factor = 1 / weight keeps the ratios (weight 1 -> 1.0, 100 -> 0.01)."""
    return round(1 / weight, 4)


class FairShareJobQueue(GovernedQueue):
    """A fair-share job queue over existing EC2 or EKS compute environments, one share
    identifier per team weighted by ``team.fair_share_weight``.

    Batch never preempts on such queues: a team below its share only gets capacity as other
    jobs finish. The reclaim controller acts on the same pool and shares (``pool``, ``teams``).
    """

    WILDCARD_REASON = (
        "Job ids do not exist before submission: job/* is limited to the team by its share identifier and "
        "team tag; job definitions are limited to the team's name prefix and team tag; ListJobs and DescribeJobs "
        "support no resource-level permissions."
    )

    job_queue: batch.JobQueue  # type: ignore[assignment]  # the L2; the quota-share queue's is an L1

    def __init__(self, scope: Construct, id: str, *, pool: BatchFairSharePool, teams: Sequence[Team]) -> None:
        super().__init__(scope, id, FairShareJobQueueProps(pool=pool, teams=teams))
        self.scheduling_policy = batch.FairshareSchedulingPolicy(
            self,
            "SchedulingPolicy",
            scheduling_policy_name=f"{pool.name}-fair-share",
            share_decay=Duration.seconds(pool.share_decay_seconds),
            compute_reservation=pool.compute_reservation,
            shares=[
                batch.Share(share_identifier=team.name, weight_factor=fair_share_weight_factor(team.fair_share_weight))
                for team in self.teams
            ],
        )
        self.job_queue = batch.JobQueue(
            self,
            "JobQueue",
            job_queue_name=pool.name,
            priority=pool.queue_priority,
            scheduling_policy=self.scheduling_policy,
            # The queue reads only the ARN of each imported environment, EC2 or EKS alike.
            compute_environments=[
                batch.OrderedComputeEnvironment(
                    order=index + 1,
                    compute_environment=batch.UnmanagedComputeEnvironment.from_unmanaged_compute_environment_arn(
                        self, f"ComputeEnvironment{index + 1}", arn
                    ),
                )
                for index, arn in enumerate(pool.compute_environments)
            ],
            enabled=True,
        )
        for l2 in (self.scheduling_policy, self.job_queue):  # the L1s' ids: nothing deployed is replaced
            l2.node.default_child.override_logical_id(l1_logical_id(l2))

    @property
    def job_queue_arn(self) -> str:
        return self.job_queue.job_queue_arn

    def submit_statements(self, team_name: str) -> list[iam.PolicyStatement]:
        """SubmitJob only with the team's share identifier (the ``batch:ShareIdentifier`` key
        [aws: batch-iam.submit-job-share-identifier]) and only with job definition revisions named
        after the team *and* tagged with it;
        terminate and cancel only jobs tagged with the team.

        The name prefix alone is not an owner: ``research-*`` also matches the definitions of a
        team called ``research-x``. The team tag on the definition is (the tag is checked only on
        a revision ARN, hence ``:*``; a submission without a revision matches no statement)."""
        self._require_team(team_name)
        jobs = self._job_arn("job")
        team_definitions = Stack.of(self).format_arn(
            service="batch", resource="job-definition", resource_name=f"{team_name}-*:*"
        )
        return [
            iam.PolicyStatement(
                actions=["batch:SubmitJob"],
                resources=[self.job_queue_arn, jobs],
                conditions={
                    "StringEquals": {"batch:ShareIdentifier": team_name, **self._tags_on_request(team_name)},
                    **MEMBER_TAG_KEYS_ONLY,
                },
            ),
            iam.PolicyStatement(
                actions=["batch:SubmitJob"],
                resources=[team_definitions],
                conditions={"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": team_name}},
            ),
            *self._team_tag_statements(team_name, jobs),
            iam.PolicyStatement(
                actions=["batch:TerminateJob", "batch:CancelJob"],
                resources=[jobs],
                conditions={"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": team_name}},
            ),
            *self.observe_statements(),
        ]

    def observe_statements(self) -> list[iam.PolicyStatement]:
        # ListJobs and DescribeJobs support no resource-level permissions.
        return [iam.PolicyStatement(actions=["batch:ListJobs", "batch:DescribeJobs"], resources=["*"])]


def build_pool(
    scope: Construct, model: GovernanceModel, pool: BatchFairSharePool, tenants: Mapping[str, TeamTenancy]
) -> FairShareJobQueue:
    """The batch_fair_share backend's construct builder (constructs_lib/backends/)."""
    return build_queue_pool(FairShareJobQueue, scope, model, pool, tenants)
