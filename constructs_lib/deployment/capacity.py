from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Annotations, CfnOutput, Environment, Stack, aws_iam as iam, aws_s3 as s3
from constructs import Construct

from constructs_lib.backends import BACKENDS, backend_of
from constructs_lib.controllers.capacity import CapacityController
from constructs_lib.controllers.guard import SubmissionGuard
from constructs_lib.controllers.reclaim import ReclaimController
from constructs_lib.core.acknowledgements import acknowledge
from constructs_lib.core.buckets import hardened_bucket
from constructs_lib.member.parameters import publish_discovery
from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.chargeback import Chargeback
from constructs_lib.organisation.unified_studio import UnifiedStudioProjects
from constructs_lib.tenancy import TeamTenancy

from .team import TeamStack


class CapacityAccountStack(Stack):
    """Everything the central capacity account owns: queues, tenants, controllers. Given
    ``team_stacks`` (team name -> :class:`TeamStack`), each of those teams' resources go to its
    stack and only the shared ones stay here."""

    def __init__(
        self, scope: Construct, id: str, *, model: GovernanceModel, team_stacks: Mapping[str, TeamStack] | None = None
    ) -> None:
        account = model.capacity_account
        super().__init__(scope, id, env=Environment(account=account.account_id, region=account.region))
        # Access logs arrive under a bucket policy, not an ACL: each tenant bucket gets a
        # statement for logging.s3.amazonaws.com pinned by aws:SourceArn and aws:SourceAccount.
        # Set here, not only in cdk.json, so that every app building this stack gets it.
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        self.team_stacks = dict(team_stacks or {})
        # Each owner's path below this stack, read across jsii once per owner: the same few
        # owners ask team_scope for every team (docs/performance.md, round trips).
        self._owner_paths: dict[str, tuple[str, ...]] = {}
        self._depth = len(self.node.path.split("/"))
        self.access_logs = self._access_log_bucket()
        if self.team_stacks:
            self._let_team_buckets_log()
        self.tenants = self._tenancies(model)
        self._build_pools(model)
        self._add_controllers(model)

    def _access_log_bucket(self) -> s3.Bucket:
        """Where every tenant bucket's server access logs go."""
        access_logs = hardened_bucket(self, "AccessLogs", encryption=s3.BucketEncryption.S3_MANAGED)
        acknowledge(
            access_logs,
            "This bucket is the server access log destination; logging it to itself would loop.",
            "AwsSolutions-S1",
            "NIST.800.53.R5-S3BucketLoggingEnabled",
            "HIPAA.Security-S3BucketLoggingEnabled",
            "PCI.DSS.321-S3BucketLoggingEnabled",
        )
        acknowledge(
            access_logs,
            "S3 server access logs can only be delivered to buckets encrypted with SSE-S3.",
            "S3DefaultEncryptionKMS",
        )
        acknowledge(
            access_logs,
            "Access logs stay in the account that produced them; replicating them is a platform decision.",
            "S3BucketReplicationEnabled",
        )
        return access_logs

    def _tenancies(self, model: GovernanceModel) -> dict[str, TeamTenancy]:
        """Each team's tenancy, in its own stack with stack_layout per_team, and its discovery."""
        tenants = {
            team.name: TeamTenancy(
                self.team_stacks.get(team.name, self),
                f"Team{team.name}",
                team=team,
                submitters=model.member_principals(team),
                organisation=model.organisation,
                platform_admins=model.platform_admins,
                access_log_bucket=self._access_logs_in(self.team_stacks.get(team.name, self)),
                organization_id=model.organization_id,
                external_accounts=model.external_accounts,
                shared_image_repositories=model.shared_image_repositories,
            )
            for team in model.teams
        }
        for tenancy in tenants.values():
            publish_discovery(tenancy, model)  # discovery parameters and outputs, in the team's stack with per_team
        for name in self.team_stacks:
            # The bucket policy that aws-cdk-lib cannot add to an imported log bucket is
            # _let_team_buckets_log's statement.
            Annotations.of(tenants[name].bucket).acknowledge_warning(
                "@aws-cdk/aws-s3:accessLogsPolicyNotAdded",
                "the capacity stack's log bucket admits this account's buckets",
            )
        return tenants

    def _build_pools(self, model: GovernanceModel) -> None:
        # Each backend's construct module builds its pools; each joins its backend's dictionary.
        for attribute in self._pool_attributes:
            setattr(self, attribute, {})
        for pool in model.pools:
            backend = backend_of(pool)
            getattr(self, backend.stack_attribute)[pool.name] = backend.part("construct").build_pool(
                self, model, pool, self.tenants
            )

    def _add_controllers(self, model: GovernanceModel) -> None:
        """The controllers of the pools built: reclaim, submission guard, capacity; Unified Studio
        projects and chargeback."""
        # Each backend's reclaim module says whether and how the controller governs a pool.
        targets = [
            target
            for attribute in self._pool_attributes
            for name, construct in getattr(self, attribute).items()
            if (target := backend_of(model.pool(name)).part("reclaim").target(model.pool(name), construct))
        ]
        if targets:
            # Dry run unless the governance file says act (reclaim_mode, docs/reclaim.md).
            self.reclaim_controller = ReclaimController(
                self, "ReclaimController", model=model, targets=targets, dry_run=model.reclaim_mode != "act"
            )
        guarded = {
            name: construct.job_queue_arn
            for attribute in self._pool_attributes
            for name, construct in getattr(self, attribute).items()
            if backend_of(model.pool(name)).guards_submissions
        }
        if guarded:
            # Dry run unless the governance file says act (guard_mode, docs/security.md).
            self.submission_guard = SubmissionGuard(
                self, "SubmissionGuard", model=model, job_queues=guarded, dry_run=model.guard_mode != "act"
            )
        if model.capacity_windows:
            self.capacity_controller = CapacityController(self, "CapacityController", model=model)
            # `gpu-governance capacity approve ID --table NAME` needs the ledger's name.
            CfnOutput(self, "CapacityLedgerTable", value=self.capacity_controller.ledger.table_name)
            reclaim = getattr(self, "reclaim_controller", None)
            if reclaim is not None and reclaim.raised_guarantees:  # a SecureString under the capacity controller's key
                self.capacity_controller.grant_read_raised_guarantees(reclaim.role)
        if any(project.unified_studio for project in model.projects):
            # Collaboration only: no role, policy or access entry (docs/unified-studio.md).
            self.unified_studio = UnifiedStudioProjects(self, "UnifiedStudio", model=model)
        self.chargeback = Chargeback(
            self,
            "Chargeback",
            model=model,
            reclaim=getattr(self, "reclaim_controller", None),
            tenants=self.tenants,
            purchases_controller_id=self.capacity_controller.controller_id if model.capacity_windows else None,
        )

    @property
    def _pool_attributes(self) -> tuple[str, ...]:
        """The dictionaries of deployed pools (``queues``, ...), in the registry's order."""
        return tuple(dict.fromkeys(backend.stack_attribute for backend in BACKENDS.values()))

    def team_scope(self, owner: Construct, team_name: str) -> Construct:
        """Where ``owner`` (a construct of this stack) puts the resources of ``team_name``
        (constructs_lib.core.placement): the same path in the team's stack, or ``owner`` itself."""
        team_stack = self.team_stacks.get(team_name)
        if team_stack is None:
            return owner
        ref = owner.__jsii_ref__.ref  # the jsii object's id: no round trip
        if ref not in self._owner_paths:
            self._owner_paths[ref] = tuple(owner.node.path.split("/")[self._depth :])
        return team_stack.mirror(self._owner_paths[ref])

    def _access_logs_in(self, stack: Stack) -> s3.IBucket:
        if stack is self:
            return self.access_logs
        # Imported by name: the log bucket's policy names no team bucket (which would make this
        # stack depend on every team stack); _let_team_buckets_log admits the account instead.
        return s3.Bucket.from_bucket_name(stack, "AccessLogs", self.access_logs.bucket_name)

    def _let_team_buckets_log(self) -> None:
        self.access_logs.add_to_resource_policy(
            iam.PolicyStatement(
                sid="TeamBucketsServerAccessLogs",
                principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[self.access_logs.arn_for_objects("*")],
                conditions={"StringEquals": {"aws:SourceAccount": self.account}},
            )
        )
