"""AWS Batch job queues governed by the model: quota-share queues for SageMaker training jobs
and fair-share queues over existing EC2 / EKS compute environments.

The fair-share queue is built from aws-cdk-lib's L2s; the quota-share queue stays on L1s because
aws-cdk-lib has no L2 for service environments, quota shares or quota-share scheduling policies."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import jsii
from aws_cdk import ArnFormat, Duration, Names, Stack, aws_batch as batch, aws_iam as iam
from constructs import Construct

from constructs_lib.backends import Backend, batch_fair_share, batch_quota_share
from constructs_lib.backends.batch_quota_share import UNLIMITED_BORROW_LIMIT
from constructs_lib.core.acknowledgements import acknowledge_wildcard_resources
from constructs_lib.core.chargeback import tag_for_cost_allocation
from constructs_lib.core.errors import GovernanceError
from constructs_lib.core.placement import team_scope
from constructs_lib.core.vocabulary import GOVERNANCE_METADATA
from constructs_lib.model import (
    BatchFairSharePool,
    BatchQuotaSharePool,
    GovernanceModel,
    SharingStrategy,
    Team,
)
from constructs_lib.model.props import PoolGovernanceProps
from constructs_lib.model.quota import instance_quota
from constructs_lib.tenancy import TeamTenancy
from gpu_governance_runtime import contract

TEAM_TAG = contract.TAG_TEAM
"""Tag every job carries with its team's name; IAM uses it to scope terminate and update."""

MEMBER_TAG_KEYS_ONLY = {"ForAllValues:StringNotEquals": {"aws:TagKeys": list(contract.PLATFORM_TAG_KEYS)}}
"""A submission (and its tagging) may set any tag key but the platform's own (contract.PLATFORM_TAG_KEYS)."""

OWNER_TAG_KEYS = (TEAM_TAG, contract.TAG_COST_CENTRE, *contract.PLATFORM_TAG_KEYS)
"""Keys no team may remove from a job: who owns it, who pays for it, and what the platform wrote."""


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

    BACKEND: ClassVar[Backend] = batch_quota_share.BACKEND
    pool: BatchQuotaSharePool


@dataclass(frozen=True, kw_only=True)
class FairShareJobQueueProps(PoolGovernanceProps):
    """Props of :class:`FairShareJobQueue`: a ``batch_fair_share`` pool and its teams."""

    BACKEND: ClassVar[Backend] = batch_fair_share.BACKEND
    pool: BatchFairSharePool


def _combine(grantee: iam.IGrantable, statements: Sequence[iam.PolicyStatement]) -> iam.Grant:
    grant: iam.Grant | None = None
    for statement in statements:
        if statement.effect == iam.Effect.DENY:
            # A Grant only allows; the guard statements go on the principal's policy as they are.
            grantee.grant_principal.add_to_principal_policy(statement)
            continue
        one = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=statement.actions,
            resource_arns=statement.resources,
            conditions=statement.conditions or None,
        )
        grant = one if grant is None else grant.combine(one)
    assert grant is not None
    return grant


@jsii.implements(iam.IPrincipal)
class _ManagedPolicyGrantee:
    """``principal``, except that what is granted to it goes into ``policy``, a managed policy
    attached to it, instead of an inline policy (which the NIST, HIPAA and PCI packs refuse)."""

    def __init__(self, principal: iam.IPrincipal, policy: iam.ManagedPolicy) -> None:
        self._principal, self._policy = principal, policy

    @property
    def grant_principal(self) -> iam.IPrincipal:
        return self

    @property
    def assume_role_action(self) -> str:
        return self._principal.assume_role_action

    @property
    def policy_fragment(self) -> iam.PrincipalPolicyFragment:
        return self._principal.policy_fragment

    @property
    def principal_account(self) -> str | None:
        return self._principal.principal_account

    def add_to_policy(self, statement: iam.PolicyStatement) -> bool:
        return self.add_to_principal_policy(statement).statement_added

    def add_to_principal_policy(self, statement: iam.PolicyStatement) -> iam.AddToPrincipalPolicyResult:
        self._policy.add_statements(statement)
        return iam.AddToPrincipalPolicyResult(statement_added=True, policy_dependable=self._policy)


