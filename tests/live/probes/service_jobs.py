"""Service jobs and the submission guard (register sections ``sm-job.*`` and ``events.*``): what
Batch and SageMaker do with a service job's tags and payload, and how fast Batch answers the
guard's reads. Each submits into team A's own share as A's tooling would, and the job is
terminated whatever happens; each payload stops itself after 60 seconds.

- service-job-tags-on-training-job: does the training job Batch creates carry the service job's
  tags? The SageMaker SDK moves a payload's ``Tags`` to the Batch job; the guard requires the
  team's tags on the training job itself, so SDK submissions pass it only if Batch copies them.
- instance-preferences-counted, duplicate-key-read: what a payload the guard refuses would do
  were it let through. They need the queue's guard in dry run (``guard_mode: act`` stops the job
  before SageMaker sees it: inconclusive).
- describe-service-job-rate: how many DescribeServiceJob a second one client gets before Batch
  throttles it, against the guard's peak.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from gpu_governance_runtime.guard.checks import training_jobs  # plain Python: no aws_cdk

from ..framework import Cleanup, Context, Probe, Verdict, failed, inconclusive, passed
from ._batch import (
    OPTIONS as BATCH_OPTIONS,
    STARTED,
    SUBMITS,
    as_team_a,
    cost_of_service_jobs,
    denied,
    refused,
    submit_own,
    tags_of,
    team_payload,
    until_started_or_failed,
)

OPTIONS = BATCH_OPTIONS
PROBE_TAG = "verify-live-tag-source"  # a key of no one's: on the service job and in the payload, to see which wins
DUPLICATE_KEY = "verify-live-copy"
# The guard's peak: 5 SubmitServiceJob a second per account [aws: events.submit-service-job-rate], two of its
# reads each (constructs_lib/controllers/guard.py, CONCURRENCY).
GUARD_PEAK_READS_PER_SECOND = 10
READS = 100
GUARD_STOPPED = "submission guard"  # the reason the guard gives TerminateServiceJob (guard/handler.py)


def _training_job(context: Context, batch: Any, job_id: str) -> tuple[str | None, dict[str, Any]]:
    """The training job Batch created for the service job (None: none before it failed or the
    timeout), and the job as last described."""
    job = until_started_or_failed(context, batch, job_id)
    created = training_jobs(job)
    return (created[-1] if created else None), job


def _invalid(error: ClientError) -> bool:
    """Refused by Batch for the request (a ClientException), not for the submitter's permissions."""
    return refused(error) and not denied(error)


def _no_training_job(job_id: str, job: dict[str, Any]) -> Verdict:
    reason = job.get("statusReason", "")
    if GUARD_STOPPED in reason:
        return inconclusive(f"job {job_id} was stopped by the submission guard: run this probe where it is in dry run")
    return inconclusive(
        f"no training job for {job_id} (it was {job.get('status', '?')}: {reason or 'no capacity before the timeout?'})"
    )


def service_job_tags_on_training_job(context: Context, cleanup: Cleanup) -> Verdict:
    """Two jobs of A's: one as the SageMaker SDK sends it (the team's tags on the service job, none
    in the payload), one with a key of the probe's in both places."""
    args, a = context.args, context.args.team_a
    batch, sagemaker = as_team_a(context), context.client("sagemaker", None)
    team_tags = tags_of(args, a)
    both_body = {
        **team_payload(context, f"{a}-verify-live-both-tags", a),
        "Tags": [{"Key": PROBE_TAG, "Value": "payload"}],
    }
    try:
        sdk = submit_own(context, cleanup, batch, "verify-live-sdk-tags")
        both = submit_own(
            context,
            cleanup,
            batch,
            "verify-live-both-tags",
            body=both_body,
            tags={**team_tags, PROBE_TAG: "service-job"},
        )
    except ClientError as error:
        return inconclusive(f"team {a} cannot submit into its own share: {error}")

    def tags(arn: str) -> dict[str, str]:
        pages = sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn)
        return {t["Key"]: t["Value"] for page in pages for t in page.get("Tags", [])}

    arn, job = _training_job(context, batch, sdk)
    if arn is None:
        return _no_training_job(sdk, job)
    carried = tags(arn)
    both_arn, _ = _training_job(context, batch, both)
    wins = repr(tags(both_arn).get(PROBE_TAG)) if both_arn else "nothing (it has no training job)"
    which = f"where the service job and the payload name {PROBE_TAG}, the training job carries {wins}"
    missing = {k: v for k, v in team_tags.items() if carried.get(k) != v}
    if missing:
        return failed(
            f"training job {arn} of a service job tagged {team_tags} carries {carried}: Batch does not copy the service "
            f"job's tags, so SageMaker SDK submissions lack {sorted(missing)} and the guard stops them; teams keep the "
            f"tags in the payload (service_job_request); {which}"
        )
    return passed(f"training job {arn} carries the service job's tags {team_tags}; {which}")


