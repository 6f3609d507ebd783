"""What the Batch probes share: their options, the smallest SageMaker payload, a submission that
is terminated again whatever happens, and the wait for a service job to start or fail."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from gpu_governance_runtime.contract import submission_tags  # plain Python: no aws_cdk

from ..framework import Cleanup, Context, Option

QUEUE = Option("--queue", "the quota-share job queue (its name)")
TEAM_A = Option("--team-a", "the team whose submission role the probes act as")
TEAM_B = Option("--team-b", "another team with a share in --queue: what team A must not reach")
COST_CENTRE_A = Option("--cost-centre-a", "team A's cost centre, when the governance file declares one")
COST_CENTRE_B = Option("--cost-centre-b", "team B's cost centre, when the governance file declares one")
IMAGE = Option("--image", "any training image the account can pull")
INSTANCE_TYPE = Option("--instance-type", "an instance type of team A's quota share (ml.g6e.12xlarge)")
OUTPUT = Option("--output", "an S3 output path team A's execution role may write")
TIMEOUT = Option("--timeout-minutes", "how long a probe waits for a job to start", float, 20.0)
OPTIONS = [QUEUE, TEAM_A, TEAM_B, COST_CENTRE_A, COST_CENTRE_B, IMAGE, INSTANCE_TYPE, OUTPUT, TIMEOUT]
SUBMITS = (QUEUE.flag, TEAM_A.flag, IMAGE.flag, INSTANCE_TYPE.flag, OUTPUT.flag)

STARTED = {"SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"}
MAX_RUNTIME_SECONDS = 60  # the payload's StoppingCondition: what a job that starts may bill
BATCH_TRAINING_JOB_PREFIX = "AWSBatch"  # constructs_lib.model, without importing the library
REASON = "gpu-governance verify-live probe"


def payload(name: str, role_arn: str, image: str, instance_type: str, output: str) -> dict[str, Any]:
    """The smallest SageMaker CreateTrainingJob request: one instance, one minute at most."""
    return {
        "TrainingJobName": name,
        "RoleArn": role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["true"],
        },
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": output},
        "StoppingCondition": {"MaxRuntimeInSeconds": MAX_RUNTIME_SECONDS},
    }


def team_payload(context: Context, name: str, team: str) -> dict[str, Any]:
    """``payload`` running as ``team``'s execution role, from the command line's image and type."""
    args = context.args
    return payload(name, context.team_role(team, "training"), args.image, args.instance_type, args.output)


def cost_of_service_jobs(jobs: int, *, started: bool = False) -> Callable[[argparse.Namespace], str]:
    """A cost bound: ``jobs`` service jobs of one instance; ``started``: the probe lets them start."""

    def bound(args: argparse.Namespace) -> str:
        instance = args.instance_type or "<--instance-type>"
        most = (
            f"at most {jobs} training job{'s' if jobs > 1 else ''} of one {instance} for {MAX_RUNTIME_SECONDS} s"
            " each (the payload's MaxRuntimeInSeconds)"
        )
        if started:
            return f"{most}: each job that starts is terminated at once"
        return f"{most}, and nothing if Batch has not started them: each is terminated right after it is accepted"

    return bound


def tags_of(args: argparse.Namespace, team: str) -> dict[str, str]:
    """What a team's tooling tags each job with (the discovery document's submission_tags)."""
    centre = args.cost_centre_a if team == args.team_a else args.cost_centre_b if team == args.team_b else None
    return submission_tags(team, centre)


def denied(error: Exception) -> bool:
    code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
    return code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation") or "not authorized" in str(error)


def submit(
    context: Context,
    cleanup: Cleanup,
    batch: Any,
    *,
    share: str,
    tags: dict[str, str],
    body: dict[str, Any],
    name: str,
    priority: int | None = 1,
) -> str:
    """SubmitServiceJob into ``share`` of the command line's queue; the job is terminated (by the
    same client: a team may stop its own jobs) when the probe ends."""
    request: dict[str, Any] = {
        "jobName": name,
        "jobQueue": context.args.queue,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": json.dumps(body),
        "quotaShareName": share,
        "tags": tags,
    }
    if priority is not None:
        request["schedulingPriority"] = priority
    job_id = batch.submit_service_job(**request)["jobId"]
    cleanup.add(f"terminate service job {job_id}", lambda: terminate(batch, job_id))
    return job_id


def terminate(batch: Any, job_id: str) -> None:
    """Stops the job unless it ended already (terminating an ended job is refused)."""
    status = batch.describe_service_job(jobId=job_id)["status"]
    if status not in ("SUCCEEDED", "FAILED"):
        batch.terminate_service_job(jobId=job_id, reason=REASON)


def until_started_or_failed(context: Context, batch: Any, job_id: str) -> dict[str, Any]:
    """The service job as last described once it started or failed, or at the timeout."""
    deadline, job = context.clock() + context.args.timeout_minutes * 60, {}
    while context.clock() < deadline:
        job = batch.describe_service_job(jobId=job_id)
        if job["status"] in STARTED or job["status"] == "FAILED":
            break
        context.sleep(15)
    return job


def refused(error: ClientError) -> bool:
    """Refused by Batch at submission: for permissions (denied) or the request (a ClientException)."""
    return denied(error) or error.response.get("Error", {}).get("Code") == "ClientException"