def l1_logical_id(construct: Construct) -> str:
    """The logical id CDK gives a CloudFormation resource at ``construct``'s own path.

    An L2 puts its resource one level down, under ``Resource``, and CDK hashes that name into
    the logical id; the fair-share queue's L2s are pinned to the ids their L1s had, as a new id
    would make CloudFormation replace the named queue and policy. This is CDK's ``makeUniqueId``
    for the path below the stack (``Default`` left out, the path's names without repeats and
    non-alphanumerics, then the first 8 hex digits of the path's MD5), which CDK keeps fixed as
    every deployed stack depends on it; ``tests/foundation/test_batch_constructs.py`` checks it
    against CDK's own ids."""
    scopes = construct.node.scopes
    path = [s.node.id for s in scopes[scopes.index(Stack.of(construct)) + 1 :] if s.node.id != "Default"]
    alphanumeric = lambda name: "".join(c for c in name if c.isascii() and c.isalnum())  # noqa: E731
    if len(path) == 1 and len(alphanumeric(path[0])) <= 255:
        return alphanumeric(path[0])
    human: list[str] = []
    for name in path:
        if not human or not human[-1].endswith(name):
            human.append(name)
    digest = hashlib.md5("/".join(path).encode()).hexdigest()[:8].upper()
    return "".join(alphanumeric(name) for name in human if name != "Resource")[:240] + digest


