"""How `gpu-governance status` reads a team's use of a ``batch_quota_share`` pool (quota-share
queue ``pool.name``): with the team's submission role, it calls exactly:
``batch:GetJobQueueSnapshot`` (the queue), ``batch:ListServiceJobs`` (per status, filtered by
the team's quota share), ``batch:DescribeServiceJob`` (the team's waiting and running jobs, and
``--job``) and, for a team with a GPU-hour limit, ``batch:ListQuotaShares`` (the queue: whether the
reclaim controller disabled the team's share at its limit, reclaim/gpu_hours.py). A running job's training plan is the ``ResourceConfig.TrainingPlanArn`` of the
CreateTrainingJob request Batch holds for it (``serviceRequestPayload``), which SageMaker runs the
job on (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceConfig.html).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from constructs_lib.cli.status import Unreadable
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.waiting import RUNNING, WAITING, Observation, ObservedJob
from gpu_governance_runtime.common.batch_jobs import job_id_of, service_job_size, service_job_time_limit
from gpu_governance_runtime.contract import CONSUMER_SAGEMAKER_TRAINING_JOBS, team_training_plans_parameter
from gpu_governance_runtime.policy import PoolPolicy

from .member import parse_training_plans, read_training_plans

BATCH_CALLS = (
    "batch:GetJobQueueSnapshot",
    "batch:ListServiceJobs",
    "batch:DescribeServiceJob",
    "batch:ListQuotaShares",
)
BATCH_ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")
BATCH_RUNNING = ("SCHEDULED", "STARTING", "RUNNING")
BATCH_DESCRIBED = (
    50  # waiting jobs described for their priority (running ones for their plan); more are shown by listing order
)


def batch_observation(
    batch: Any,
    pool: PoolPolicy,
    team: str,
    job_id: str | None = None,
    training_plans: Sequence[Mapping[str, str]] | None = None,
) -> Observation:
    """``training_plans``: the team's active plans as its training plans parameter lists them
    (None: not read), against which each running job's plan is told."""
    snapshot = batch.get_job_queue_snapshot(jobQueue=pool.name)
    in_use: dict[str, dict[str, int]] = {}
    for entry in (
        snapshot.get("queueUtilization", {}).get("quotaShareUtilization", {}).get("topCapacityUtilization", [])
    ):
        for usage in entry.get("capacityUsage", []):
            in_use.setdefault(entry["quotaShareName"], {})[usage["capacityUnit"]] = int(usage["quantity"])
    front = {
        job_id_of(f["jobArn"])
        for f in snapshot.get("frontOfQuotaShares", {}).get("quotaShares", {}).get(team, [])
        if f.get("jobArn")
    }
    share = next(s for s in pool.shares if s.name == team)
    # a disabled share starts no job: with a limit, the reclaim controller's doing (or the team is paused)
    admission_off = share.gpu_hour_limit is not None and any(
        q.get("state") == "DISABLED"
        for page in batch.get_paginator("list_quota_shares").paginate(jobQueue=pool.name)
        for q in page.get("quotaShares") or []
        if q.get("quotaShareName") == team
    )
    summaries: dict[str, dict] = {}
    for status in BATCH_ACTIVE:
        pages = batch.get_paginator("list_service_jobs").paginate(
            jobQueue=pool.name, jobStatus=status, filters=[{"name": "QUOTA_SHARE_NAME", "values": [team]}]
        )
        for page in pages:
            for summary in page["jobSummaryList"]:
                summaries.setdefault(summary["jobId"], summary)  # newest first: a job can repeat across pages
    if job_id is not None and job_id not in summaries:
        summaries[job_id] = batch.describe_service_job(jobId=job_id)
    waiting = sorted(
        (s for s in summaries.values() if s.get("status") == "RUNNABLE"),
        key=lambda s: (s["jobId"] not in front, s.get("createdAt", 0)),
    )
    running = [s for s in summaries.values() if s.get("status") in BATCH_RUNNING]  # described for their training plan
    details = {
        s["jobId"]: batch.describe_service_job(jobId=s["jobId"])
        for s in waiting[:BATCH_DESCRIBED] + running[:BATCH_DESCRIBED]
        if "serviceRequestPayload" not in s
    }
    jobs = tuple(
        _batch_job({**summary, **details.get(summary["jobId"], {})}, pool, team, front)
        for summary in summaries.values()
    )
    notes = (
        (f"{len(waiting) - BATCH_DESCRIBED} more waiting jobs not described: their priority is not known",)
        if len(waiting) > BATCH_DESCRIBED
        else ()
    )
    if len(running) > BATCH_DESCRIBED:
        notes += (
            f"{len(running) - BATCH_DESCRIBED} more running jobs not described: their training plan is not known",
        )
    if job_id is not None:
        jobs = tuple(j for j in jobs if j.job_id == job_id or j.state == WAITING)
    return Observation(
        backend=pool.backend,
        pool=pool.name,
        unit="instances",
        in_use=in_use,
        jobs=jobs,
        notes=notes,
        training_plans=None if training_plans is None else tuple(training_plans),
        admission_off=admission_off,
    )


