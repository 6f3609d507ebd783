"""EC2 Capacity Blocks for ML: what a window feeding EC2 instances (a Batch compute environment,
an EKS node group) buys (docs/capacity.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu_governance_runtime.contract import (
    CONSUMER_BATCH_COMPUTE_ENVIRONMENT,
    CONSUMER_EKS_NODE_GROUP,
    CONSUMER_KARPENTER_NODE_POOL,
)

from .base import CapacityKind, KindGrant

if TYPE_CHECKING:
    from aws_cdk import aws_iam as iam


def _window_problem(window: Any) -> str | None:
    if window.instance_type.startswith("ml."):
        return f"{window.feeds.kind} launches EC2 instances: instance_type must not be ml.*, got {window.instance_type}"
    return None


def _statements(grant: KindGrant) -> list[iam.PolicyStatement]:
    from aws_cdk import aws_iam as iam  # here: the model loads this module, and no CDK

    reservations = grant.arn("ec2", "capacity-reservation")
    return [
        # No instance-type condition key exists for these actions: region (via the ARN) and our
        # own tags are as tight as IAM allows; the price cap and budget live in the controller.
        iam.PolicyStatement(
            actions=["ec2:PurchaseCapacityBlock"], resources=[reservations], conditions=grant.tagged_by_us
        ),
        iam.PolicyStatement(
            actions=["ec2:CreateTags"],
            resources=[reservations],
            conditions={"StringEquals": {"ec2:CreateAction": "PurchaseCapacityBlock"}},
        ),
        iam.PolicyStatement(
            actions=["ec2:PurchaseCapacityBlockExtension"], resources=[reservations], conditions=grant.managed_by_us
        ),
        iam.PolicyStatement(
            actions=[
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeCapacityBlockOfferings",
                "ec2:DescribeCapacityBlockExtensionOfferings",
                "ec2:DescribeCapacityBlockExtensionHistory",
                "ec2:DescribeLaunchTemplateVersions",
            ],
            resources=["*"],
        ),
    ]


KIND = CapacityKind(
    name="capacity_block",
    label="capacity block",
    feeds=(CONSUMER_BATCH_COMPUTE_ENVIRONMENT, CONSUMER_EKS_NODE_GROUP, CONSUMER_KARPENTER_NODE_POOL),
    window_problem=_window_problem,
    statements=_statements,
    # Every run lists the controller's EC2 capacity reservations (runtime capacity/aws.py, CapacityMarket.owned).
    granted_always=True,
)
