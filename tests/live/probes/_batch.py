"""What the Batch probes share: their options, the smallest SageMaker payload, a submission that
is terminated again whatever happens, the wait for a service job to start or fail, and a
temporary copy of a controller's role to act as."""

from __future__ import annotations

import argparse
import json
import uuid
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
FAIR_SHARE_QUEUE = Option("--fair-share-queue", "a governed fair-share job queue (its name) with a share for team A")
JOB_DEFINITION = Option("--job-definition", "one of team A's job definitions there, as name:revision")
RECLAIM_ROLE = Option("--reclaim-role", "the reclaim controller's role name (<organisation>-capacity-reclaimer)")
OPTIONS = [
    QUEUE,
    TEAM_A,
    TEAM_B,
    COST_CENTRE_A,
    COST_CENTRE_B,
    IMAGE,
    INSTANCE_TYPE,
    OUTPUT,
    TIMEOUT,
    FAIR_SHARE_QUEUE,
    JOB_DEFINITION,
    RECLAIM_ROLE,
]
SUBMITS = (QUEUE.flag, TEAM_A.flag, IMAGE.flag, INSTANCE_TYPE.flag, OUTPUT.flag)

STARTED = {"SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"}
# IAM is eventually consistent: a role or policy just made may be refused for some seconds.
PROPAGATION_SECONDS = 90
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
    body: dict[str, Any] | str,
    name: str,
    priority: int | None = 1,
) -> str:
    """SubmitServiceJob into ``share`` of the command line's queue (``body``: the payload, or its
    JSON text as sent); the job is terminated (by the same client: a team may stop its own jobs)
    when the probe ends."""
    request: dict[str, Any] = {
        "jobName": name,
        "jobQueue": context.args.queue,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": body if isinstance(body, str) else json.dumps(body),
        "quotaShareName": share,
        "tags": tags,
    }
    if priority is not None:
        request["schedulingPriority"] = priority
    job_id = batch.submit_service_job(**request)["jobId"]
    cleanup.add(f"terminate service job {job_id}", lambda: terminate(batch, job_id))
    return job_id


def as_team_a(context: Context) -> Any:
    """A Batch client acting as team A's submission role."""
    return context.client("batch", context.team_role(context.args.team_a, "submit"))


def submit_own(
    context: Context,
    cleanup: Cleanup,
    batch: Any,
    name: str,
    *,
    body: dict[str, Any] | str | None = None,
    tags: dict[str, str] | None = None,
) -> str:
    """A job of team A in its own share, submitted as its tooling does: its tags and a payload named
    after it, unless ``body`` or ``tags`` say otherwise."""
    a = context.args.team_a
    return submit(
        context,
        cleanup,
        batch,
        share=a,
        tags=tags_of(context.args, a) if tags is None else tags,
        body=team_payload(context, f"{a}-{name}", a) if body is None else body,
        name=name,
    )


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


def _caller(context: Context) -> str:
    """The ARN a trust policy names for whoever runs the probe (a role's, for an assumed-role session)."""
    arn = context.client("sts", None).get_caller_identity()["Arn"]
    if ":assumed-role/" not in arn:
        return arn
    return context.client("iam", None).get_role(RoleName=arn.split("/")[1])["Role"]["Arn"]


def copy_of_role(context: Context, cleanup: Cleanup, role: str) -> str:
    """A temporary role the caller may assume, holding the policies of ``role`` (a name or ARN: a
    controller's own role trusts only Lambda); deleted by the undo steps."""
    role_name = role.rsplit("/", 1)[-1]
    iam = context.client("iam", None)
    name = f"gpu-governance-verify-live-{uuid.uuid4().hex[:12]}"
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": _caller(context)}, "Action": "sts:AssumeRole"}],
    }
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust), MaxSessionDuration=3600)["Role"][
        "Arn"
    ]
    cleanup.add(f"delete role {name}", lambda: iam.delete_role(RoleName=name))
    for policy in iam.list_role_policies(RoleName=role_name)["PolicyNames"]:
        document = iam.get_role_policy(RoleName=role_name, PolicyName=policy)["PolicyDocument"]
        iam.put_role_policy(RoleName=name, PolicyName=policy, PolicyDocument=json.dumps(document))
        cleanup.add(
            f"delete policy {policy} of role {name}",
            lambda p=policy: iam.delete_role_policy(RoleName=name, PolicyName=p),
        )
    for attached in iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]:
        iam.attach_role_policy(RoleName=name, PolicyArn=attached["PolicyArn"])
        cleanup.add(
            f"detach {attached['PolicyArn']} from role {name}",
            lambda p=attached["PolicyArn"]: iam.detach_role_policy(RoleName=name, PolicyArn=p),
        )
    return arn


def while_iam_propagates(context: Context, call):
    """``call()``, again while IAM answers AccessDenied for at most PROPAGATION_SECONDS (a new role
    or policy is not seen everywhere at once); the last answer stands."""
    deadline = context.clock() + PROPAGATION_SECONDS
    while True:
        try:
            return call()
        except ClientError as error:
            if not denied(error) or context.clock() >= deadline:
                raise
            context.sleep(10)
