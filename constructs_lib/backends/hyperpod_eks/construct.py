"""SageMaker HyperPod on EKS governed by the model: task governance (one cluster scheduler
config, one compute quota per team) and tenant isolation on the cluster (access entries, RBAC,
network policies, GPU quota, pod identity, pod security, dedicated nodes)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import (
    Arn,
    ArnFormat,
    CfnResource,
    CustomResource,
    Duration,
    RemovalPolicy,
    aws_eks_v2 as eks,
    aws_iam as iam,
    aws_lambda as lambda_,
    aws_logs as logs,
    aws_sagemaker as sagemaker,
    custom_resources,
)
from constructs import Construct

from constructs_lib.backends.base import Backend
from constructs_lib.core.acknowledgements import acknowledge, acknowledge_wildcard_resources
from constructs_lib.core.chargeback import cost_allocation_tags
from constructs_lib.core.errors import Problem
from constructs_lib.core.hyperpod_cluster_iam import acknowledge_update_cluster, update_cluster_statements
from constructs_lib.core.placement import team_scope
from constructs_lib.core.runtime_asset import runtime_code
from constructs_lib.core.vocabulary import GOVERNANCE_METADATA, HYPERPOD_SHARING_STRATEGY
from constructs_lib.model import (
    MAX_PRIORITY_CLASSES,
    GovernanceModel,
    HyperPodEksPool,
    KubernetesTenancy,
    PriorityClass,
    SharingStrategy,
    Team,
    members_in_account,
)
from constructs_lib.model.props import PoolGovernanceProps, list_problems
from constructs_lib.tenancy import TeamTenancy
from constructs_lib.tenancy.eks import EksTenantsConstruct, tenant_props_problems
from constructs_lib.tenancy.run_time import run_time_limits

from . import BACKEND, absolute_borrow_limits, compute_quota_resource, kubernetes, kueue

SCHEDULER_CONFIG_NAME = "gpu-governance"
_SAGEMAKER_CLUSTER_ARN = ArnFormat.SLASH_RESOURCE_NAME
# HyperPod creates the team namespace asynchronously after the compute quota.
_NAMESPACE_WAIT = Duration.minutes(10)


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def compute_quota_properties(pool: HyperPodEksPool, team: Team) -> dict:
    """The ``AWS::SageMaker::ComputeQuota`` properties of one team (no L1 class exists)."""
    sharing = team.sharing
    resource_sharing: dict = {"Strategy": HYPERPOD_SHARING_STRATEGY[sharing.strategy]}
    if sharing.strategy is SharingStrategy.LEND_AND_BORROW:
        resource_sharing["BorrowLimit"] = sharing.borrow_percent
        # GPUs borrowed at most per instance type, whatever the percent says
        # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceSharingConfig.html).
        if absolute := absolute_borrow_limits(team.quotas[pool.name]):
            resource_sharing["AbsoluteBorrowLimits"] = absolute
    return {
        "Name": team.name,
        "ClusterArn": pool.cluster_arn,
        # A paused team's compute quota is deactivated
        # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateComputeQuota.html, ActivationState).
        "ActivationState": "Disabled" if team.paused else "Enabled",
        "ComputeQuotaTarget": {"TeamName": team.name, "FairShareWeight": team.fair_share_weight},
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": [
                compute_quota_resource(instance_type, entry)
                for instance_type, entry in sorted(team.quotas[pool.name].items())
            ],
            "ResourceSharingConfig": resource_sharing,
            "PreemptTeamTasks": "LowerPriority" if sharing.in_share_preemption else "Never",
        },
    }


@dataclass(frozen=True, kw_only=True)
class HyperPodEksGovernanceProps(PoolGovernanceProps):
    """Props of :class:`HyperPodEksGovernance`: a ``hyperpod_eks`` pool and its teams, then the
    cluster's priority classes, its platform admins (cluster admin), each team's
    :class:`TeamTenancy` by team name, and optionally a kubectl provider to reuse (default: one is
    created with cluster-admin access)."""

    BACKEND: ClassVar[Backend] = BACKEND
    pool: HyperPodEksPool
    priority_classes: Sequence[PriorityClass]
    platform_admins: Sequence[str]
    tenants: Mapping[str, TeamTenancy]
    kubectl_provider: eks.IKubectlProvider | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._keep_as_tuple("priority_classes", "platform_admins")

    def problems(self) -> list[Problem]:
        priority_classes = list_problems(
            "priority_classes",
            self.priority_classes,
            accepts=lambda c: isinstance(c, PriorityClass),
            item="PriorityClass",
            items="priority classes",
            least=1,  # what the scheduler config orders the teams' tasks by
            most=MAX_PRIORITY_CLASSES,
        )
        return (
            super().problems()
            + priority_classes
            + tenant_props_problems(self.platform_admins, self.teams, self.tenants)
        )


class HyperPodEksGovernance(EksTenantsConstruct):
    """Task governance and tenant isolation for an existing HyperPod cluster orchestrated by EKS.

    ``tenants`` holds each team's :class:`TeamTenancy` (key, bucket, submission role). Each
    team's submission role, and its members in the cluster's account (for instance SageMaker
    Unified Studio project roles), are mapped by EKS access entries to the team's namespace-level
    group; ``platform_admins`` get cluster admin; nobody else gets an entry. Kubernetes objects
    are applied by a kubectl provider (a Lambda function reaching the cluster endpoint): pass
    ``kubectl_provider`` to reuse one bound to the cluster's VPC (it then needs cluster-admin
    access of its own), or leave it out to create one with cluster-admin access. Instance groups
    the teams dedicate get their label and taint at deploy time from a custom resource
    (``dedicated_nodes``, ``None`` when no team dedicates a group).
    """

    kubernetes_tenants = kubernetes.TENANTS
    cluster_noun = "HyperPod cluster"
    pool_class = HyperPodEksPool

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pool: HyperPodEksPool,
        teams: Sequence[Team],
        priority_classes: Sequence[PriorityClass],
        platform_admins: Sequence[str],
        tenants: Mapping[str, TeamTenancy],
        kubectl_provider: eks.IKubectlProvider | None = None,
    ) -> None:
        props = HyperPodEksGovernanceProps(
            pool=pool,
            teams=teams,
            priority_classes=priority_classes,
            platform_admins=platform_admins,
            tenants=tenants,
            kubectl_provider=kubectl_provider,
        )
        self._check(scope, props)  # before any construct exists: nothing half-built on bad props
        super().__init__(scope, id)
        self.pool = pool
        self.eks_cluster_name = pool.eks_cluster_name
        self.teams = props.teams
        self.priority_classes = props.priority_classes
        self.cluster_account = Arn.split(pool.cluster_arn, _SAGEMAKER_CLUSTER_ARN).account

        self.scheduler_config = self._scheduler_config()
        self.compute_quotas: dict[str, CfnResource] = {team.name: self._compute_quota(team) for team in self.teams}
        self._admit_tenants(platform_admins, tenants)
        self._apply_kubernetes_objects(kubectl_provider)

    # --- AWS side -------------------------------------------------------------------------

    def _scheduler_config(self) -> sagemaker.CfnClusterSchedulerConfig:
        """The cluster's priority classes and sharing, which the teams' compute quotas rely on."""
        return sagemaker.CfnClusterSchedulerConfig(
            self,
            "SchedulerConfig",
            name=SCHEDULER_CONFIG_NAME,
            cluster_arn=self.pool.cluster_arn,
            scheduler_config=sagemaker.CfnClusterSchedulerConfig.SchedulerConfigProperty(
                priority_classes=[
                    sagemaker.CfnClusterSchedulerConfig.PriorityClassProperty(name=p.name, weight=p.weight)
                    for p in self.priority_classes
                ],
                fair_share=_enabled(self.pool.fair_share),
                idle_resource_sharing=_enabled(self.pool.idle_resource_sharing),
            ),
        )

    def _compute_quota(self, team: Team) -> CfnResource:
        # Tags.of does not reach a CfnResource of a type aws-cdk-lib does not know: set them here
        # (they update in place, docs/chargeback.md).
        tags = [{"Key": key, "Value": value} for key, value in cost_allocation_tags(team, self.pool.name).items()]
        quota = CfnResource(
            team_scope(self, team.name),
            f"Quota{team.name}",
            type="AWS::SageMaker::ComputeQuota",
            properties={**compute_quota_properties(self.pool, team), "Tags": tags},
        )
        quota.add_metadata(
            GOVERNANCE_METADATA, {"team": team.name, "preset": team.preset.value if team.preset else None}
        )
        # Priority classes named by the teams' jobs exist before any team can submit.
        quota.node.add_dependency(self.scheduler_config)
        acknowledge(
            quota,
            "aws-cdk-lib's own schema list has no L1 for this CloudFormation type; cfn-lint knows it and "
            "checks these properties (tests/hyperpod_eks).",
            "CloudFormation-Validate::F3006",
        )
        return quota

    def _admit_tenants(self, platform_admins: Sequence[str], tenants: Mapping[str, TeamTenancy]) -> None:
        """The cluster's access entries (the platform admins', each team's), and each team's
        workload identity."""
        self.admin_access_entries = [
            self._admin_access_entry(f"Admin{index}", arn) for index, arn in enumerate(platform_admins)
        ]
        self.team_access_entries: dict[str, list[eks.CfnAccessEntry]] = {}
        self.workload_roles: dict[str, iam.Role] = {}
        self.pod_identity_associations: dict[str, eks.CfnPodIdentityAssociation] = {}
        for team in self.teams:
            tenancy = tenants[team.name]
            principals = [tenancy.submission_role.role_arn, *members_in_account(team, self.cluster_account)]
            self.team_access_entries[team.name] = self._team_access_entries(team, principals)
            self._let_submitters_find_cluster(tenancy)
            self.workload_roles[team.name], self.pod_identity_associations[team.name] = self._workload_identity(
                team, tenancy
            )

    # --- Kubernetes side ------------------------------------------------------------------

    def _apply_kubernetes_objects(self, kubectl_provider: eks.IKubectlProvider | None) -> None:
        self.cluster, provider_access = self._kubectl_cluster(kubectl_provider)
        # Pod security before any tenant namespace: HyperPod makes a team's namespace from its
        # compute quota, so no quota is created until the admission policies are in force.
        self.pod_security = eks.KubernetesManifest(
            self, "PodSecurity", cluster=self.cluster, manifest=kubernetes.pod_security_objects(), overwrite=True
        )
        # Lets the reclaim controller's role (mapped by its own access entry) read Kueue's
        # ClusterQueues for the usage metrics; grants nothing until some entry maps that group.
        self.usage_reader = eks.KubernetesManifest(
            self, "UsageReader", cluster=self.cluster, manifest=kubernetes.usage_reader_objects(), overwrite=True
        )
        if provider_access is not None:
            self.pod_security.node.add_dependency(provider_access)
            self.usage_reader.node.add_dependency(provider_access)
        for quota in self.compute_quotas.values():
            quota.node.add_dependency(self.pod_security)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        self.pod_security_labels: dict[str, eks.KubernetesPatch] = {}
        for team in self.teams:
            tenancy = team.kubernetes.get(self.pool.name, KubernetesTenancy())
            namespace_ready = self._namespace_ready(team, provider_access)
            self.manifests[team.name] = self._team_objects(team, tenancy, namespace_ready)
            self.pod_security_labels[team.name] = self._label_namespace(team, tenancy, namespace_ready)
        dedicated = {
            group: team.name
            for team in self.teams
            for group in team.kubernetes.get(self.pool.name, KubernetesTenancy()).dedicated_instance_groups
        }
        self.dedicated_nodes = self._dedicate_instance_groups(dedicated) if dedicated else None

    def _namespace_ready(self, team: Team, provider_access: Construct | None) -> eks.KubernetesObjectValue:
        """Waits for the namespace HyperPod makes from the team's compute quota: nothing of the
        team's is applied before it exists."""
        namespace_ready = eks.KubernetesObjectValue(
            team_scope(self, team.name),
            f"Namespace{team.name}",
            cluster=self.cluster,
            object_type="namespace",
            object_name=kueue.namespace(team.name),
            json_path=".metadata.name",
            timeout=_NAMESPACE_WAIT,
        )
        namespace_ready.node.add_dependency(self.compute_quotas[team.name])
        if provider_access is not None:
            namespace_ready.node.add_dependency(provider_access)
        return namespace_ready

    def _team_objects(
        self, team: Team, tenancy: KubernetesTenancy, namespace_ready: Construct
    ) -> eks.KubernetesManifest:
        """The team's isolation objects in its namespace (tenancy/kubernetes.py team_objects)."""
        manifest = eks.KubernetesManifest(
            team_scope(self, team.name),
            f"Objects{team.name}",
            cluster=self.cluster,
            manifest=kubernetes.team_objects(
                team.name,
                tenancy,
                tenancy.granted_priority_classes(self.priority_classes),
                run_time_limits(team, self.pool, self.priority_classes),
            ),
            overwrite=True,  # kubectl apply: safe to repeat after a failed or retried deploy
        )
        manifest.node.add_dependency(namespace_ready, self.pod_security)
        return manifest

    def _label_namespace(
        self, team: Team, tenancy: KubernetesTenancy, namespace_ready: Construct
    ) -> eks.KubernetesPatch:
        """Kubernetes' own Pod Security admission as well, on the namespace HyperPod owns: a
        patch (not a manifest) so that deleting the stack removes the labels, not the namespace.
        With them, the team and cost-centre labels cost tools allocate the namespace's spend by."""
        cost = kubernetes.cost_metadata(team.name, team.cost_centre)
        metadata = {
            **cost,
            "labels": {
                **kubernetes.pod_security_labels(tenancy.pod_security, self.pool.kubernetes_version),
                **cost["labels"],
            },
        }
        patch = eks.KubernetesPatch(
            team_scope(self, team.name),
            f"PodSecurityLabels{team.name}",
            cluster=self.cluster,
            resource_name=f"namespace/{kueue.namespace(team.name)}",
            apply_patch={"metadata": metadata},
            restore_patch={},
            patch_type=eks.PatchType.MERGE,
        )
        # A JSON merge patch removes a label set to null; jsii drops None from maps, so the
        # restore patch goes in as JSON.
        patch.node.find_child("Resource").node.default_child.add_property_override(
            "RestorePatchJson",
            json.dumps(
                {"metadata": {key: dict.fromkeys(values) for key, values in metadata.items()}},
                separators=(",", ":"),
            ),
        )
        patch.node.add_dependency(namespace_ready)
        return patch

    # --- dedicated instance groups --------------------------------------------------------

    def _dedicate_instance_groups(self, groups: Mapping[str, str]) -> CustomResource:
        """A custom resource whose handler (``gpu_governance_runtime.dedicated_nodes``) sets each
        group's label and taint with ``UpdateCluster`` at deploy time, and removes them again."""
        role = iam.Role(
            self,
            "DedicatedNodesRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Label and taint the dedicated instance groups of HyperPod cluster {self.pool.eks_cluster_name}",
        )
        log_group = logs.LogGroup(
            self, "DedicatedNodesLogs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=RemovalPolicy.RETAIN
        )
        policy = iam.ManagedPolicy(
            self,
            "DedicatedNodesPolicy",
            roles=[role],
            description=f"Label and taint instance groups of {self.pool.cluster_arn}",
            statements=[
                *update_cluster_statements(self, [self.pool.cluster_arn]),
                iam.PolicyStatement(
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[f"{log_group.log_group_arn}:*"]
                ),
            ],
        )
        handler = lambda_.Function(
            self,
            "DedicatedNodesHandler",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            handler="gpu_governance_runtime.dedicated_nodes.handler",
            code=runtime_code(),
            role=role,
            # room for botocore's backoff (eight attempts, at most 20 s apart) on both of its calls
            timeout=Duration.minutes(3),
            memory_size=256,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
        )
        handler.node.add_dependency(policy)
        provider = custom_resources.Provider(
            self, "DedicatedNodesProvider", on_event_handler=handler, log_group=log_group
        )
        _acknowledge_dedicated_nodes(handler, provider, policy, log_group)
        return CustomResource(
            self,
            "DedicatedNodes",
            service_token=provider.service_token,
            resource_type="Custom::HyperPodDedicatedNodes",
            properties={"ClusterArn": self.pool.cluster_arn, "Groups": dict(sorted(groups.items()))},
        )


