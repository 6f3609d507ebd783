"""A ``hyperpod_slurm`` pool in the governance file."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from constructs_lib.model.base import Count, HyperPodClusterArn, HyperPodClusterName, SageMakerInstanceType, _Frozen
from constructs_lib.model.pools import ReclaimedPool

# What SSM Run Command targets: an EC2 instance (HyperPod nodes are) or a managed instance.
SsmTargetId = Annotated[str, StringConstraints(pattern=r"^(i-[0-9a-f]{8,17}|mi-[0-9a-f]{17})$")]


class SlurmHeadNode(_Frozen):
    """The cluster's head (controller) node, where the reclaim controller reads accounting and
    requeues jobs through SSM Run Command (docs/slurm.md)."""

    instance_id: SsmTargetId = Field(description="The head node's SSM target id (i-...)")
    instance_type: SageMakerInstanceType | None = Field(
        default=None, description="The instance type the pool's partitions hold (default: the pool's only one)"
    )


class HyperPodSlurmPool(ReclaimedPool):
    """A SageMaker HyperPod cluster orchestrated by Slurm."""

    backend: Literal["hyperpod_slurm"] = "hyperpod_slurm"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    cluster_name: HyperPodClusterName
    cluster_arn: HyperPodClusterArn | None = Field(
        default=None,
        description="Needed by capacity windows that feed its instance groups (IAM names the cluster by ARN)",
    )
    gpus_per_instance: dict[SageMakerInstanceType, Annotated[int, Field(ge=1, le=64)]] = Field(default_factory=dict)
    head_node: SlurmHeadNode | None = Field(
        default=None,
        description="The head node: with it the reclaim controller governs the pool (without it, Slurm alone does)",
    )

    @model_validator(mode="after")
    def _head_node_type(self) -> HyperPodSlurmPool:
        if self.head_node is not None:
            if self.head_node.instance_type is None and len(self.capacity) > 1:
                raise ValueError(
                    f"head_node.instance_type is missing: the pool holds several types, give one of {sorted(self.capacity)}"
                )
            if self.head_node.instance_type is not None and self.head_node.instance_type not in self.capacity:
                raise ValueError(
                    f"head_node.instance_type {self.head_node.instance_type!r} is not in the pool: give one of {sorted(self.capacity)}"
                )
        return self

    @property
    def reclaimed_instance_type(self) -> str | None:
        """The instance type the reclaim controller counts on this cluster (with a head node)."""
        if self.head_node is None:
            return None
        return self.head_node.instance_type or next(iter(self.capacity))