def instance_preferences_counted(context: Context, cleanup: Cleanup) -> Verdict:
    """A's payload with its instance type among ``InstancePreferences`` instead of ``InstanceType``."""
    args, a = context.args, context.args.team_a
    batch = as_team_a(context)
    body = team_payload(context, f"{a}-verify-live-preferences", a)
    body["ResourceConfig"] = {
        "InstancePreferences": [{"InstanceType": args.instance_type, "InstanceCount": 1}],
        "VolumeSizeInGB": 1,
    }
    try:
        job_id = submit_own(context, cleanup, batch, "verify-live-preferences", body=body)
    except ClientError as error:
        if _invalid(error):
            return passed(f"Batch refuses a payload without ResourceConfig.InstanceType: {error}")
        return inconclusive(f"SubmitServiceJob failed: {error}")
    usage = batch.describe_service_job(jobId=job_id).get("capacityUsage") or []
    counted = [f"{u.get('quantity')} {u.get('capacityUnit')}" for u in usage]
    if any(u.get("capacityUnit") == args.instance_type and u.get("quantity") for u in usage):
        return passed(f"job {job_id} is counted as {', '.join(counted)}: the share counts the preferred type")
    job = until_started_or_failed(context, batch, job_id)
    status, reason = job.get("status", "?"), job.get("statusReason", "")
    if status in STARTED:
        return failed(
            f"job {job_id} reached {status} counted as {counted or 'nothing'}, not 1 {args.instance_type}: a job without "
            "ResourceConfig.InstanceType runs outside the quota share; the guard's refusal is what keeps it in (guard_mode: act)"
        )
    if status == "FAILED" and GUARD_STOPPED not in reason:
        return passed(f"job {job_id} failed before starting: {reason}")
    return inconclusive(
        f"job {job_id} ended {status} ({reason or 'no capacity before the timeout?'}), counted as {counted}"
    )


def duplicate_key_read(context: Context, cleanup: Cleanup) -> Verdict:
    """A's payload naming one hyperparameter twice ("first", then "last"): which does the training job get?"""
    a = context.args.team_a
    batch, sagemaker = as_team_a(context), context.client("sagemaker", None)
    body = json.dumps(team_payload(context, f"{a}-verify-live-duplicate", a))
    text = f'{body[:-1]}, "HyperParameters": {{"{DUPLICATE_KEY}": "first", "{DUPLICATE_KEY}": "last"}}}}'
    try:
        job_id = submit_own(context, cleanup, batch, "verify-live-duplicate", body=text)
    except ClientError as error:
        if _invalid(error):
            return passed(f"Batch refuses a payload naming a key twice: {error}")
        return inconclusive(f"SubmitServiceJob failed: {error}")
    arn, job = _training_job(context, batch, job_id)
    if arn is None:
        return _no_training_job(job_id, job)
    read = (sagemaker.describe_training_job(TrainingJobName=arn.rsplit("/", 1)[-1]).get("HyperParameters") or {}).get(
        DUPLICATE_KEY
    )
    if read == "last":
        return passed(f"training job {arn} has the last copy, as the guard's parser reads a payload")
    if read == "first":
        return failed(
            f"training job {arn} has the first copy; the guard reads the last: its refusal of any key named twice is "
            "what keeps a payload from showing it one value and SageMaker another"
        )
    return inconclusive(f"training job {arn} has {DUPLICATE_KEY} = {read!r}")


