"""Per-team data and identity. IAM roles, not project membership, decide access: each team gets
its own KMS key, bucket, training execution role and a submission role that only the team's
principals may assume."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from aws_cdk import (
    ArnFormat,
    DefaultStackSynthesizer,
    Duration,
    Fn,
    RemovalPolicy,
    Stack,
    Token,
    aws_ecr as ecr,
    aws_iam as iam,
    aws_kms as kms,
    aws_s3 as s3,
)
from constructs import Construct, Node

from constructs_lib.core.acknowledgements import acknowledge, acknowledge_wildcard_resources
from constructs_lib.core.buckets import hardened_bucket
from constructs_lib.core.chargeback import tag_for_cost_allocation
from constructs_lib.core.errors import GovernanceError
from constructs_lib.core.vocabulary import (
    KEY_ADMIN_ACTIONS,
    KEY_USE_ACTIONS,
    PLATFORM_KEY_ADMIN_ACTIONS,
    TENANT_METRIC_NAMESPACES,
)
from constructs_lib.model import (
    ROLE_PATH,
    SUBMISSION_ROLE_SUFFIX,
    TRAINING_ROLE_SUFFIX,
    Team,
    account_of,
    is_arn_pattern,
    repository_name,
    secrets_prefix,
    team_key_alias,
    team_role_arn,
    training_job_name_patterns,
)
from gpu_governance_runtime.contract import discovery_parameter_path

TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"

_OBJECT_ACTIONS = [
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
]
_BUCKET_ACTIONS = ["s3:ListBucket", "s3:GetBucketLocation"]
ECR_PULL_ACTIONS = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
ECR_PUSH_ACTIONS = [
    "ecr:PutImage",
    "ecr:InitiateLayerUpload",
    "ecr:UploadLayerPart",
    "ecr:CompleteLayerUpload",
    "ecr:DescribeImages",
    "ecr:ListImages",
    "ecr:DescribeImageScanFindings",
]
# What the team repository's policy refuses to every principal but the team's roles: reading,
# writing and deleting its images. Repository administration stays with IAM (the platform).
_ECR_IMAGE_ACTIONS = [
    *ECR_PULL_ACTIONS,
    *ECR_PUSH_ACTIONS,
    "ecr:BatchDeleteImage",
    "ecr:StartImageScan",
    "ecr:ReplicateImage",
]
SECRET_READ_ACTIONS = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
DISCOVERY_READ_ACTIONS = ["ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath"]
# Untagged images are left over from interrupted pushes (tags are immutable, so never moved).
UNTAGGED_IMAGE_DAYS = 14


def submission_role_name(team_name: str) -> str:
    return f"{team_name}{SUBMISSION_ROLE_SUFFIX}"


def submission_role_arn(account_id: str, team_name: str, partition: str = "aws") -> str:
    """Known without a cross-stack reference, so consumer accounts can point at it."""
    return team_role_arn(account_id, team_name, SUBMISSION_ROLE_SUFFIX, partition)


def _deployment_role_arn(scope: Construct) -> str | None:
    synthesizer = Stack.of(scope).synthesizer
    if isinstance(synthesizer, DefaultStackSynthesizer):
        # The synthesizer's ARN carries ${AWS::Partition} placeholders for Fn::Sub.
        return Fn.sub(synthesizer.cloud_formation_execution_role_arn)
    return None


class _PrincipalsOfAccounts(iam.PrincipalBase):
    """Principals of named accounts, narrowed to ``arns`` by ``aws:PrincipalArn``: the accounts
    (``arn:<partition>:iam::<account>:root``) as the statement's principal and the ARNs in a
    condition. IAM and KMS accept a policy naming an account whether or not the ARNs exist yet
    ("Invalid principal in policy" otherwise), and keep matching a role that is deleted and
    re-created under the same name (a principal ARN is stored as the role's unique id):
    https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html#principal-roles.
    Exact ARNs are matched with ArnEquals, Identity Center role patterns (a ``*`` in place of the
    suffix) with ArnLike; one statement per kind, since operators in one condition block must
    all hold."""

    def __init__(self, arns: Sequence[str], operator: str, conditions: dict[str, dict[str, object]]) -> None:
        super().__init__()
        self._arns, self._operator, self._conditions = sorted(set(arns)), operator, conditions

    @property
    def policy_fragment(self) -> iam.PrincipalPolicyFragment:
        accounts = sorted({f"arn:{arn.split(':')[1]}:iam::{account_of(arn)}:root" for arn in self._arns})
        return iam.PrincipalPolicyFragment(
            {"AWS": accounts}, {**self._conditions, self._operator: {"aws:PrincipalArn": self._arns}}
        )

    def dedupe_string(self) -> str:
        return json.dumps([self._arns, self._operator, self._conditions], sort_keys=True)


def principals_named(
    arns: Sequence[str], conditions: dict[str, dict[str, object]] | None = None
) -> list[iam.IPrincipal]:
    """The principals a trust or key policy names for ``arns`` (role or user ARNs, or Identity
    Center role patterns), each kind under ``conditions`` too: every place the library names a
    principal it did not create builds it here."""
    exact = [arn for arn in arns if not is_arn_pattern(arn)]
    patterns = [arn for arn in arns if is_arn_pattern(arn)]
    return [
        _PrincipalsOfAccounts(group, operator, dict(conditions or {}))
        for group, operator in ((exact, "ArnEquals"), (patterns, "ArnLike"))
        if group
    ]


def member_trust(
    members: Sequence[str], organization_id: str | None, external_accounts: Sequence[str]
) -> iam.IPrincipal:
    """Who may assume a team's submission role: its members (ARNs or Identity Center role
    patterns), each only from inside the organisation when ``organization_id`` is known, except
    members of the explicitly listed ``external_accounts``."""
    inside = [arn for arn in members if organization_id and account_of(arn) not in external_accounts]
    outside = [arn for arn in members if arn not in inside]
    trusted = principals_named(inside, {"StringEquals": {"aws:PrincipalOrgID": organization_id}}) if inside else []
    trusted += principals_named(outside)
    return trusted[0] if len(trusted) == 1 else iam.CompositePrincipal(*trusted)


def _check_props(team: Team, members: Sequence[str], platform_admins: Sequence[str], key_account: str) -> None:
    """Refused before any resource exists: a team nobody may submit for, and administrators of
    another account (whose own administrators could then operate the key)."""
    if not members:
        raise GovernanceError.single(
            "submitters", f"team {team.name} has nobody who may submit", [], "at least one IAM role or user ARN"
        )
    strangers = [
        arn for arn in platform_admins if not Token.is_unresolved(key_account) and account_of(arn) != key_account
    ]
    if strangers:
        raise GovernanceError.single(
            "platform_admins",
            "not in the account of the tenant key",
            strangers,
            f"roles or users of account {key_account}",
        )


class SubmissionTarget(Protocol):
    """A queue a team submits to (both Batch queue constructs are): it writes the team's
    submission policy, so tenancy needs no backend module."""

    @property
    def node(self) -> Node: ...

    def submission_policy(
        self, scope: Construct, id: str, team_name: str, *, roles: Sequence[iam.IRole]
    ) -> iam.ManagedPolicy: ...


class TeamTenancy(Construct):
    """A team's KMS key (rotated, RETAIN, key policy naming only the platform admins, the
    deployment role and the team's roles), its bucket (that key, TLS only, no public access,
    versioned, access-logged), the SageMaker execution role its training jobs run as, and the
    submission role its ``submitters`` (default: the team's members) assume from their own
    accounts: with ``organization_id``, only from inside the organisation, except principals of
    ``external_accounts``. Platform admins operate the key (``PLATFORM_KEY_ADMIN_ACTIONS``) but
    neither use it nor change who may. Queues grant the submission role through
    :meth:`allow_submission`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        team: Team,
        organisation: str,
        platform_admins: Sequence[str],
        access_log_bucket: s3.IBucket,
        submitters: Sequence[str] | None = None,
        organization_id: str | None = None,
        external_accounts: Sequence[str] = (),
        shared_image_repositories: Sequence[str] = (),
    ) -> None:
        members = list(submitters if submitters is not None else team.members)
        _check_props(team, members, platform_admins, Stack.of(scope).account)
        repository = repository_name(organisation, team.name)  # before any resource: refuses a name ECR cannot take
        super().__init__(scope, id)
        self.team = team
        self.organisation = organisation
        tag_for_cost_allocation(self, team)
        self._stack = Stack.of(self)  # kept: each Stack.of is a round trip through jsii
        self.key = self._key(platform_admins)
        self.bucket = self._bucket(access_log_bucket)
        self.repository = self._repository(repository)
        self.execution_role = self._execution_role()
        self.submission_role = iam.Role(
            self,
            "SubmissionRole",
            role_name=submission_role_name(team.name),
            path=ROLE_PATH,
            description=f"Submits and manages the GPU jobs of team {team.name}",
            assumed_by=member_trust(members, organization_id, external_accounts),
            max_session_duration=Duration.hours(4),
        )
        self._admit_only_the_teams_roles()
        self.data_policy = self._data_access()
        training_log_group = self._stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=TRAINING_LOG_GROUP,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        # SageMaker names each stream <training-job-name>/algo-N-<time>: writing only to streams
        # of the team's job names keeps one team from forging or polluting another's job logs.
        team_log_streams = [f"{training_log_group}:log-stream:{name}" for name in training_job_name_patterns(team.name)]
        self.training_policy = self._training_runtime(training_log_group, team_log_streams, shared_image_repositories)
        self.member_policy = self._member_access(training_log_group, team_log_streams)
        self.pass_role_policy = self._pass_training_role()

    def _key(self, platform_admins: Sequence[str]) -> kms.Key:
        """The team's data key; its policy names the administrators (the deployment role among
        them) and, later, the team's roles (:meth:`_admit_only_the_teams_roles`, :meth:`admit_to_data`)."""
        # No admins (an app that operates keys only by deployment): no statement, since a key
        # policy statement without a principal is refused.
        administration = [
            iam.PolicyStatement(
                sid="PlatformAdministration",
                principals=[principal],
                actions=PLATFORM_KEY_ADMIN_ACTIONS,
                resources=["*"],
            )
            for principal in principals_named(platform_admins)
        ]
        deployment_role = _deployment_role_arn(self)
        if deployment_role:
            administration.append(
                iam.PolicyStatement(
                    sid="DeploymentAdministration",
                    principals=[iam.ArnPrincipal(deployment_role)],
                    actions=KEY_ADMIN_ACTIONS,
                    resources=["*"],
                )
            )
        return kms.Key(
            self,
            "Key",
            description=f"Data key of GPU tenant {self.team.name}",
            alias=team_key_alias(self.organisation, self.team.name),
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
            policy=iam.PolicyDocument(statements=administration),
        )

    def _bucket(self, access_log_bucket: s3.IBucket) -> s3.Bucket:
        return hardened_bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            server_access_logs_bucket=access_log_bucket,
            server_access_logs_prefix=f"{self.team.name}/",
        )

    def _repository(self, name: str) -> ecr.Repository:
        repository = ecr.Repository(
            self,
            "Repository",
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            image_scan_on_push=True,
            encryption=ecr.RepositoryEncryption.KMS,
            encryption_key=self.key,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    tag_status=ecr.TagStatus.UNTAGGED,
                    max_image_age=Duration.days(UNTAGGED_IMAGE_DAYS),
                    description="Untagged images: left over from interrupted pushes",
                )
            ],
            # Deleted with the team, images and all: its fixed name must be free when the team is
            # added again or a failed first deployment is retried. The images are the team's build
            # output, encrypted with a key a re-added team's roles could not use anyway; its data
            # (bucket and key) is retained.
            removal_policy=RemovalPolicy.DESTROY,
            empty_on_delete=True,
        )
        # Named on the L1: aws-cdk-lib checks a narrower pattern than the ECR API (one '-' between
        # characters), which would refuse valid team names such as "nlp--v2".
        repository.node.default_child.repository_name = name
        return repository

    def _execution_role(self) -> iam.Role:
        return iam.Role(
            self,
            "ExecutionRole",
            role_name=f"{self.team.name}{TRAINING_ROLE_SUFFIX}",
            path=ROLE_PATH,
            description=f"SageMaker training jobs of team {self.team.name}",
            # Only training jobs named after the team may run as its role: the name then tells
            # whose job it is, and its log streams fall under the team's log scope below.
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": self._stack.account},
                    "ArnLike": {
                        "aws:SourceArn": [
                            self._training_job_arn(name) for name in training_job_name_patterns(self.team.name)
                        ]
                    },
                },
            ),
        )

    def _admit_only_the_teams_roles(self) -> None:
        """The repository refuses every other principal; the key lets the team's roles use it."""
        # Identity policies of other roles in this account could allow the images; this cannot be
        # outweighed by any Allow: only the team's roles read, write or delete them.
        self.repository.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyTheTeamsRoles",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=_ECR_IMAGE_ACTIONS,
                conditions={
                    "ArnNotEquals": {"aws:PrincipalArn": [self.execution_role.role_arn, self.submission_role.role_arn]}
                },
            )
        )
        for role in (self.execution_role, self.submission_role):
            self.key.add_to_resource_policy(
                iam.PolicyStatement(principals=[role], actions=KEY_USE_ACTIONS, resources=["*"])
            )

    def _data_access(self) -> iam.ManagedPolicy:
        """The team's bucket, key, secrets and discovery parameters, for both of its roles."""
        policy = iam.ManagedPolicy(
            self,
            "DataAccess",
            description=f"Read and write the data of team {self.team.name}",
            statements=self.data_statements(),
            roles=[self.execution_role, self.submission_role],
        )
        acknowledge_wildcard_resources(
            policy,
            [self.bucket.arn_for_objects("*"), self._secrets_arn(), self._discovery_arn("/*")],
            "Objects of the team's own bucket, secrets under the team's own name prefix (Secrets Manager appends a random "
            "suffix to every secret ARN) and the team's own discovery parameters, one per pool.",
        )
        acknowledge(
            self.bucket.node.default_child,
            "Cross-region replication is a disaster-recovery decision of the platform team (a second "
            "region and key); versioning and RETAIN protect the data in place.",
            "S3BucketReplicationEnabled",
        )
        return policy

    def _training_runtime(
        self, training_log_group: str, team_log_streams: list[str], shared_image_repositories: Sequence[str]
    ) -> iam.ManagedPolicy:
        """What the team's training jobs need at run time: their logs, images and metrics."""
        policy = iam.ManagedPolicy(
            self,
            "TrainingRuntime",
            description=f"What SageMaker training jobs of team {self.team.name} need at run time",
            statements=[
                iam.PolicyStatement(
                    actions=["logs:CreateLogGroup", "logs:DescribeLogStreams"], resources=[training_log_group]
                ),
                iam.PolicyStatement(actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=team_log_streams),
                # Pull the team's images and the organisation's shared base images.
                iam.PolicyStatement(
                    actions=ECR_PULL_ACTIONS, resources=[self.repository.repository_arn, *shared_image_repositories]
                ),
                iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
                iam.PolicyStatement(
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": list(TENANT_METRIC_NAMESPACES)}},
                ),
            ],
            roles=[self.execution_role],
        )
        acknowledge_wildcard_resources(
            policy,
            team_log_streams,
            "SageMaker names one log stream per training job inside this fixed log group; the team writes only "
            "to streams of training jobs named after it.",
        )
        acknowledge_wildcard_resources(
            policy,
            ["*"],
            "cloudwatch:PutMetricData has no resource-level permissions (the namespace condition limits it), nor has "
            "ecr:GetAuthorizationToken (a registry login; the repository ARNs limit what it pulls).",
        )
        return policy

    def _pass_training_role(self) -> iam.ManagedPolicy:
        # SubmitServiceJob authorises the submitter's iam:PassRole for the payload's RoleArn [aws: batch-iam.submitter-pass-role]
        return iam.ManagedPolicy(
            self,
            "PassTrainingRole",
            description=f"Pass the training role of team {self.team.name} to SageMaker",
            statements=[
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=[self.execution_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
                )
            ],
            roles=[self.submission_role],
        )

    def _member_access(self, training_log_group: str, team_log_streams: list[str]) -> iam.ManagedPolicy:
        """What the team's members need beside submitting: watch and stop the team's own training
        jobs (by name: the execution role's trust lets only jobs named after the team run as it,
        while their tags come from the member's own payload), read their logs and the metrics,
        push and pull the team's images, and keep secrets under the team's prefix, encrypted with
        the team's key."""
        stack = self._stack
        training_jobs = [self._training_job_arn(name) for name in training_job_name_patterns(self.team.name)]
        key_alias = stack.format_arn(
            service="kms", resource="alias", resource_name=f"{self.organisation}/{self.team.name}"
        )
        statements = [
            iam.PolicyStatement(
                actions=["sagemaker:DescribeTrainingJob", "sagemaker:StopTrainingJob"], resources=training_jobs
            ),
            iam.PolicyStatement(actions=["logs:GetLogEvents"], resources=team_log_streams),
            iam.PolicyStatement(actions=["logs:DescribeLogStreams"], resources=[training_log_group]),
            iam.PolicyStatement(
                actions=[*ECR_PULL_ACTIONS, *ECR_PUSH_ACTIONS], resources=[self.repository.repository_arn]
            ),
            # Only CreateSecret (and UpdateSecret, not granted) carry secretsmanager:KmsKeyArn: a new
            # secret must use the team's key; new values of a secret keep the secret's key.
            iam.PolicyStatement(
                actions=["secretsmanager:CreateSecret"],
                resources=[self._secrets_arn()],
                conditions={"StringEquals": {"secretsmanager:KmsKeyArn": [self.key.key_arn, key_alias]}},
            ),
            iam.PolicyStatement(actions=["secretsmanager:PutSecretValue"], resources=[self._secrets_arn()]),
            # No resource-level permissions: every training job name, and every metric of the
            # account and region (docs/security.md, "Documented limits").
            iam.PolicyStatement(
                actions=[
                    "sagemaker:ListTrainingJobs",
                    "ecr:GetAuthorizationToken",
                    "cloudwatch:GetMetricData",
                    "cloudwatch:GetMetricStatistics",
                    "cloudwatch:ListMetrics",
                ],
                resources=["*"],
            ),
        ]
        policy = iam.ManagedPolicy(
            self,
            "MemberAccess",
            description=f"Watch and stop the training jobs of team {self.team.name}, "
            "read their logs and metrics, push its images, keep its secrets",
            statements=statements,
            roles=[self.submission_role],
        )
        acknowledge_wildcard_resources(
            policy,
            [*training_jobs, *team_log_streams, self._secrets_arn(), "*"],
            "Training jobs and log streams named after the team (the trust of its execution role enforces the name), "
            "secrets under the team's prefix; ListTrainingJobs, GetAuthorizationToken and the CloudWatch reads have no "
            "resource-level permissions.",
        )
        return policy

    def _secrets_arn(self) -> str:
        return self._stack.format_arn(
            service="secretsmanager",
            resource="secret",
            resource_name=f"{secrets_prefix(self.organisation, self.team.name)}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

    def _discovery_arn(self, suffix: str = "") -> str:
        # format_arn adds the "/" between "parameter" and the name; the name's own leading "/" goes.
        return self._stack.format_arn(
            service="ssm",
            resource="parameter",
            resource_name=discovery_parameter_path(self.organisation, self.team.name).lstrip("/") + suffix,
        )

    def _training_job_arn(self, name: str) -> str:
        return self._stack.format_arn(service="sagemaker", resource="training-job", resource_name=name)

    def data_statements(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(actions=_OBJECT_ACTIONS, resources=[self.bucket.arn_for_objects("*")]),
            iam.PolicyStatement(actions=_BUCKET_ACTIONS, resources=[self.bucket.bucket_arn]),
            iam.PolicyStatement(actions=KEY_USE_ACTIONS, resources=[self.key.key_arn]),
            iam.PolicyStatement(actions=SECRET_READ_ACTIONS, resources=[self._secrets_arn()]),
            iam.PolicyStatement(
                actions=DISCOVERY_READ_ACTIONS, resources=[self._discovery_arn(), self._discovery_arn("/*")]
            ),
        ]

    def allow_submission(self, queue: SubmissionTarget) -> iam.ManagedPolicy:
        """Let this team's submission role use ``queue`` as the team, and only as the team."""
        return queue.submission_policy(self, f"Submit{queue.node.id}", self.team.name, roles=[self.submission_role])

    def allow_dashboard(self, dashboard_arn: str) -> iam.ManagedPolicy:
        """Let the team's submission role open the team's own usage dashboard (and no other)."""
        return iam.ManagedPolicy(
            self,
            "ReadDashboard",
            description=f"Read the usage dashboard of team {self.team.name}",
            statements=[iam.PolicyStatement(actions=["cloudwatch:GetDashboard"], resources=[dashboard_arn])],
            roles=[self.submission_role],
        )

    def admit_to_data(self, role: iam.IRole) -> None:
        """Give another role of the team exactly the team's data access: the managed data policy
        and a place in the key policy (no inline policy)."""
        self.data_policy.attach_to_role(role)
        self.key.add_to_resource_policy(
            iam.PolicyStatement(principals=[role], actions=KEY_USE_ACTIONS, resources=["*"])
        )
