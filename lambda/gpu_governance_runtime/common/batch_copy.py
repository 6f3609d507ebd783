"""Bringing back a Batch job the controllers stopped: one copy, submitted once, with everything
that defined the original. Both controllers stop jobs with ``TerminateJob`` (the reclaim
controller's victims on a fair-share queue, the capacity controller's jobs on an expiring
Capacity Block) and both bring them back here.

AWS Batch does not bring a terminated job back by itself: ``TerminateJob`` moves a STARTING or
RUNNING job to FAILED [aws: batch.terminate-job-ends-failed] and a retry strategy retries failures
of the job or its host, not a termination [aws: batch.terminated-job-not-retried]. So the copy is submitted
explicitly, tagged ``gpu-governance:requeued-from=<original id>`` and
``gpu-governance:times-preempted=<n>``: how often the work was stopped along its whole chain of
copies (:func:`times_stopped`), which the reclaim planner's protection and re-borrow backoff read.
Both keys are the platform's: a member's submission may not set them (``aws:TagKeys``,
``contract.PLATFORM_TAG_KEYS``) and a member may not tag or untag a job once submitted
(``constructs_lib/backends/batch_queue.py``), so a team can neither forge a count nor reset it by re-tagging.

Exactly once: ``SubmitJob`` has no idempotency token, and a request whose answer is lost (a read
timeout, a dropped connection, a 5xx) may have been accepted. So the copy is submitted through a
client that sends one request (``common.clients.SUBMIT_ONCE``), the caller records ``submitting``
before it, and a run that finds a copy possibly in flight (a listing may lag,
[aws: batch.listing-lags]) looks for it by its tag before
submitting again; Batch lists a job shortly after accepting it, so a copy not found is submitted
again only ``LISTING_GRACE_SECONDS`` after the uncertain request.

A job is brought back faithfully only if everything that defined it can be given to
``SubmitJob`` again (:func:`restartable`): array jobs (a parent's children and their indices) and
jobs others wait on (Batch fails a job's dependants when it fails,
https://docs.aws.amazon.com/batch/latest/userguide/job_dependencies.html, and a submitted job's
``dependsOn`` cannot be re-pointed) are not. The reclaim planner counts them against their team's
quota first and, beyond it, stops them for good, with no copy (docs/reclaim.md, *Jobs that cannot
come back*).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import ClientError

from ..contract import TAG_REQUEUED_FROM, TAG_TIMES_PREEMPTED
from . import log

DESCRIBE_JOBS_LIMIT = 100  # https://docs.aws.amazon.com/batch/latest/APIReference/API_DescribeJobs.html
# Batch lists a job a moment after SubmitJob returns (its listings are eventually consistent): an
# uncertain submit is only repeated when its copy is still not listed this long after it.
LISTING_GRACE_SECONDS = 300.0
# The reason the controllers give TerminateJob begins with it: a FAILED job whose statusReason
# does not, failed on its own and is never copied.
REASON_PREFIX = "gpu-governance:"


def restartable(job: dict[str, Any], waited_on: Iterable[str] = ()) -> str | None:
    """None when :func:`copy_request` brings ``job`` back as it was; else why not."""
    if "arrayProperties" in job:
        return "an array job (its children and indices cannot be submitted again as they were)"
    if job["jobId"] in set(waited_on):
        return "other jobs depend on it (Batch would fail them, and their dependsOn cannot be re-pointed)"
    if "ecsProperties" in job:
        return "a multi-container ECS job"
    return None


_COUNT = re.compile(r"[1-9][0-9]{0,5}")


def times_stopped(job: dict[str, Any]) -> int:
    """How often the controllers stopped the work ``job`` carries before it: 0 for a job a team
    submitted, the copy's ``times-preempted`` tag for a copy. A copy whose count is absent (made
    before the tag existed) or malformed counts as stopped once, with a log line: a count can only
    lengthen the planner's protection and backoff, never hide a job from reclaim, and reading it
    never fails the pool's tick."""
    tags = job.get("tags") or {}
    if TAG_REQUEUED_FROM not in tags:
        return 0
    value = tags.get(TAG_TIMES_PREEMPTED)
    if isinstance(value, str) and _COUNT.fullmatch(value):
        return int(value)
    if value is not None:
        log.write(
            {
                "event": "tag_ignored",
                "job_id": job.get("jobId"),
                "tag": TAG_TIMES_PREEMPTED,
                "value": value,
                "allowed": "a whole number 1-999999; counted as 1",
            }
        )
    return 1


