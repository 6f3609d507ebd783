"""What the AWS Batch backends' job queues share: the team list, the queue ARN, the grants and
the team tag that owns every job (``batch_quota_share``: quota-share queues for SageMaker
training jobs; ``batch_fair_share``: fair-share queues over existing EC2 / EKS compute
environments)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import jsii
from aws_cdk import Names, Stack, aws_batch as batch, aws_iam as iam
from constructs import Construct

from constructs_lib.core.acknowledgements import acknowledge_wildcard_resources
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.props import PoolGovernanceProps
from constructs_lib.tenancy import TeamTenancy
from gpu_governance_runtime import contract

TEAM_TAG = contract.TAG_TEAM
"""Tag every job carries with its team's name; IAM uses it to scope terminate and update."""

MEMBER_TAG_KEYS_ONLY = {"ForAllValues:StringNotEquals": {"aws:TagKeys": list(contract.PLATFORM_TAG_KEYS)}}
"""A submission (and its tagging) may set any tag key but the platform's own (contract.PLATFORM_TAG_KEYS)."""

OWNER_TAG_KEYS = (TEAM_TAG, contract.TAG_COST_CENTRE, *contract.PLATFORM_TAG_KEYS)
"""Keys no team may remove from a job: who owns it, who pays for it, and what the platform wrote."""


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


class GovernedQueue(Construct):
    """What both queue kinds share: the team list, the queue ARN and the grant helpers."""

    job_queue: batch.CfnJobQueue
    WILDCARD_REASON: str

    def __init__(self, scope: Construct, id: str, props: PoolGovernanceProps) -> None:
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


def build_queue_pool(
    queue_class: type[GovernedQueue],
    scope: Construct,
    model: GovernanceModel,
    pool,
    tenants: Mapping[str, TeamTenancy],
) -> GovernedQueue:
    """The pool's queue in ``scope``; each of its teams' tenancy may submit to it."""
    queue = queue_class(scope, f"Pool{pool.name}", pool=pool, teams=model.teams_in(pool.name))
    for team in queue.teams:
        tenants[team.name].allow_submission(queue)
    return queue
