"""Submit through the SageMaker Python SDK's AWS Batch support (``sagemaker.train.aws_batch``,
package ``sagemaker-train``; extra ``[member]``). Imported lazily: the rest of
``constructs_lib.member`` needs only boto3.

What ``TrainingQueue.submit`` sends (sagemaker-train 1.27.0, read in its source): jobName (the
training job's generated name unless given), jobQueue, serviceJobType SAGEMAKER_TRAINING,
retryStrategy (1 attempt, retry only on SageMaker's InternalServerError), timeoutConfig (one
day unless given), quotaShareName, preemptionConfiguration, tags, and the CreateTrainingJob
payload of the ``ModelTrainer``. Two gaps handled here:

- ``schedulingPriority`` is sent only when truthy, so a class of weight 0 would be dropped, and
  the API reference states no default priority for a service job: we submit it at 1 and set 0
  with ``UpdateServiceJob`` right after submitting.
- the payload's ``Tags`` are moved to the Batch job's tags, so the training job SageMaker
  creates carries none from the payload (the boto3 path keeps them on both).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from constructs_lib.core.errors import GovernanceError

from .batch import (
    CHECKPOINT_LOCAL_PATH,
    DEFAULT_MAX_RUNTIME_SECONDS,
    DEFAULT_VOLUME_GB,
    check_job_name,
    teams_training_plan,
    with_submission_tags,
)
from .setup import TeamSetup


class _TeamPlan:
    """``model_trainer``'s default plan: the team's active training plan for the instance type,
    read from its training plans parameter when the trainer is built."""

    def __repr__(self) -> str:
        return "TEAM_PLAN"


TEAM_PLAN = _TeamPlan()


def require_sdk() -> None:
    """The SageMaker Python SDK is the [member] extra's: without it, one sentence saying so (a
    ModuleNotFoundError, as the constructs without [cdk]) instead of an import traceback."""
    try:
        import sagemaker.train  # noqa: F401 - only whether it imports
    except ImportError:
        raise ModuleNotFoundError(
            "the SageMaker Python SDK (sagemaker-train) is missing: install cdk-gpu-governance with the [member] "
            "extra (docs/install.md), or submit with boto3 (examples/member/submit_boto3.py)",
            name="sagemaker",
        ) from None


def model_trainer(
    setup: TeamSetup,
    *,
    base_job_name: str,
    instance_type: str,
    instance_count: int = 1,
    image_uri: str | None = None,
    max_runtime_seconds: int = DEFAULT_MAX_RUNTIME_SECONDS,
    volume_size_gb: int = DEFAULT_VOLUME_GB,
    sagemaker_session: Any = None,
    training_plan_arn: Any = TEAM_PLAN,
    ssm_client: Any = None,
    **trainer_options: Any,
):
    """A ``ModelTrainer`` that runs as the team's execution role, writes output and checkpoints
    to the team's bucket under its key, and names its jobs ``<base_job_name>-<time>``
    (``base_job_name`` starts with ``<team>-``). Checkpoints go to ``<prefix>/<base_job_name>/``,
    so a resubmitted job with the same base name resumes from them. Its jobs run on the team's
    active training plan for ``instance_type`` (read with ``ssm_client``, default boto3's) when
    it owns one; pass ``training_plan_arn`` to choose (None: on demand)."""
    require_sdk()
    from sagemaker.core.shapes import Tag
    from sagemaker.core.training.configs import CheckpointConfig, Compute, OutputDataConfig, StoppingCondition
    from sagemaker.train.model_trainer import ModelTrainer

    setup.require("execution_role_arn", "bucket", "kms_key_arn")
    if sagemaker_session is None:  # the team's region, not the caller's default (the SDK's own default)
        import boto3
        from sagemaker.core.helper.session_helper import Session

        sagemaker_session = Session(boto_session=boto3.Session(region_name=setup.region))
    check_job_name(setup.team, base_job_name)
    if instance_type not in setup.quota:
        raise GovernanceError.single(
            "instance_type", f"not in team {setup.team}'s quota share", instance_type, f"one of {sorted(setup.quota)}"
        )
    if not image_uri:
        raise GovernanceError.single(
            "image_uri",
            "missing",
            None,
            f"a training image, e.g. {setup.ecr_repository_uri}:<tag> (the team's repository)",
        )
    if training_plan_arn is TEAM_PLAN:
        training_plan_arn = teams_training_plan(setup, instance_type, ssm_client)
    return ModelTrainer(
        training_image=image_uri,
        role=setup.execution_role_arn,
        base_job_name=base_job_name,
        sagemaker_session=sagemaker_session,
        # a plan bought for the team reaches the job only through its ResourceConfig.TrainingPlanArn, which the
        # SDK's Compute carries as training_plan_arn (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceConfig.html)
        compute=Compute(
            instance_type=instance_type,
            instance_count=instance_count,
            volume_size_in_gb=volume_size_gb,
            volume_kms_key_id=setup.kms_key_arn,
            training_plan_arn=training_plan_arn,
        ),
        output_data_config=OutputDataConfig(
            s3_output_path=f"s3://{setup.bucket}/output/", kms_key_id=setup.kms_key_arn
        ),
        checkpoint_config=CheckpointConfig(
            s3_uri=setup.checkpoint_uri(base_job_name), local_path=CHECKPOINT_LOCAL_PATH
        ),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=max_runtime_seconds),
        tags=[Tag(key=key, value=value) for key, value in setup.submission_tags.items()],
        **trainer_options,
    )


def submit_with_sdk(
    setup: TeamSetup,
    trainer: Any,
    *,
    priority_class: str,
    inputs: Any = None,
    tags: Mapping[str, str] | None = None,
    preemption_retries: int | None = None,
    batch_client: Any = None,
):
    """``TrainingQueue(<team's queue>).submit(...)`` into the team's quota share with the
    class's priority and the team's submission tags (team, cost centre); returns the SDK's ``TrainingQueuedJob``. ``batch_client``
    (default: boto3's) sets a priority of 0 the SDK drops."""
    require_sdk()
    from sagemaker.train.aws_batch.training_queue import TrainingQueue

    setup.require("job_queue", "quota_share")
    priority = setup.priority(priority_class)
    all_tags = with_submission_tags(setup, tags)
    # The SDK sends schedulingPriority only when it is truthy, and no default priority is documented:
    # a class of weight 0 is submitted at 1, the lowest priority the SDK sends, and set to 0 right after.
    with default_region(setup.region):
        queued = TrainingQueue(setup.job_queue).submit(
            trainer,
            inputs,
            priority=priority or 1,
            quota_share_name=setup.quota_share,
            tags=all_tags,
            preemption_config={"preemptionRetriesBeforeTermination": preemption_retries}
            if preemption_retries is not None
            else None,
        )
    if priority == 0:
        if batch_client is None:
            import boto3

            batch_client = boto3.client("batch", region_name=setup.region)
        batch_client.update_service_job(jobId=queued.job_arn, schedulingPriority=0)
    return queued


@contextmanager
def default_region(region: str) -> Iterator[None]:
    """boto3's default session in ``region`` for the duration: the SDK's Batch client is
    ``boto3.client("batch")`` with no region (sagemaker-train 1.27, ``batch_api_helper``), which
    would otherwise send the team's job to the caller's default region. The caller's credentials
    chain is unchanged; the previous default session is restored."""
    import boto3

    previous = boto3.DEFAULT_SESSION
    boto3.DEFAULT_SESSION = boto3.session.Session(region_name=region)
    try:
        yield
    finally:
        boto3.DEFAULT_SESSION = previous