class _GovernedQueue(Construct):
    """What both queue kinds share: the team list, the queue ARN and the grant helpers."""

    job_queue: batch.CfnJobQueue
    WILDCARD_REASON: str

    def __init__(
        self, scope: Construct, id: str, props: QuotaManagedTrainingQueueProps | FairShareJobQueueProps
    ) -> None:
        props.check()  # before any resource exists: nothing half-built on bad props
        super().__init__(scope, id)
        self.pool = props.pool
        self.teams = props.teams

    @property
    def job_queue_arn(self) -> str:
        return self.job_queue.attr_job_queue_arn

    def _job_arn(self, resource: str) -> str:
        return Stack.of(self).format_arn(service="batch", resource=resource, resource_name="*")

    def _team_tag_statements(self, team_name: str, jobs: str) -> list[iam.PolicyStatement]:
        """The team tag is the owner of a job: terminate and update trust ``aws:ResourceTag``, so
        no team may set it on another team's job, change it, or remove it.

        Batch authorises the tags given at ``SubmitJob`` / ``SubmitServiceJob`` as
        ``batch:TagResource`` on the new job, inside that call (Service Authorization Reference),
        and how it builds that request's context is written nowhere [aws: batch-iam.tag-on-create-context]:
        whether ``batch:ShareIdentifier`` / ``batch:SchedulingPriority`` are in it (the reference
        lists only ``aws:RequestTag``, ``aws:ResourceTag``, ``aws:TagKeys`` for ``TagResource``),
        and whether ``aws:ResourceTag`` already holds the requested tags (IAM: "or in requests that
        create a resource with an attached tag"). So the grant uses documented keys only, and
        holds whichever way: tag jobs with the team's own tags (``aws:RequestTag``), no platform
        key (``aws:TagKeys``), on a job whose team tag is absent or the team's own
        (``StringEqualsIfExists aws:ResourceTag``). No documented key tells a new job from an
        existing one, so the same grant lets a team tag an existing job that carries no team tag:
        none does in a governed queue, as every principal the library lets submit there must tag
        the job at creation (these statements, the reclaim controller's copies), and no team may
        remove the tag again. The Deny statements hold even where another policy of the same role
        allows tagging: no tagging or untagging of another team's job, no other team's name in the
        team tag, no removing the team tag, the cost centre or a platform key, and no setting a
        platform key (a copy's ``times-preempted`` count among them)."""
        tag = f"aws:ResourceTag/{TEAM_TAG}"
        request_tag = f"aws:RequestTag/{TEAM_TAG}"
        return [
            iam.PolicyStatement(
                actions=["batch:TagResource"],
                resources=[jobs],
                conditions={
                    "StringEquals": self._tags_on_request(team_name),
                    "StringEqualsIfExists": {tag: team_name},
                    **MEMBER_TAG_KEYS_ONLY,
                },
            ),
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=["batch:TagResource", "batch:UntagResource"],
                resources=[jobs],
                conditions={"Null": {tag: "false"}, "StringNotEquals": {tag: team_name}},
            ),
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=["batch:TagResource"],
                resources=[jobs],
                conditions={"Null": {request_tag: "false"}, "StringNotEquals": {request_tag: team_name}},
            ),
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=["batch:UntagResource"],
                resources=[jobs],
                conditions={"ForAnyValue:StringEquals": {"aws:TagKeys": list(OWNER_TAG_KEYS)}},
            ),
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=["batch:TagResource"],
                resources=[jobs],
                conditions={"ForAnyValue:StringEquals": {"aws:TagKeys": list(contract.PLATFORM_TAG_KEYS)}},
            ),
        ]

    def _require_team(self, team_name: str) -> None:
        if team_name not in {t.name for t in self.teams}:
            raise GovernanceError.single(
                "team_name", "not a team of this queue", team_name, f"one of {[t.name for t in self.teams]}"
            )

    def _tags_on_request(self, team_name: str) -> dict[str, str]:
        """The ``aws:RequestTag`` conditions of a submission: the team tag, and the team's cost
        centre when it declares one (``contract.submission_tags``, which members' tooling sends)."""
        team = next(t for t in self.teams if t.name == team_name)
        return {
            f"aws:RequestTag/{key}": value
            for key, value in contract.submission_tags(team.name, team.cost_centre).items()
        }

    def grant_submit(self, grantee: iam.IGrantable, team_name: str) -> iam.Grant:
        """Let ``grantee`` submit, watch, reprioritise and terminate jobs as ``team_name`` only."""
        return _combine(grantee, self.submit_statements(team_name))

    def grant_observe(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read-only view of the queue (what the reclaim controller and dashboards need). For a
        role, user or group: a managed policy attached to it, with the wildcards the read actions
        need acknowledged, so the grant passes the NIST, HIPAA and PCI packs (no inline policy);
        any other grantee gets the statements on its own policy."""
        principal = grantee.grant_principal
        if not any(hasattr(principal, arn) for arn in ("role_arn", "user_arn", "group_arn")):
            return _combine(grantee, self.observe_statements())
        policy = iam.ManagedPolicy(
            self,
            f"Observe{Names.node_unique_id(principal.node)}",
            description=f"Read-only view of the job queue of pool {self.pool.name}",
        )
        getattr(
            policy,
            "attach_to_role"
            if hasattr(principal, "role_arn")
            else "attach_to_user"
            if hasattr(principal, "user_arn")
            else "attach_to_group",
        )(principal)
        statements = self.observe_statements()
        acknowledge_wildcard_resources(policy, [arn for s in statements for arn in s.resources], self.WILDCARD_REASON)
        return _combine(_ManagedPolicyGrantee(principal, policy), statements)

    def submission_policy(
        self, scope: Construct, id: str, team_name: str, *, roles: Sequence[iam.IRole]
    ) -> iam.ManagedPolicy:
        """A managed policy with :meth:`submit_statements` attached to ``roles``. Unlike
        :meth:`grant_submit` (an inline policy on the grantee) it passes the NIST, HIPAA and PCI
        packs, and its unavoidable wildcards are acknowledged with the reason."""
        statements = self.submit_statements(team_name)
        policy = iam.ManagedPolicy(
            scope,
            id,
            description=f"Submit jobs to {self.pool.name} as team {team_name}",
            statements=statements,
            roles=list(roles),
        )
        acknowledge_wildcard_resources(policy, [arn for s in statements for arn in s.resources], self.WILDCARD_REASON)
        return policy

    def submit_statements(self, team_name: str) -> list[iam.PolicyStatement]:
        raise NotImplementedError

    def observe_statements(self) -> list[iam.PolicyStatement]:
        raise NotImplementedError


class QuotaManagedTrainingQueue(_GovernedQueue):
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


def fair_share_weight_factor(weight: int) -> float:
    """Batch gives a share compute inversely to its weight factor; the model's weight is
    "higher gets more", so factor = 1 / weight keeps the ratios (weight 1 -> 1.0, 100 -> 0.01)."""
    return round(1 / weight, 4)


class FairShareJobQueue(_GovernedQueue):
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


def _build_pool(
    queue_class: type[_GovernedQueue],
    scope: Construct,
    model: GovernanceModel,
    pool,
    tenants: Mapping[str, TeamTenancy],
) -> _GovernedQueue:
    """The pool's queue in ``scope``; each of its teams' tenancy may submit to it."""
    queue = queue_class(scope, f"Pool{pool.name}", pool=pool, teams=model.teams_in(pool.name))
    for team in queue.teams:
        tenants[team.name].allow_submission(queue)
    return queue


def build_quota_share_pool(
    scope: Construct, model: GovernanceModel, pool: BatchQuotaSharePool, tenants: Mapping[str, TeamTenancy]
) -> QuotaManagedTrainingQueue:
    """The batch_quota_share backend's construct builder (constructs_lib/backends/)."""
    return _build_pool(QuotaManagedTrainingQueue, scope, model, pool, tenants)


def build_fair_share_pool(
    scope: Construct, model: GovernanceModel, pool: BatchFairSharePool, tenants: Mapping[str, TeamTenancy]
) -> FairShareJobQueue:
    """The batch_fair_share backend's construct builder (constructs_lib/backends/)."""
    return _build_pool(FairShareJobQueue, scope, model, pool, tenants)
