"""Where a launch-template consumer can launch: the Availability Zones of its subnets.

A Capacity Block lives in one zone [aws: ec2-cb.one-zone], and its instances launch only in a
subnet of that zone [aws: batch-ce.subnet-in-block-zone]. So a Batch compute environment or an EKS node group can
use a block only in a zone one of its subnets is in: the planner buys nowhere else, and the
rotation checks the block's zone again before it moves the consumer onto it. Read from AWS each
run (``DescribeComputeEnvironments`` / ``DescribeNodegroup``, then ``DescribeSubnets``), not from
the governance file, which names the consumer only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..planners.window import Window


def subnet_zones(ec2: Any, subnet_ids: Iterable[str]) -> frozenset[str]:
    """The Availability Zones of ``subnet_ids``."""
    ids = sorted(set(subnet_ids))
    if not ids:
        return frozenset()
    return frozenset(s["AvailabilityZone"] for s in ec2.describe_subnets(SubnetIds=ids)["Subnets"])


def launch_zones(window: Window, *, ec2: Any, batch: Any, eks: Any) -> frozenset[str] | None:
    """The zones the window's consumer can launch a block's instances in; None for consumers that
    do not launch from a launch template (training plans: SageMaker places them), or when no client
    to read it is given (``capacity plan`` offline: the declared zones alone)."""
    consumer = window.consumer
    if consumer.get("kind") == "batch_compute_environment" and batch is not None:
        (environment,) = batch.describe_compute_environments(
            computeEnvironments=[consumer["block_compute_environment"]]
        )["computeEnvironments"]
        return subnet_zones(ec2, environment.get("computeResources", {}).get("subnets", []))
    if consumer.get("kind") == "eks_node_group" and eks is not None:
        group = eks.describe_nodegroup(clusterName=consumer["cluster_name"], nodegroupName=consumer["nodegroup_name"])[
            "nodegroup"
        ]
        return subnet_zones(ec2, group.get("subnets", []))
    return None