def describe_service_job_rate(context: Context, cleanup: Cleanup) -> Verdict:
    """One job of A's, then READS DescribeServiceJob of it as fast as one client goes, until Batch
    throttles one (an error, or an answer botocore had to retry)."""
    try:
        job_id = submit_own(context, cleanup, as_team_a(context), "verify-live-reads")
    except ClientError as error:
        return inconclusive(f"team {context.args.team_a} cannot submit into its own share: {error}")
    batch = context.client("batch", None)
    start, reads, throttled = context.clock(), 0, None
    while reads < READS and throttled is None:
        try:
            answer = batch.describe_service_job(jobId=job_id)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in ("ThrottlingException", "TooManyRequestsException"):
                raise
            throttled = f"throttled ({error.response['Error']['Code']})"
            break
        reads += 1
        retried = answer.get("ResponseMetadata", {}).get("RetryAttempts", 0)
        if retried:
            throttled = f"retried {retried} times"
    seconds = max(context.clock() - start, 1e-9)
    rate = reads / seconds
    said = f"{reads} DescribeServiceJob in {seconds:.1f} s ({rate:.1f} a second)"
    if throttled is None and rate >= GUARD_PEAK_READS_PER_SECOND:
        return passed(f"{said}, none throttled: above the guard's peak of {GUARD_PEAK_READS_PER_SECOND}")
    if throttled is None:
        return inconclusive(f"{said}, none throttled: one client does not reach the guard's peak here")
    if rate >= GUARD_PEAK_READS_PER_SECOND:
        return passed(
            f"{said}, then {throttled}: Batch throttles above the guard's peak of {GUARD_PEAK_READS_PER_SECOND}"
        )
    return failed(
        f"{said}, then {throttled}: below the guard's peak of {GUARD_PEAK_READS_PER_SECOND}; at its peak the guard's reads "
        "are throttled: events wait (Throttles, AsyncEventAge alarms) and are retried, never decided"
    )


def _reads_only(args) -> str:
    return (
        f"{cost_of_service_jobs(1)(args)}; {READS} DescribeServiceJob calls, free, which may briefly throttle other Batch "
        "reads of the sandbox account"
    )


PROBES = [
    Probe(
        name="service-job-tags-on-training-job",
        row="sm-job.service-job-tags-reach-the-training-job",
        does=(
            "as team A's submission role, submits into A's share one job with A's tags on the service job only (as the "
            f"SageMaker SDK sends it) and one naming {PROBE_TAG} on both; reads each training job's tags (ListTags)"
        ),
        passes_when=(
            "the first training job carries the service job's team tags (SDK submissions pass the guard); which value of "
            f"{PROBE_TAG} the second carries is printed"
        ),
        needs=SUBMITS,
        cost=cost_of_service_jobs(2, started=True),
        run=service_job_tags_on_training_job,
    ),
    Probe(
        name="instance-preferences-counted",
        row="sm-job.uncounted-without-instance-type",
        does=(
            "as team A's submission role, submits into A's share a payload naming --instance-type among "
            "ResourceConfig.InstancePreferences instead of InstanceType; reads its capacityUsage (the queue's guard must "
            "be in dry run)"
        ),
        passes_when=(
            "Batch counts it as one --instance-type, or refuses it, or it fails before starting; it fails when the job "
            "starts counted as anything else"
        ),
        needs=SUBMITS,
        cost=cost_of_service_jobs(1, started=True),
        run=instance_preferences_counted,
    ),
    Probe(
        name="duplicate-key-read",
        row="sm-job.duplicate-keys-read-one-way",
        does=(
            f"as team A's submission role, submits into A's share a payload whose HyperParameters name {DUPLICATE_KEY} "
            "twice (first, last); reads the training job's HyperParameters (the queue's guard must be in dry run)"
        ),
        passes_when=(
            "the training job has the last copy, as the guard's parser (Python's json) reads it, or Batch refuses the "
            "payload; it fails when SageMaker reads the first"
        ),
        needs=SUBMITS,
        cost=cost_of_service_jobs(1, started=True),
        run=duplicate_key_read,
    ),
    Probe(
        name="describe-service-job-rate",
        row="events.describe-service-job-rate",
        does=(
            f"as team A's submission role, submits one job into A's share; as the caller reads it {READS} times "
            "(DescribeServiceJob) as fast as one client can, stopping at the first throttled answer"
        ),
        passes_when=f"Batch answers at least {GUARD_PEAK_READS_PER_SECOND} reads a second (the guard's peak) unthrottled",
        needs=SUBMITS,
        cost=_reads_only,
        run=describe_service_job_rate,
    ),
]
