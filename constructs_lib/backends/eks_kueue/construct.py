"""Amazon EKS with Kueue governed by the model: Kueue's quota objects (``kueue``) and the same tenant
isolation as HyperPod EKS (access entries, RBAC, network policies, GPU quota, pod identity, pod
security, queue and priority admission; ``constructs_lib.tenancy``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from aws_cdk import Arn, ArnFormat, aws_eks_v2 as eks, aws_iam as iam
from constructs import Construct

from constructs_lib.backends.base import Backend
from constructs_lib.core.errors import Problem
from constructs_lib.core.placement import team_scope
from constructs_lib.model import (
    MAX_PRIORITY_CLASSES,
    GovernanceModel,
    PriorityClass,
    Team,
    TeamGroup,
    members_in_account,
)
from constructs_lib.model.props import PoolGovernanceProps, list_problems
from constructs_lib.tenancy import TeamTenancy
from constructs_lib.tenancy.eks import EksTenantsConstruct, tenant_props_problems

from . import BACKEND, karpenter, kueue
from .pool import EksKueuePool


@dataclass(frozen=True, kw_only=True)
class EksKueueGovernanceProps(PoolGovernanceProps):
    """Props of :class:`EksKueueGovernance`: an ``eks_kueue`` pool and its teams, then the
    priority classes (one WorkloadPriorityClass each), the groups of teams (a Cohort each where
    they have a quota in the pool), the platform admins (cluster admin), each team's
    :class:`TeamTenancy` by team name, and optionally a kubectl provider to reuse (default: one is
    created with cluster-admin access)."""

    BACKEND: ClassVar[Backend] = BACKEND
    pool: EksKueuePool
    priority_classes: Sequence[PriorityClass]
    groups: Sequence[TeamGroup]
    platform_admins: Sequence[str]
    tenants: Mapping[str, TeamTenancy]
    kubectl_provider: eks.IKubectlProvider | None = None
    karpenter_blocks: karpenter.KarpenterBlocks | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._keep_as_tuple("priority_classes", "groups", "platform_admins")

    def problems(self) -> list[Problem]:
        priority_classes = list_problems(
            "priority_classes",
            self.priority_classes,
            accepts=lambda c: isinstance(c, PriorityClass),
            item="PriorityClass",
            items="priority classes",
            most=MAX_PRIORITY_CLASSES,
        )
        groups = list_problems(
            "groups", self.groups, accepts=lambda g: isinstance(g, TeamGroup), item="TeamGroup", items="groups"
        )
        return (
            super().problems()
            + priority_classes
            + groups
            + tenant_props_problems(self.platform_admins, self.teams, self.tenants)
        )


class EksKueueGovernance(EksTenantsConstruct):
    """Kueue quotas and tenant isolation on an existing EKS cluster that runs Kueue (0.15 or later,
    which serves ``kueue.x-k8s.io/v1beta2``).

    Cluster-wide, applied first: a ResourceFlavor per instance type, a WorkloadPriorityClass per
    priority class, the pool's Cohort and one per group, the pod security, volume binding and
    tenant queue admission policies, and the usage reader role. Per team: its namespace
    ``gpu-team-<team>``, ClusterQueue and LocalQueue, and the isolation every Kubernetes backend
    shares. Each team's submission role, and its members in the cluster's account, are mapped by
    EKS access entries to the team's group ``gpu-team-<team>-members``; ``platform_admins`` get
    cluster admin; nobody else gets an entry. Kubernetes objects are applied by a kubectl provider
    (``kubectl_provider`` to reuse one bound to the cluster's VPC, or one is created).
    """

    cluster_noun = "EKS cluster"
    pool_class = EksKueuePool

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        pool: EksKueuePool,
        teams: Sequence[Team],
        priority_classes: Sequence[PriorityClass],
        groups: Sequence[TeamGroup],
        platform_admins: Sequence[str],
        tenants: Mapping[str, TeamTenancy],
        kubectl_provider: eks.IKubectlProvider | None = None,
        karpenter_blocks: karpenter.KarpenterBlocks | None = None,
    ) -> None:
        props = EksKueueGovernanceProps(
            pool=pool,
            teams=teams,
            priority_classes=priority_classes,
            groups=groups,
            platform_admins=platform_admins,
            tenants=tenants,
            kubectl_provider=kubectl_provider,
            karpenter_blocks=karpenter_blocks,
        )
        self._check(scope, props)  # before any construct exists: nothing half-built on bad props
        super().__init__(scope, id)
        self.pool = pool
        self.teams = props.teams
        self.eks_cluster_name = pool.eks_cluster_name
        self.kubernetes_tenants = kueue.tenants(pool)
        self.cluster_account = Arn.split(pool.cluster_arn, ArnFormat.SLASH_RESOURCE_NAME).account

        self.admin_access_entries = [
            self._admin_access_entry(f"Admin{index}", arn) for index, arn in enumerate(props.platform_admins)
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

        self._apply_kubernetes_objects(props)

    def _apply_kubernetes_objects(self, props: EksKueueGovernanceProps) -> None:
        pool = props.pool
        self.cluster, provider_access = self._kubectl_cluster(props.kubectl_provider)
        # Flavors, priority classes and cohorts before any ClusterQueue names them.
        self.kueue_objects = eks.KubernetesManifest(
            self,
            "Kueue",
            cluster=self.cluster,
            manifest=kueue.cluster_objects(
                pool, self.teams, props.groups, props.priority_classes, props.karpenter_blocks
            ),
            overwrite=True,
        )
        # The NodePool and EC2NodeClass of the pool's capacity windows fed through Karpenter (karpenter.py).
        self.karpenter_objects = (
            eks.KubernetesManifest(
                self,
                "KarpenterBlocks",
                cluster=self.cluster,
                manifest=karpenter.objects(props.karpenter_blocks),
                overwrite=True,
            )
            if props.karpenter_blocks
            else None
        )
        # Pod security and the queue policy before any tenant namespace exists.
        self.pod_security = eks.KubernetesManifest(
            self,
            "PodSecurity",
            cluster=self.cluster,
            manifest=self.kubernetes_tenants.pod_security_objects(),
            overwrite=True,
        )
        # Lets the reclaim controller's role (mapped by its own access entry) read the ClusterQueues, and
        # hold a limited team's at its GPU-hour limit (runtime backends/eks_kueue/gpu_hours.py).
        self.usage_reader = eks.KubernetesManifest(
            self,
            "UsageReader",
            cluster=self.cluster,
            manifest=kueue.usage_reader(pool, self.teams),
            overwrite=True,
        )
        shared = tuple(
            m for m in (self.kueue_objects, self.pod_security, self.usage_reader, self.karpenter_objects) if m
        )
        if provider_access is not None:
            for manifest in shared:
                manifest.node.add_dependency(provider_access)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        for team in self.teams:
            manifest = eks.KubernetesManifest(
                team_scope(self, team.name),
                f"Objects{team.name}",
                cluster=self.cluster,
                manifest=kueue.team_objects(pool, team, props.groups, props.priority_classes),
                overwrite=True,  # kubectl apply: safe to repeat after a failed or retried deploy
            )
            manifest.node.add_dependency(self.kueue_objects, self.pod_security)
            self.manifests[team.name] = manifest


def build_pool(
    scope: Construct, model: GovernanceModel, pool: EksKueuePool, tenants: Mapping[str, TeamTenancy]
) -> EksKueueGovernance:
    """The eks_kueue backend's construct builder (constructs_lib/backends/)."""
    return EksKueueGovernance(
        scope,
        f"Pool{pool.name}",
        pool=pool,
        teams=model.teams_in(pool.name),
        priority_classes=model.priority_classes,
        groups=model.groups,
        platform_admins=model.platform_admins,
        tenants=tenants,
        karpenter_blocks=karpenter.blocks_of(model, pool),
    )
