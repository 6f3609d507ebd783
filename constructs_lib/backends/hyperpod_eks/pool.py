"""A ``hyperpod_eks`` pool in the governance file."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from constructs_lib.model.base import (
    Count,
    EksClusterName,
    HyperPodClusterArn,
    HyperPodClusterName,
    SageMakerInstanceType,
)
from constructs_lib.model.pools import BasePool


class HyperPodEksPool(BasePool):
    """A SageMaker HyperPod cluster orchestrated by EKS (task governance)."""

    backend: Literal["hyperpod_eks"] = "hyperpod_eks"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    cluster_arn: HyperPodClusterArn
    eks_cluster_name: EksClusterName
    # Kubernetes objects are checked against this version's schema and applied with kubectl
    # 1.33, which supports clusters one minor version either side.
    kubernetes_version: Literal["1.32", "1.33", "1.34"] = "1.33"
    cluster_name: HyperPodClusterName | None = Field(
        default=None,
        description="The HyperPod cluster's name; needed where a Unified Studio project connects to the cluster",
    )
    fair_share: bool = Field(default=True, description="Teams borrow idle compute by fair-share weight, not first come")
    idle_resource_sharing: bool = Field(default=True, description="Teams may lend and borrow idle compute at all")
    gpus_per_instance: dict[SageMakerInstanceType, Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=dict,
        description="GPUs of one instance per type: Kueue counts GPUs, usage is reported in instances (docs/chargeback.md)",
    )
