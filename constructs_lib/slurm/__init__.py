"""The old import path of SageMaker HyperPod on Slurm, kept so existing apps keep working: the
mapping (``slurm_plan``) and the construct are ``constructs_lib.backends.hyperpod_slurm``'s
(import them from ``constructs_lib``)."""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from constructs_lib.backends.hyperpod_slurm.construct import HyperPodSlurmGovernance, HyperPodSlurmGovernanceProps
    from constructs_lib.backends.hyperpod_slurm.layout import InstanceGroup, hyperpod_instance_groups, posix_user_name
    from constructs_lib.backends.hyperpod_slurm.plan import slurm_plan

_DEFINED_IN = {
    ".backends.hyperpod_slurm.construct": ("HyperPodSlurmGovernance", "HyperPodSlurmGovernanceProps"),
    ".backends.hyperpod_slurm.layout": ("InstanceGroup", "hyperpod_instance_groups", "posix_user_name"),
    ".backends.hyperpod_slurm.plan": ("slurm_plan",),
}
__all__ = [
    "HyperPodSlurmGovernance",
    "HyperPodSlurmGovernanceProps",
    "InstanceGroup",
    "hyperpod_instance_groups",
    "posix_user_name",
    "slurm_plan",
]
__getattr__, __dir__ = lazy_exports(__name__, {name: module for module, names in _DEFINED_IN.items() for name in names})
