"""Submit a SageMaker training job into the team's quota share with boto3 only.

One request builder serves the boto3 path, the AWS CLI snippet (`gpu-governance team
submit-example --backend batch`) and the tests that validate it against botocore's models.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from constructs_lib.core.errors import GovernanceError
from gpu_governance_runtime.contract import TAG_TEAM

from .setup import MEMBER_BACKENDS, TeamSetup

SAGEMAKER_TRAINING = "SAGEMAKER_TRAINING"
# SageMaker's TrainingJobName (botocore model): 1-63 characters.
TRAINING_JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"  # SageMaker syncs this folder with CheckpointConfig.S3Uri
DEFAULT_MAX_RUNTIME_SECONDS = 24 * 3600
DEFAULT_VOLUME_GB = 100


def unique_job_name(team: str, base: str, now: datetime | None = None) -> str:
    """``<team>-<base>-<UTC time>``: the execution role trusts only training jobs named
    ``<team>-*`` (docs/security.md), and a time suffix keeps retries apart."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return check_job_name(team, f"{team}-{base}-{stamp}")


def check_job_name(team: str, name: str) -> str:
    if not name.startswith(f"{team}-") or not TRAINING_JOB_NAME.fullmatch(name):
        raise GovernanceError.single(
            "job_name",
            "not a training job name of the team",
            name,
            f"'{team}-' then letters, digits and '-', at most 63 characters",
        )
    return name


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
