"""Requeue the Batch jobs running on a Capacity Block before its instances terminate.

AWS Batch does not retry a job stopped with ``TerminateJob`` (its retry strategy applies only to
failures of the job or its host), so requeueing is explicit: terminate the job with a reason,
then submit a copy (same queue, job definition, parameters, container overrides, share,
priority, retry strategy, timeout and tags) tagged ``gpu-governance:requeued-from=<old id>``.

Which jobs: the instances launched into the block (``DescribeInstances`` filtered on
``capacity-reservation-id``) are mapped to their ECS container instances in the compute
environment's ECS cluster, and a RUNNING job of a queue feeding the compute environment is on
the block when its ``container.containerInstanceArn`` is one of those. Array and multi-node
parallel parents and jobs of EKS compute environments carry no container instance and are left
to the drain event and to their retry strategy when the instances terminate.

Every job is claimed in the ledger before it is touched (``requeue#<job id>``: claimed ->
terminated -> requeued), so a duplicate event stops nothing twice. A step that fails
(throttling, a crash) stays open and the next run resumes it; a resumed submit first looks for
the tagged copy, so a copy submitted just before a crash is never submitted again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from botocore.exceptions import ClientError

from ..contract import TAG_REQUEUED_FROM
from .ledger import Ledger

OPEN_STATUSES = ("claimed", "terminated")
DESCRIBE_JOBS_LIMIT = 100
# A job is only touched with this much of the invocation left (terminate, record, look up, submit,
# record); a claimed job left untouched is resumed by the next run.
JOB_SECONDS = 20


def jobs_on_block(*, compute_environment: str, reservation_id: str, ec2: Any, ecs: Any, batch: Any) -> list[dict[str, Any]]:
    """RUNNING jobs (DescribeJobs details) of the compute environment's queues on the block's instances."""
    instances = [i["InstanceId"] for page in ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": "capacity-reservation-id", "Values": [reservation_id]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]) for r in page["Reservations"] for i in r["Instances"]]
    environment = batch.describe_compute_environments(computeEnvironments=[compute_environment])["computeEnvironments"]
    if not instances or not environment or "ecsClusterArn" not in environment[0]:
        return []
    cluster = environment[0]["ecsClusterArn"]
    on_block = {arn for page in ecs.get_paginator("list_container_instances").paginate(
        cluster=cluster, filter="ec2InstanceId in [" + ", ".join(f"'{i}'" for i in instances) + "]",
    ) for arn in page["containerInstanceArns"]}
    queues = [q["jobQueueArn"] for page in batch.get_paginator("describe_job_queues").paginate() for q in page["jobQueues"]
              if any(o["computeEnvironment"] == compute_environment for o in q.get("computeEnvironmentOrder", []))]
    running = [s["jobId"] for queue in queues
               for page in batch.get_paginator("list_jobs").paginate(jobQueue=queue, jobStatus="RUNNING") for s in page["jobSummaryList"]]
    return [job for job in _describe(batch, running) if job.get("container", {}).get("containerInstanceArn") in on_block]


def copy_request(job: dict[str, Any]) -> dict[str, Any]:
    """SubmitJob parameters that run ``job`` again as it was submitted."""
    container = job.get("container", {})
    overrides = {
        "command": container.get("command"),
        # AWS_BATCH_* names are reserved: Batch sets them itself on the new job.
        "environment": [e for e in container.get("environment", []) if not e["name"].startswith("AWS_BATCH")] or None,
        "resourceRequirements": container.get("resourceRequirements"),
    }
    request = {
        "jobName": job["jobName"], "jobQueue": job["jobQueue"], "jobDefinition": job["jobDefinition"],
        "parameters": job.get("parameters"), "shareIdentifier": job.get("shareIdentifier"),
        "schedulingPriorityOverride": job.get("schedulingPriority"), "retryStrategy": job.get("retryStrategy"),
        "timeout": job.get("timeout"), "propagateTags": job.get("propagateTags"),
        "containerOverrides": {k: v for k, v in overrides.items() if v} or None,
        # aws:* tags are the service's own and cannot be set.
        "tags": {**{k: v for k, v in job.get("tags", {}).items() if not k.startswith("aws:")}, TAG_REQUEUED_FROM: job["jobId"]},
    }
    return {k: v for k, v in request.items() if v is not None}


def _unlimited() -> float:
    return float("inf")


def requeue(*, window: str, compute_environment: str, reservation_id: str, ends_at: datetime, dry_run: bool,
            ledger: Ledger, ec2: Any, ecs: Any, batch: Any, now: datetime, time_left=_unlimited) -> dict[str, Any]:
    """Requeue every job on the block once; in dry run only say which."""
    jobs = jobs_on_block(compute_environment=compute_environment, reservation_id=reservation_id, ec2=ec2, ecs=ecs, batch=batch)
    if dry_run:
        return {"would_requeue": sorted(j["jobId"] for j in jobs)}
    reason = (f"gpu-governance: Capacity Block {reservation_id} of window {window} ends {ends_at:%Y-%m-%d %H:%M} UTC and its "
              f"instances terminate 30 minutes earlier; requeued as a new job tagged {TAG_REQUEUED_FROM}")
    done, skipped, errors, deferred = [], [], [], []
    claimed = []
    for job in jobs:  # claimed first, all of them: what this invocation cannot finish, the next run resumes
        details = {"window": window, "reservation": reservation_id, "job": job["jobId"], "reason": reason, "request": copy_request(job)}
        if ledger.claim_action(f"requeue#{job['jobId']}", status="claimed", details=details, now=now):
            claimed.append(details)
        else:
            skipped.append(job["jobId"])  # handled by an earlier delivery of the same warning
    for details in claimed:
        if time_left() < JOB_SECONDS:
            deferred.append(details["job"])
            continue
        _advance(details, "claimed", ledger=ledger, batch=batch, now=now, resumed=False, done=done, errors=errors)
    return {"requeued": done, "already_handled": skipped, "errors": errors, "deferred": deferred}


def resume(*, ledger: Ledger, batch: Any, now: datetime, time_left=_unlimited) -> dict[str, Any]:
    """Finish requeues an earlier run left open (throttled, timed out or crashed)."""
    done, errors, deferred = [], [], []
    for _, status, details in ledger.actions("requeue#", OPEN_STATUSES):
        if time_left() < JOB_SECONDS:
            deferred.append(details["job"])
            continue
        _advance(details, status, ledger=ledger, batch=batch, now=now, resumed=True, done=done, errors=errors)
    return {"requeued": done, "errors": errors, "deferred": deferred}


def _advance(details, status, *, ledger: Ledger, batch, now, resumed: bool, done: list, errors: list) -> None:
    action_id, old = f"requeue#{details['job']}", details["job"]
    try:
        if status == "claimed":
            # Idempotent on the AWS side: terminating a job that already stopped changes nothing.
            batch.terminate_job(jobId=old, reason=details["reason"])
            ledger.record_action(action_id, status="terminated", details=details, now=now)
        new = (_submitted_copy(batch, details["request"], old) if resumed else None) or batch.submit_job(**details["request"])["jobId"]
        ledger.record_action(action_id, status="requeued", details={**details, "new_job": new}, now=now)
        done.append({"job": old, "new_job": new})
    except ClientError as error:
        errors.append({"job": old, "error": error.response.get("Error", {}).get("Code", ""), "retry": "next run"})


def _submitted_copy(batch, request: dict[str, Any], old: str) -> str | None:
    """The copy of ``old`` an interrupted run may already have submitted."""
    pages = batch.get_paginator("list_jobs").paginate(jobQueue=request["jobQueue"], filters=[{"name": "JOB_NAME", "values": [request["jobName"]]}])
    candidates = [s["jobId"] for page in pages for s in page["jobSummaryList"] if s["jobId"] != old]
    return next((j["jobId"] for j in _describe(batch, candidates) if j.get("tags", {}).get(TAG_REQUEUED_FROM) == old), None)


def _describe(batch, job_ids: Iterable[str]) -> list[dict[str, Any]]:
    ids = list(job_ids)
    return [job for i in range(0, len(ids), DESCRIBE_JOBS_LIMIT) for job in batch.describe_jobs(jobs=ids[i:i + DESCRIBE_JOBS_LIMIT])["jobs"]]
