"""What every pool on an EKS cluster builds its tenants with, on the AWS side: EKS access entries
(platform admins as cluster admins, each team's submission role and members as the team's
Kubernetes group), a pod role per team usable only from its workload service account (EKS Pod
Identity), ``eks:DescribeCluster`` for the team's submitters, and the kubectl provider that applies
the Kubernetes objects (``constructs_lib.tenancy.kubernetes``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from aws_cdk import Stack, aws_eks_v2 as eks, aws_iam as iam
from aws_cdk.lambda_layer_kubectl_v33 import KubectlV33Layer
from constructs import Construct

from constructs_lib.core.acknowledgements import acknowledge, acknowledge_wildcard_resources
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.placement import cluster_placement_problems, team_scope
from constructs_lib.model import POD_ROLE_SUFFIX, PRINCIPAL_ARN, ROLE_PATH, Team
from constructs_lib.model.props import list_problems
from constructs_lib.nag import declare_platform_admin

from .kubernetes import WORKLOAD_SERVICE_ACCOUNT, Tenants
from .team import TeamTenancy

_CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


def tenant_props_problems(
    platform_admins: object, teams: Sequence[object], tenants: Mapping[str, TeamTenancy]
) -> list[Problem]:
    """What the props of every Kubernetes backend's construct check alike: the platform admins are
    IAM role or user ARNs, and every team has its TeamTenancy."""
    admins = list_problems(
        "platform_admins",
        platform_admins,
        accepts=lambda arn: isinstance(arn, str) and PRINCIPAL_ARN.fullmatch(arn) is not None,
        item="IAM role or user ARN",
        items="IAM role or user ARNs",
        allowed_item="arn:aws:iam::<account>:role/<name> or :user/<name>",
    )
    return admins + [
        Problem(
            path=f"teams[{i}]",
            wrong="no TeamTenancy given for the team",
            value=t.name,
            allowed=f"one of {sorted(tenants)}",
        )
        for i, t in enumerate(teams)
        if isinstance(t, Team) and t.name not in tenants
    ]


class EksTenantsConstruct(Construct):
    """A pool construct whose teams are tenants of one EKS cluster: subclasses set
    :attr:`eks_cluster_name`, :attr:`kubernetes_tenants` (how the cluster names them) and :attr:`cluster_noun`
    (how descriptions name the cluster), and call these helpers; every resource keeps the id the
    subclass has always given it."""

    eks_cluster_name: str
    kubernetes_tenants: Tenants
    cluster_noun: str
    pool_class: ClassVar[type]  # the pool the construct takes: its props' pool must be one

    @classmethod
    def _check(cls, scope: Construct, props: Any) -> None:
        """Bad props, and a cluster in another account or region than the stack, refused before any
        construct exists: nothing half-built."""
        problems = props.problems()
        if not isinstance(props.pool, cls.pool_class):  # the rest reads the cluster's ARN
            raise GovernanceError(problems)
        problems += cluster_placement_problems(
            "pool.cluster_arn", props.pool.cluster_arn, Stack.of(scope), subject="cluster", deployer="this construct"
        )
        if problems:
            raise GovernanceError(problems)

    @staticmethod
    def _cluster_admin_policy() -> eks.CfnAccessEntry.AccessPolicyProperty:
        return eks.CfnAccessEntry.AccessPolicyProperty(
            policy_arn=_CLUSTER_ADMIN_POLICY, access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster")
        )

    def _admin_access_entry(self, id: str, principal_arn: str) -> eks.CfnAccessEntry:
        entry = self._access_entry(id, principal_arn, access_policies=[self._cluster_admin_policy()])
        declare_platform_admin(entry)
        return entry

    def _access_entry(
        self, id: str, principal_arn: str, scope: Construct | None = None, **mapping
    ) -> eks.CfnAccessEntry:
        return eks.CfnAccessEntry(
            scope or self,
            f"Access{id}",
            cluster_name=self.eks_cluster_name,
            principal_arn=principal_arn,
            type="STANDARD",
            **mapping,
        )

    def _team_access_entries(self, team: Team, principals: list[str]) -> list[eks.CfnAccessEntry]:
        """Each of ``principals`` as the team's Kubernetes group, in the team's scope."""
        return [
            self._access_entry(
                f"Team{team.name}{index}",
                principal,
                scope=team_scope(self, team.name),
                kubernetes_groups=[self.kubernetes_tenants.team_group(team.name)],
            )
            for index, principal in enumerate(principals)
        ]

    def _let_submitters_find_cluster(self, tenancy: TeamTenancy) -> None:
        # `aws eks update-kubeconfig` needs DescribeCluster; Kubernetes RBAC decides the rest.
        iam.ManagedPolicy(
            tenancy,
            f"Describe{self.node.id}",
            description=f"Find EKS cluster {self.eks_cluster_name} to submit jobs to it",
            statements=[iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[self.eks_cluster_arn])],
            roles=[tenancy.submission_role],
        )

    @property
    def eks_cluster_arn(self) -> str:
        return Stack.of(self).format_arn(service="eks", resource="cluster", resource_name=self.eks_cluster_name)

    def _workload_identity(self, team: Team, tenancy: TeamTenancy) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
        """A role for the team's pods, usable only from its service account on this cluster,
        that reads and writes the team's bucket with its key and nothing else."""
        stack = Stack.of(self)
        scope = team_scope(self, team.name)
        namespace = self.kubernetes_tenants.namespace(team.name)
        role = iam.Role(
            scope,
            f"Workload{team.name}",
            role_name=f"{team.name}{POD_ROLE_SUFFIX}",
            path=ROLE_PATH,
            description=f"Pods of team {team.name} on {self.cluster_noun} {self.eks_cluster_name}",
            assumed_by=iam.SessionTagsPrincipal(
                iam.ServicePrincipal(
                    "pods.eks.amazonaws.com",
                    conditions={
                        "StringEquals": {
                            "aws:SourceAccount": stack.account,
                            "aws:RequestTag/eks-cluster-name": self.eks_cluster_name,
                            "aws:RequestTag/kubernetes-namespace": namespace,
                            "aws:RequestTag/kubernetes-service-account": WORKLOAD_SERVICE_ACCOUNT,
                        }
                    },
                )
            ),
        )
        tenancy.admit_to_data(role)
        association = eks.CfnPodIdentityAssociation(
            scope,
            f"PodIdentity{team.name}",
            cluster_name=self.eks_cluster_name,
            namespace=namespace,
            service_account=WORKLOAD_SERVICE_ACCOUNT,
            role_arn=role.role_arn,
        )
        return role, association

    def _kubectl_cluster(
        self, kubectl_provider: eks.IKubectlProvider | None
    ) -> tuple[eks.ICluster, eks.CfnAccessEntry | None]:
        """The cluster as the Kubernetes objects are applied to it, and the access entry of the
        kubectl provider made for it (None when ``kubectl_provider`` is given: it brings its own)."""
        provider_access: eks.CfnAccessEntry | None = None
        if kubectl_provider is None:
            target = eks.Cluster.from_cluster_attributes(self, "KubectlTarget", cluster_name=self.eks_cluster_name)
            provider = eks.KubectlProvider(
                self, "KubectlProvider", cluster=target, kubectl_layer=KubectlV33Layer(self, "KubectlLayer")
            )
            _acknowledge_kubectl_provider(provider)
            # It applies cluster-scoped objects (cluster roles, admission policies): platform tooling.
            provider_access = self._admin_access_entry("KubectlProvider", provider.role.role_arn)
            kubectl_provider = provider
        cluster = eks.Cluster.from_cluster_attributes(
            self, "Cluster", cluster_name=self.eks_cluster_name, kubectl_provider=kubectl_provider
        )
        return cluster, provider_access


