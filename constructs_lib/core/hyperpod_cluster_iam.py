"""IAM for changing an existing HyperPod cluster's instance groups with UpdateCluster, shared by
the dedicated-nodes custom resource and the capacity controller (training plans)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack, aws_iam as iam
from constructs import IConstruct

from constructs_lib.core.acknowledgements import acknowledge, nag_resource


def _passable_roles(scope: IConstruct) -> str:
    return Stack.of(scope).format_arn(service="iam", region="", resource="role", resource_name="*")


def update_cluster_statements(scope: IConstruct, cluster_arns: Sequence[str]) -> list[iam.PolicyStatement]:
    """DescribeCluster and UpdateCluster on the named clusters only. UpdateCluster requires every
    sent group's ExecutionRole, which only DescribeCluster names, so roles of this account may be
    passed, to SageMaker only."""
    return [
        iam.PolicyStatement(
            actions=["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"], resources=list(cluster_arns)
        ),
        iam.PolicyStatement(
            actions=["iam:PassRole"],
            resources=[_passable_roles(scope)],
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        ),
    ]


def acknowledge_update_cluster(policy: IConstruct) -> None:
    roles = nag_resource(policy, _passable_roles(policy))
    acknowledge(
        policy,
        "UpdateCluster requires each instance group's ExecutionRole, which only DescribeCluster names, so this role "
        "may pass roles of this account, to SageMaker only (iam:PassedToService), and update only the declared "
        "clusters; it sends every group's role back unchanged.",
        f"AwsSolutions-IAM5[Resource::{roles}]",
        f"GpuGovernance-PassAnyRole[Resource::{roles}]",
    )
