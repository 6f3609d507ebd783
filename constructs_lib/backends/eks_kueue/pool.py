"""An ``eks_kueue`` pool in the governance file: an Amazon EKS cluster of the platform team's own
that runs Kueue (no HyperPod)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from constructs_lib.model.base import Count, DnsLabel, Ec2InstanceType
from constructs_lib.model.pools import BasePool

EksClusterArn = Annotated[
    str,
    StringConstraints(pattern=r"^arn:aws[a-z-]*:eks:[a-z0-9-]+:[0-9]{12}:cluster/[0-9A-Za-z][A-Za-z0-9_-]{0,99}$"),
]
PerInstance = dict[Ec2InstanceType, Annotated[int, Field(ge=1, le=100_000)]]


class EksKueuePool(BasePool):
    """An EKS cluster running Kueue: one ClusterQueue per team in the pool's cohort, one
    ResourceFlavor per instance type (docs/eks-kueue.md)."""

    backend: Literal["eks_kueue"] = "eks_kueue"
    capacity: dict[Ec2InstanceType, Count] = Field(min_length=1)
    cluster_arn: EksClusterArn = Field(
        description="The EKS cluster's ARN (arn:aws:eks:<region>:<account>:cluster/<name>), in the capacity account and region"
    )
    # Kubernetes objects are checked against this version's schema and applied with kubectl
    # 1.33, which supports clusters one minor version either side.
    kubernetes_version: Literal["1.32", "1.33", "1.34"] = "1.33"
    gpus_per_instance: PerInstance = Field(
        min_length=1, description="GPUs (nvidia.com/gpu) of one node per instance type: Kueue counts GPUs"
    )
    vcpus_per_instance: PerInstance = Field(
        min_length=1,
        description="Allocatable vCPUs of one node per instance type (kubectl get node: status.allocatable.cpu): "
        "a ClusterQueue must cover every resource its workloads request",
    )
    memory_gib_per_instance: PerInstance = Field(
        min_length=1, description="Allocatable memory of one node in GiB per instance type (status.allocatable.memory)"
    )
    fair_share: bool = Field(
        default=True,
        description="Each team's ClusterQueue carries its fair_share_weight (Kueue's fair sharing, when the Kueue "
        "configuration enables it)",
    )
    operator_namespaces: tuple[DnsLabel, ...] = Field(
        default=("kueue-system", "kubeflow"),
        description="Namespaces of Kueue and the training operators, which the teams' network policies let reach their pods",
    )

    @property
    def eks_cluster_name(self) -> str:
        return self.cluster_arn.rpartition("/")[2]