def _batch_job(job: Mapping[str, Any], pool: PoolPolicy, team: str, front: set[str]) -> ObservedJob:
    size = service_job_size(dict(job), pool.capacity)
    status = job.get("status", "")
    reason_text = job.get("statusReason", "")
    state = RUNNING if status in BATCH_RUNNING else WAITING if status == "RUNNABLE" else status
    # Batch states a blocked queue head: MISCONFIGURATION:* never runs as is; CAPACITY:* waits on SageMaker capacity.
    code = (
        "misconfigured"
        if reason_text.startswith("MISCONFIGURATION:")
        else "backend"
        if reason_text.startswith("CAPACITY:")
        else None
    )
    if state == WAITING and code is None and job["jobId"] in front:
        reason_text = reason_text or "front of the team's quota share"
    return ObservedJob(
        job_id=job["jobId"],
        name=job.get("jobName", ""),
        team=job.get("quotaShareName", team),
        state=state,
        instance_type=size[0] if size else None,
        count=size[1] if size else 0,
        priority=int(job.get("schedulingPriority", 0)),
        priority_known="schedulingPriority" in job,
        submitted_at=job.get("createdAt", 0) / 1000,
        reason=code if state == WAITING else None,
        backend_reason=reason_text,
        training_plan=_training_plan(job.get("serviceRequestPayload")),
        started_at=job["startedAt"] / 1000 if job.get("startedAt") and state == RUNNING else None,
        run_time_s=service_job_time_limit(dict(job)),
    )


def _training_plan(payload: str | None) -> str | None:
    """The ``ResourceConfig.TrainingPlanArn`` of a service job's CreateTrainingJob request (None: on demand, or not described)."""
    try:
        return (json.loads(payload or "{}").get("ResourceConfig") or {}).get("TrainingPlanArn")
    except (ValueError, AttributeError):
        return None  # not a SageMaker request as Batch holds it: nothing to tell


def read(args: argparse.Namespace, pool, model) -> Observation:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    region = args.region or model.capacity_account.region
    try:
        plans, note = _training_plans(model, args.team, region)
        observation = batch_observation(batch_client(region), pool, args.team, args.job, training_plans=plans)
        return replace(observation, notes=observation.notes + note)
    except NoCredentialsError:
        raise Unreadable(
            "no AWS credentials: assume your team's submission role (it may call " + ", ".join(BATCH_CALLS) + ")"
        ) from None
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        operation = getattr(error, "operation_name", "")
        if "AccessDenied" in code or code in (
            "UnauthorizedOperation",
            "UnrecognizedClientException",
            "ExpiredTokenException",
        ):
            raise Unreadable(
                f"{code} on batch:{operation}: use your team's submission role, which may call {', '.join(BATCH_CALLS)}"
            ) from None
        raise Unreadable(
            f"batch:{operation} failed: {code}: {error.response.get('Error', {}).get('Message', '')}"
        ) from None
    except BotoCoreError as error:
        raise Unreadable(f"AWS Batch could not be reached: {error}") from None


def _training_plans(model, team: str, region: str) -> tuple[list[dict[str, str]] | None, tuple[str, ...]]:
    """The team's active training plans from the parameter the capacity controller publishes
    (``ssm:GetParameter``, which its submission role may call), when a window of the team feeds
    training jobs; (None, why) when it could not be read: the jobs are still explained."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    if not any(w.team == team and w.feeds.kind == CONSUMER_SAGEMAKER_TRAINING_JOBS for w in model.capacity_windows):
        return None, ()
    parameter = team_training_plans_parameter(model.organisation, team)
    try:
        return parse_training_plans(read_training_plans(ssm_client(region), parameter), parameter), ()
    except NoCredentialsError:
        raise
    except (BotoCoreError, ClientError, GovernanceError) as error:
        why = " ".join(str(error).split())
        return None, (
            f"the team's training plans ({parameter}) could not be read, so whether running jobs are on them is not shown: {why}",
        )


def ssm_client(region: str):
    import boto3

    return boto3.session.Session(region_name=region).client("ssm")


def batch_client(region: str):
    import boto3

    # a session of its own: the credentials of this run's environment, never ones cached earlier in the process
    return boto3.session.Session(region_name=region).client("batch")
