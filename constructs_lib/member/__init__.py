"""The team member's side: find the team's setup and submit a job to its share on every backend.

Plain Python and boto3 (the SageMaker SDK path imports ``sagemaker`` only when used); no aws_cdk.
"""

from .batch import (
    active_training_plan,
    check_job_name,
    published_training_plans,
    service_job_request,
    submit_training_job,
    unique_job_name,
)
from .hyperpod import training_job_manifest
from .sdk import model_trainer, submit_with_sdk
from .setup import MEMBER_BACKENDS, TeamSetup, team_setup
from .slurm import sbatch_arguments, sbatch_line

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