def _acknowledge_dedicated_nodes(
    handler: lambda_.Function, provider: custom_resources.Provider, policy: iam.ManagedPolicy, log_group: logs.LogGroup
) -> None:
    """The dedicated-nodes handler and its custom-resource framework run only while
    CloudFormation deploys; their findings are acknowledged on them alone."""
    framework = provider.node.find_child("framework-onEvent")
    for function in (handler, framework):
        acknowledge(
            function,
            "Deploy-time function of the dedicated instance groups: the custom-resource framework calls it synchronously "
            "and reports every failure to CloudFormation, so no dead-letter queue, reserved concurrency or tracing is "
            "needed. It calls only the public SageMaker API; a VPC would add NAT cost and no isolation.",
            "LambdaConcurrency",
            "LambdaDLQ",
            "Serverless-LambdaTracing",
            "LambdaInsideVPC",
        )
    acknowledge(
        log_group,
        "The dedicated-nodes log holds only the cluster ARN, instance group and team names; CloudWatch Logs encrypts it "
        "at rest with its own keys, and a customer managed key for it would protect no tenant data.",
        "CloudWatchLogGroupEncrypted",
    )
    acknowledge_update_cluster(policy)
    acknowledge_wildcard_resources(
        policy,
        [f"{log_group.log_group_arn}:*"],
        "The dedicated-nodes handler writes the log streams of its own log group only.",
    )
    framework_role = framework.node.find_child("ServiceRole")
    acknowledge(
        framework_role,
        "The custom-resource framework role of aws-cdk-lib: AWSLambdaBasicExecutionRole only writes the framework's own "
        "logs, and its inline policy only invokes the dedicated-nodes handler.",
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "IAMNoInlinePolicy",
    )
    acknowledge_wildcard_resources(
        framework_role.node.find_child("DefaultPolicy"),
        [f"{handler.function_arn}:*"],
        "The custom-resource framework invokes any version of the one dedicated-nodes handler it fronts.",
    )
    acknowledge(
        framework,
        "The custom-resource framework function of aws-cdk-lib; its memory size is set by the library.",
        "Serverless-LambdaDefaultMemorySize",
    )


def build_pool(
    scope: Construct, model: GovernanceModel, pool: HyperPodEksPool, tenants: Mapping[str, TeamTenancy]
) -> HyperPodEksGovernance:
    """The hyperpod_eks backend's construct builder (constructs_lib/backends/)."""
    return HyperPodEksGovernance(
        scope,
        f"Pool{pool.name}",
        pool=pool,
        teams=model.teams_in(pool.name),
        priority_classes=model.priority_classes,
        platform_admins=model.platform_admins,
        tenants=tenants,
    )
