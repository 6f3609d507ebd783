"""SageMaker HyperPod on Slurm: the governance model as accounts, QoS, partitions and OS
groups (``slurm_plan``), and the construct that delivers the apply script to a cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from constructs_lib.model.slurm import InstanceGroup, hyperpod_instance_groups, posix_user_name, slurm_plan

if TYPE_CHECKING:
    from .construct import HyperPodSlurmGovernance, HyperPodSlurmGovernanceProps

__all__ = [
    "HyperPodSlurmGovernance",
    "HyperPodSlurmGovernanceProps",
    "InstanceGroup",
    "hyperpod_instance_groups",
    "posix_user_name",
    "slurm_plan",
]


def __getattr__(name: str) -> Any:
    # The construct is imported on first use: the model (validation) and `gpu-governance slurm
    # script` use the mapping and must not start aws_cdk.
    if name in ("HyperPodSlurmGovernance", "HyperPodSlurmGovernanceProps"):
        from . import construct

        return getattr(construct, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
