"""The team member's side: find the team's setup and submit a job to its share on every backend.

Plain Python and boto3 (the SageMaker SDK path imports ``sagemaker`` only when used); no aws_cdk.
Each name loads on first use (PEP 562): a backend's submission helpers import ``member.setup``.
"""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from constructs_lib.backends.batch_quota_share.member import (
        active_training_plan,
        published_training_plans,
        service_job_request,
        submit_training_job,
    )
    from constructs_lib.backends.batch_quota_share.sdk import model_trainer, submit_with_sdk
    from constructs_lib.backends.hyperpod_eks.member import training_job_manifest
    from constructs_lib.backends.hyperpod_slurm.member import sbatch_arguments, sbatch_line

    from .setup import MEMBER_BACKENDS, TeamSetup, check_job_name, team_setup, unique_job_name

_DEFINED_IN = {
    "setup": ("MEMBER_BACKENDS", "TeamSetup", "check_job_name", "team_setup", "unique_job_name"),
    ".backends.batch_quota_share.member": (
        "active_training_plan",
        "published_training_plans",
        "service_job_request",
        "submit_training_job",
    ),
    ".backends.batch_quota_share.sdk": ("model_trainer", "submit_with_sdk"),
    ".backends.hyperpod_eks.member": ("training_job_manifest",),
    ".backends.hyperpod_slurm.member": ("sbatch_arguments", "sbatch_line"),
}
__all__ = [
    "MEMBER_BACKENDS",
    "TeamSetup",
    "active_training_plan",
    "check_job_name",
    "model_trainer",
    "published_training_plans",
    "sbatch_arguments",
    "sbatch_line",
    "service_job_request",
    "submit_training_job",
    "submit_with_sdk",
    "team_setup",
    "training_job_manifest",
    "unique_job_name",
]
__getattr__, __dir__ = lazy_exports(__name__, {name: module for module, names in _DEFINED_IN.items() for name in names})
