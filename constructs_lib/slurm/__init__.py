"""SageMaker HyperPod on Slurm: the governance model as accounts, QoS, partitions and OS
groups (``slurm_plan``), and the construct that delivers the apply script to a cluster."""

from .construct import HyperPodSlurmGovernance
from .mapping import InstanceGroup, hyperpod_instance_groups, posix_user_name, slurm_plan

__all__ = ["HyperPodSlurmGovernance", "InstanceGroup", "hyperpod_instance_groups", "posix_user_name", "slurm_plan"]
