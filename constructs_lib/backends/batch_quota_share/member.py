"""Submit a SageMaker training job into the team's quota share, with boto3 only or through the
SageMaker Python SDK.

One request builder serves the boto3 path, the AWS CLI snippet (`gpu-governance team
submit-example --backend batch`) and the tests that validate it against botocore's models.

The SDK path: the SageMaker Python SDK's AWS Batch support (``sagemaker.train.aws_batch``,
package ``sagemaker-train``; extra ``[member]``), imported only when used: the rest needs only
boto3.

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

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.setup import MEMBER_BACKENDS, TeamSetup, check_job_name
from gpu_governance_runtime.contract import TAG_TEAM

# What constructs_lib.member re-exports.
__all__ = [
    "active_training_plan",
    "model_trainer",
    "published_training_plans",
    "service_job_request",
    "submit_training_job",
    "submit_with_sdk",
]

SAGEMAKER_TRAINING = "SAGEMAKER_TRAINING"
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"  # SageMaker syncs this folder with CheckpointConfig.S3Uri
DEFAULT_MAX_RUNTIME_SECONDS = 24 * 3600
DEFAULT_VOLUME_GB = 100


def with_submission_tags(setup: TeamSetup, tags: Mapping[str, str] | None) -> dict[str, str]:
    """``tags`` plus the tags IAM requires on every job of the team (``setup.submission_tags``:
    the team, and its cost centre when it declares one); a tag naming another value is refused
    here rather than by IAM."""
    all_tags = dict(tags or {})
    for key, value in setup.submission_tags.items():
        if all_tags.get(key, value) != value:
            wrong = "names another team" if key == TAG_TEAM else "is not the team's"
            raise GovernanceError.single(f"tags.{key}", wrong, all_tags[key], f"{value!r} (set for you)")
        all_tags[key] = value
    return all_tags


def _check_instance_and_image(setup: TeamSetup, instance_type: str, image_uri: str | None) -> None:
    """A job of the team runs on an instance type of its quota share, from an image it names."""
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


def service_job_request(
    setup: TeamSetup,
    *,
    job_name: str,
    priority_class: str,
    instance_type: str,
    instance_count: int = 1,
    image_uri: str | None = None,
    inputs: Mapping[str, str] | None = None,
    hyperparameters: Mapping[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
    max_runtime_seconds: int | None = None,
    volume_size_gb: int = DEFAULT_VOLUME_GB,
    preemption_retries: int | None = None,
    tags: Mapping[str, str] | None = None,
    training_plan_arn: str | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``batch.submit_service_job`` for one training job of the team:
    its queue and quota share, the class's scheduling priority, the team's submission tags (team,
    cost centre) on the Batch job and on the training job, and a CreateTrainingJob payload that runs as the team's execution
    role, writes output and checkpoints to the team's bucket under the team's key. ``max_runtime_seconds``
    defaults to a day, cut to the class's run-time limit where it has one (the guard stops a job
    asking for longer)."""
    setup.require("job_queue", "quota_share", "execution_role_arn", "bucket", "kms_key_arn")
    if setup.backend != MEMBER_BACKENDS["batch"]:
        raise GovernanceError.single(
            "setup.backend",
            "not a Batch quota-share pool",
            setup.backend,
            f"the setup of a {MEMBER_BACKENDS['batch']} pool",
        )
    check_job_name(setup.team, job_name)
    priority = setup.priority(priority_class)
    runtime = setup.max_runtime_seconds(priority_class, max_runtime_seconds, DEFAULT_MAX_RUNTIME_SECONDS)
    _check_instance_and_image(setup, instance_type, image_uri)
    all_tags = with_submission_tags(setup, tags)
    payload: dict[str, Any] = {
        "TrainingJobName": job_name,
        "RoleArn": setup.execution_role_arn,
        "AlgorithmSpecification": {"TrainingImage": image_uri, "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": f"s3://{setup.bucket}/output/", "KmsKeyId": setup.kms_key_arn},
        "ResourceConfig": {
            "InstanceType": instance_type,
            "InstanceCount": instance_count,
            "VolumeSizeInGB": volume_size_gb,
            "VolumeKmsKeyId": setup.kms_key_arn,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": runtime},
        "CheckpointConfig": {"S3Uri": setup.checkpoint_uri(job_name), "LocalPath": CHECKPOINT_LOCAL_PATH},
        "EnableInterContainerTrafficEncryption": True,
        "Tags": [{"Key": key, "Value": value} for key, value in sorted(all_tags.items())],
    }
    if training_plan_arn:  # a plan bought for the team reaches the job only through its ResourceConfig
        payload["ResourceConfig"]["TrainingPlanArn"] = (
            training_plan_arn  # https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceConfig.html
        )
    if inputs:
        payload["InputDataConfig"] = [
            {
                "ChannelName": channel,
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": uri,
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
            }
            for channel, uri in sorted(inputs.items())
        ]
    if hyperparameters:
        payload["HyperParameters"] = dict(hyperparameters)
    if environment:
        payload["Environment"] = dict(environment)
    request: dict[str, Any] = {
        "jobName": job_name,
        "jobQueue": setup.job_queue,
        "serviceJobType": SAGEMAKER_TRAINING,
        # quotaShareName, not shareIdentifier: a quota-share queue refuses a job without it, and
        # the submission role may submit only to its own share's ARN.
        "quotaShareName": setup.quota_share,
        "schedulingPriority": priority,
        "serviceRequestPayload": json.dumps(payload, sort_keys=True),
        "tags": all_tags,
    }
    if preemption_retries is not None:
        request["preemptionConfiguration"] = {"preemptionRetriesBeforeTermination": preemption_retries}
    return request


def active_training_plan(
    setup: TeamSetup, instance_type: str, published: str | None, *, now: datetime | None = None
) -> str | None:
    """The team's active training plan for ``instance_type`` from ``published`` (the value of its
    ``training_plans_parameter``, None when the parameter does not exist): the one ending last,
    or None when the team owns none active now."""
    live = live_training_plans(parse_training_plans(published, setup.training_plans_parameter), instance_type, now=now)
    return max(live, key=lambda p: p["ends"])["arn"] if live else None


def parse_training_plans(published: str | None, parameter: str | None) -> list[dict[str, str]]:
    """The plans ``published`` lists (the value of the training plans parameter ``parameter``;
    None when it does not exist: no plans), refused unless each names its arn, instance type and
    end."""
    if not published:
        return []
    try:
        plans = json.loads(published)
        for plan in plans:
            missing = {"arn", "instance_type", "ends"} - set(plan)
            if missing:
                raise KeyError(", ".join(sorted(missing)))
            datetime.fromisoformat(plan["ends"])
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise GovernanceError.single(
            parameter or "training plans",
            "not the team's training plans",
            str(published)[:80],
            f'a JSON list of {{"arn", "window", "instance_type", "ends"}} ({error})',
        ) from None
    return plans


def live_training_plans(
    plans: list[dict[str, str]], instance_type: str, *, now: datetime | None = None
) -> list[dict[str, str]]:
    """The ``plans`` of ``instance_type`` not ended at ``now`` (default: the current time)."""
    moment = now or datetime.now(UTC)
    return [p for p in plans if p["instance_type"] == instance_type and datetime.fromisoformat(p["ends"]) > moment]


def published_training_plans(ssm_client: Any, setup: TeamSetup) -> str | None:
    """The value of the team's training plans parameter (None when it does not exist)."""
    return read_training_plans(ssm_client, setup.training_plans_parameter)


def read_training_plans(ssm_client: Any, parameter: str | None) -> str | None:
    """The value of the training plans parameter ``parameter`` (None when it does not exist)."""
    if not parameter:
        return None
    try:
        return ssm_client.get_parameter(Name=parameter)["Parameter"]["Value"]
    except ssm_client.exceptions.ParameterNotFound:
        return None


def teams_training_plan(setup: TeamSetup, instance_type: str, ssm_client: Any = None) -> str | None:
    """The team's active training plan for ``instance_type``, read now from its training plans
    parameter with ``ssm_client`` (default boto3's; the submission role may read it); None when
    it owns none."""
    if ssm_client is None:
        import boto3

        ssm_client = boto3.client("ssm", region_name=setup.region)
    return active_training_plan(setup, instance_type, published_training_plans(ssm_client, setup))


def submit_training_job(batch_client: Any, setup: TeamSetup, *, ssm_client: Any = None, **job: Any) -> dict[str, Any]:
    """Submit with a boto3 Batch client (the team's submission role); returns Batch's answer
    (``jobArn``, ``jobName``, ``jobId``). ``job``: the arguments of :func:`service_job_request`.
    Unless ``training_plan_arn`` is given, the team's active training plan for the instance type
    (read with ``ssm_client``, default boto3's) is set, when it owns one."""
    if "training_plan_arn" not in job:
        job["training_plan_arn"] = teams_training_plan(setup, job["instance_type"], ssm_client)
    return batch_client.submit_service_job(**service_job_request(setup, **job))


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
    _check_instance_and_image(setup, instance_type, image_uri)
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