def _acknowledge_kubectl_provider(provider: eks.KubectlProvider) -> None:
    """The kubectl provider is aws-cdk-lib's own custom-resource machinery (two functions that
    run only while CloudFormation deploys); its findings are acknowledged on it alone."""
    handler, framework = (
        provider.node.find_child("Handler"),
        provider.node.find_child("Provider").node.find_child("framework-onEvent"),
    )
    for function in (handler, framework):
        acknowledge(
            function,
            "Runs only during CloudFormation deployments of this stack, called synchronously by the custom-resource "
            "framework, which reports failures to CloudFormation: no dead-letter queue, reserved concurrency or "
            "tracing is needed. It reaches the EKS endpoint and AWS APIs; pass a VPC-bound kubectl_provider for "
            "private-only clusters.",
            "LambdaConcurrency",
            "LambdaDLQ",
            "Serverless-LambdaTracing",
            "LambdaInsideVPC",
        )
        acknowledge(
            function.node.find_child("ServiceRole"),
            "Roles and policies generated by aws-cdk-lib's kubectl provider; AWSLambdaBasicExecutionRole only writes the "
            "function's own logs and the ECR read-only policies let kubectl pull nothing but images the cluster already uses.",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly]",
            "IAMNoInlinePolicy",
        )
    # The ECR Public policy is attached only in partitions that have ECR Public (a condition).
    ecr_public = Stack.of(handler).get_logical_id(handler.node.find_child("HasEcrPublic"))
    ecr_public_policy = json.dumps(
        {
            "Fn::If": [
                ecr_public,
                {
                    "Fn::Join": [
                        "",
                        [
                            "arn:",
                            {"Ref": "AWS::Partition"},
                            ":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly",
                        ],
                    ]
                },
                {"Ref": "AWS::NoValue"},
            ]
        },
        separators=(",", ":"),
    )
    acknowledge(
        handler.node.find_child("ServiceRole"),
        "kubectl may pull public images only through the read-only ECR Public policy aws-cdk-lib attaches.",
        f"AwsSolutions-IAM4[Policy::{ecr_public_policy}]",
    )
    acknowledge_wildcard_resources(
        framework.node.find_child("ServiceRole").node.find_child("DefaultPolicy"),
        [f"{handler.function_arn}:*"],
        "The custom-resource framework invokes any version of the one kubectl handler function it fronts.",
    )
    acknowledge(
        handler.node.find_child("Resource"),
        "aws-cdk-lib picks the newest Python runtime it knows for the kubectl handler and pins it with the library version.",
        "AwsSolutions-L1",
        "Serverless-LambdaLatestVersion",
    )
    acknowledge(
        framework,
        "The custom-resource framework function of aws-cdk-lib; its memory size is set by the library.",
        "Serverless-LambdaDefaultMemorySize",
    )