def copy_request(job: dict[str, Any]) -> dict[str, Any]:
    """SubmitJob parameters that run ``job`` again as it was submitted: same queue, job
    definition (ARN with revision), parameters, share, scheduling priority, retry strategy,
    timeout, tags (and their propagation), dependencies, and the container / node / EKS pod
    settings it ran with (DescribeJobs gives them with the overrides applied)."""
    request = {
        "jobName": job["jobName"],
        "jobQueue": job["jobQueue"],
        "jobDefinition": job["jobDefinition"],
        "parameters": job.get("parameters") or None,
        "shareIdentifier": job.get("shareIdentifier"),
        "schedulingPriorityOverride": job.get("schedulingPriority"),
        "retryStrategy": job.get("retryStrategy"),
        "timeout": job.get("timeout"),
        "propagateTags": job.get("propagateTags"),
        "dependsOn": [{k: v for k, v in d.items() if k in ("jobId", "type")} for d in job.get("dependsOn", [])] or None,
        "containerOverrides": _container_overrides(job.get("container", {})),
        "nodeOverrides": _node_overrides(job.get("nodeProperties")),
        "eksPropertiesOverride": _eks_overrides(job.get("eksProperties")),
        # aws:* tags are the service's own and cannot be set.
        "tags": {
            **{k: v for k, v in job.get("tags", {}).items() if not k.startswith("aws:")},
            TAG_REQUEUED_FROM: job["jobId"],
            TAG_TIMES_PREEMPTED: str(min(times_stopped(job) + 1, 999_999)),
        },
    }
    return {k: v for k, v in request.items() if v is not None}


def _container_overrides(container: dict[str, Any]) -> dict[str, Any] | None:
    overrides = {
        "command": container.get("command"),
        # AWS_BATCH_* names are reserved: Batch sets them itself on the new job.
        "environment": [e for e in container.get("environment", []) if not e["name"].startswith("AWS_BATCH")] or None,
        "resourceRequirements": container.get("resourceRequirements"),
        "instanceType": container.get("instanceType"),
    }
    return {k: v for k, v in overrides.items() if v} or None


def _node_overrides(nodes: dict[str, Any] | None) -> dict[str, Any] | None:
    if not nodes:
        return None
    ranges = [
        {"targetNodes": r["targetNodes"], "containerOverrides": c}
        for r in nodes.get("nodeRangeProperties", [])
        if (c := _container_overrides(r.get("container", {})))
    ]
    return {"numNodes": nodes["numNodes"], **({"nodePropertyOverrides": ranges} if ranges else {})}


def _eks_overrides(eks: dict[str, Any] | None) -> dict[str, Any] | None:
    pod = (eks or {}).get("podProperties")
    if not pod:
        return None
    fields = ("name", "image", "command", "args", "env", "resources")
    overrides = {
        kind: [{k: c[k] for k in fields if c.get(k)} for c in pod.get(kind, [])] or None
        for kind in ("containers", "initContainers")
    }
    if pod.get("metadata", {}).get("labels"):
        overrides["metadata"] = {"labels": pod["metadata"]["labels"]}
    return {"podProperties": {k: v for k, v in overrides.items() if v}}


def stopped_by_us(job: dict[str, Any]) -> bool:
    """A job the controllers terminated: FAILED with their reason."""
    return job.get("status") == "FAILED" and str(job.get("statusReason", "")).startswith(REASON_PREFIX)


def find_copy(batch: Any, request: dict[str, Any], original: str) -> str | None:
    """The copy of ``original`` an earlier, interrupted or timed-out run may have submitted: a job of
    the same name in the queue tagged as requeued from it (ListJobs with a filter lists every status)."""
    pages = batch.get_paginator("list_jobs").paginate(
        jobQueue=request["jobQueue"], filters=[{"name": "JOB_NAME", "values": [request["jobName"]]}]
    )
    candidates = [s["jobId"] for page in pages for s in page["jobSummaryList"] if s["jobId"] != original]
    return next(
        (j["jobId"] for j in describe(batch, candidates) if j.get("tags", {}).get(TAG_REQUEUED_FROM) == original), None
    )


def submit_once(
    *,
    batch: Any,
    submit: Any,
    request: dict[str, Any],
    original: str,
    uncertain_since: float | None,
    now: float,
    submitting: Callable[[float], None],
) -> str | None:
    """The copy's job id: found, or submitted now with exactly one request. None: an earlier
    request may have been accepted and is not listed yet; the next run looks again.

    ``submitting(now)`` records the intent before the request; ``uncertain_since`` is the time of
    an earlier such record whose outcome is unknown (None: no request is in doubt). A request
    Batch refused (a 4xx answer: throttled, invalid) raises :class:`SubmitRefused`; anything else
    leaves the request in doubt and raises as it came."""
    found = find_copy(batch, request, original)
    if found is not None:
        return found
    if uncertain_since is not None and now - uncertain_since < LISTING_GRACE_SECONDS:
        return None
    submitting(now)
    try:
        return submit.submit_job(**request)["jobId"]
    except ClientError as error:
        if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400) < 500:
            raise SubmitRefused(error.response.get("Error", {}).get("Code", ""), str(error)) from error
        raise


class SubmitRefused(Exception):
    """Batch answered SubmitJob with a client error: no copy was made, another request may go at once."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


def describe(batch: Any, job_ids: Iterable[str]) -> list[dict[str, Any]]:
    ids = list(job_ids)
    return [
        job
        for i in range(0, len(ids), DESCRIBE_JOBS_LIMIT)
        for job in batch.describe_jobs(jobs=ids[i : i + DESCRIBE_JOBS_LIMIT])["jobs"]
    ]
