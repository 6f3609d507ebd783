"""The service-job probes (sm-job.*, events.describe-service-job-rate), offline with botocore's
Stubber: what they make of Batch's and SageMaker's answers, and that every job they submit is
terminated."""

from __future__ import annotations

import json

import pytest
from botocore.stub import ANY

from tests.live import framework
from tests.live.framework import FAIL, INCONCLUSIVE, PASS
from tests.live.probes import service_jobs
from tests.live.probes._batch import team_payload

from .conftest import role
from .test_batch_iam_probes import ARGS, OWN_TAGS, QUEUE, described, submitted, terminated

TRAINING = "arn:aws:sagemaker:us-east-1:111122223333:training-job/AWSBatchresearch-verify-live-{}-1a2b"


def run(context, name, **args):
    (probe,) = [p for p in service_jobs.PROBES if p.name == name]
    return framework.run_one(probe, context(**{**ARGS, **args}))


def _tagged(sagemaker, arn, tags):
    sagemaker.add_response(
        "list_tags", {"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}, {"ResourceArn": arn}
    )


# --- sm-job.service-job-tags-reach-the-training-job ------------------------------------------------


def _two_jobs_with_training_jobs(stubs):
    batch, sagemaker = stubs("batch", role("research")), stubs("sagemaker")
    submitted(batch, "sdk", "research", payload=ANY)
    submitted(batch, "both", "research", tags={**OWN_TAGS, service_jobs.PROBE_TAG: "service-job"})
    described(batch, "sdk", "SCHEDULED", resource=TRAINING.format("sdk-tags"))
    return batch, sagemaker


def _ended(batch):
    terminated(batch, "both", "SCHEDULED")
    terminated(batch, "sdk", "SCHEDULED")


@pytest.mark.parametrize("wins", ["payload", "service-job"])
def test_a_training_job_carrying_the_service_jobs_tags_passes_and_says_which_wins(stubs, context, wins):
    batch, sagemaker = _two_jobs_with_training_jobs(stubs)
    _tagged(sagemaker, TRAINING.format("sdk-tags"), OWN_TAGS)
    described(batch, "both", "SCHEDULED", resource=TRAINING.format("both-tags"))
    _tagged(sagemaker, TRAINING.format("both-tags"), {**OWN_TAGS, service_jobs.PROBE_TAG: wins})
    _ended(batch)
    result = run(context, "service-job-tags-on-training-job")
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()
    assert result.verdict.detail.endswith(f"the training job carries '{wins}'")


def test_the_sdk_payload_carries_no_tags_and_the_other_names_the_probes_key_in_both_places(stubs, context):
    """What is sent: the Stubber compares the payloads exactly."""
    batch = stubs("batch", role("research"))
    sdk = team_payload(context(**ARGS), "research-verify-live-sdk-tags", "research")
    assert "Tags" not in sdk
    submitted(batch, "sdk", "research", payload=json.dumps(sdk))
    both = {
        **team_payload(context(**ARGS), "research-verify-live-both-tags", "research"),
        "Tags": [{"Key": service_jobs.PROBE_TAG, "Value": "payload"}],
    }
    submitted(
        batch, "both", "research", payload=json.dumps(both), tags={**OWN_TAGS, service_jobs.PROBE_TAG: "service-job"}
    )
    for _ in range(3):
        described(batch, "sdk", "RUNNABLE")
    terminated(batch, "both")
    terminated(batch, "sdk")
    verdict = run(context, "service-job-tags-on-training-job").verdict
    assert verdict.outcome == INCONCLUSIVE and "no capacity before the timeout" in verdict.detail


def test_a_training_job_without_the_team_tags_fails_and_says_what_teams_must_do(stubs, context):
    batch, sagemaker = _two_jobs_with_training_jobs(stubs)
    _tagged(sagemaker, TRAINING.format("sdk-tags"), {"sagemaker.amazonaws.com/source": "batch"})
    described(batch, "both", "SCHEDULED", resource=TRAINING.format("both-tags"))
    _tagged(sagemaker, TRAINING.format("both-tags"), {service_jobs.PROBE_TAG: "payload"})
    _ended(batch)
    verdict = run(context, "service-job-tags-on-training-job").verdict
    assert verdict.outcome == FAIL and "Batch does not copy the service job's tags" in verdict.detail
    assert "service_job_request" in verdict.detail


def test_a_job_the_guard_stopped_before_its_training_job_is_inconclusive(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "sdk", "research")
    submitted(batch, "both", "research", tags={**OWN_TAGS, service_jobs.PROBE_TAG: "service-job"})
    described(batch, "sdk", "FAILED", reason="gpu-governance submission guard: tags.gpu-governance:team: missing")
    terminated(batch, "both")
    terminated(batch, "sdk", "FAILED")
    verdict = run(context, "service-job-tags-on-training-job").verdict
    assert verdict.outcome == INCONCLUSIVE and "stopped by the submission guard" in verdict.detail


# --- sm-job.uncounted-without-instance-type ------------------------------------------------------


def _counted(batch, job_id, usage, status="RUNNABLE"):
    batch.add_response(
        "describe_service_job",
        {
            "jobArn": f"arn:aws:batch:us-east-1:111122223333:service-job/{job_id}",
            "jobName": "n",
            "jobId": job_id,
            "jobQueue": QUEUE,
            "status": status,
            "serviceJobType": "SAGEMAKER_TRAINING",
            "createdAt": 1,
            "startedAt": 1,
            "capacityUsage": usage,
        },
        {"jobId": job_id},
    )


def test_a_job_counted_by_its_preferred_type_passes(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "pref", "research")
    _counted(batch, "pref", [{"capacityUnit": "ml.g6e.12xlarge", "quantity": 1}])
    terminated(batch, "pref")
    verdict = run(context, "instance-preferences-counted").verdict
    assert verdict.outcome == PASS and "counted as 1 ml.g6e.12xlarge" in verdict.detail


def test_the_preferences_payload_names_the_type_only_among_its_preferences(stubs, context):
    batch = stubs("batch", role("research"))
    body = team_payload(context(**ARGS), "research-verify-live-preferences", "research")
    body["ResourceConfig"] = {
        "InstancePreferences": [{"InstanceType": "ml.g6e.12xlarge", "InstanceCount": 1}],
        "VolumeSizeInGB": 1,
    }
    submitted(batch, "pref", "research", payload=json.dumps(body))
    _counted(batch, "pref", [{"capacityUnit": "ml.g6e.12xlarge", "quantity": 1}])
    terminated(batch, "pref")
    assert run(context, "instance-preferences-counted").verdict.outcome == PASS


def test_a_job_that_starts_uncounted_fails(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "pref", "research")
    _counted(batch, "pref", [])
    described(batch, "pref", "STARTING")
    terminated(batch, "pref", "STARTING")
    verdict = run(context, "instance-preferences-counted").verdict
    assert verdict.outcome == FAIL and "runs outside the quota share" in verdict.detail


def test_a_payload_batch_refuses_passes_and_one_the_guard_stopped_is_inconclusive(stubs, context):
    batch = stubs("batch", role("research"))
    batch.add_client_error("submit_service_job", "ClientException", "ResourceConfig.InstanceType is required")
    assert run(context, "instance-preferences-counted").verdict.outcome == PASS
    submitted(batch, "pref", "research")
    _counted(batch, "pref", [])
    described(batch, "pref", "FAILED", reason="gpu-governance submission guard: ResourceConfig.InstancePreferences")
    terminated(batch, "pref", "FAILED")
    verdict = run(context, "instance-preferences-counted").verdict
    assert verdict.outcome == INCONCLUSIVE and "counted as []" in verdict.detail


# --- sm-job.duplicate-keys-read-one-way ------------------------------------------------------------


def _duplicate_submitted(batch):
    def sent(text):
        pairs = json.loads(text, object_pairs_hook=list)
        hyper = dict(pairs)["HyperParameters"]
        return hyper == [(service_jobs.DUPLICATE_KEY, "first"), (service_jobs.DUPLICATE_KEY, "last")]

    batch.add_response(
        "submit_service_job",
        {"jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/dup", "jobName": "n", "jobId": "dup"},
        {
            "jobName": "verify-live-duplicate",
            "jobQueue": QUEUE,
            "serviceJobType": "SAGEMAKER_TRAINING",
            "serviceRequestPayload": _Matching(sent),
            "quotaShareName": "research",
            "tags": OWN_TAGS,
            "schedulingPriority": 1,
        },
    )


class _Matching:
    """A request value the Stubber accepts when ``check(value)`` holds."""

    def __init__(self, check):
        self.check = check

    def __eq__(self, other):
        return self.check(other)


def _hyperparameters(sagemaker, value):
    arn = TRAINING.format("duplicate")
    sagemaker.add_response(
        "describe_training_job",
        {
            "TrainingJobName": arn.rsplit("/", 1)[1],
            "TrainingJobArn": arn,
            "ModelArtifacts": {"S3ModelArtifacts": "s3://b/o/model.tar.gz"},
            "TrainingJobStatus": "InProgress",
            "SecondaryStatus": "Starting",
            "StoppingCondition": {"MaxRuntimeInSeconds": 60},
            "CreationTime": 1,
            "HyperParameters": {service_jobs.DUPLICATE_KEY: value},
        },
        {"TrainingJobName": arn.rsplit("/", 1)[1]},
    )


@pytest.mark.parametrize(("read", "outcome"), [("last", PASS), ("first", FAIL), ("other", INCONCLUSIVE)])
def test_which_copy_of_a_key_named_twice_the_training_job_gets(stubs, context, read, outcome):
    batch, sagemaker = stubs("batch", role("research")), stubs("sagemaker")
    _duplicate_submitted(batch)
    described(batch, "dup", "SCHEDULED", resource=TRAINING.format("duplicate"))
    _hyperparameters(sagemaker, read)
    terminated(batch, "dup", "SCHEDULED")
    result = run(context, "duplicate-key-read")
    assert result.verdict.outcome == outcome and result.cleanup_failures == ()


def test_a_payload_with_a_key_named_twice_refused_by_batch_passes_and_a_denial_is_inconclusive(stubs, context):
    batch = stubs("batch", role("research"))
    batch.add_client_error("submit_service_job", "ClientException", "duplicate key")
    assert run(context, "duplicate-key-read").verdict.outcome == PASS
    batch.add_client_error("submit_service_job", "AccessDeniedException", "not authorized")
    assert run(context, "duplicate-key-read").verdict.outcome == INCONCLUSIVE


# --- events.describe-service-job-rate --------------------------------------------------------------


def _read(batch, retries=0):
    batch.add_response(
        "describe_service_job",
        {
            "jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/reads",
            "jobName": "n",
            "jobId": "reads",
            "jobQueue": QUEUE,
            "status": "RUNNABLE",
            "serviceJobType": "SAGEMAKER_TRAINING",
            "createdAt": 1,
            "startedAt": 1,
            "ResponseMetadata": {"RetryAttempts": retries},
        },
        {"jobId": "reads"},
    )


def _rate_context(context, seconds):
    """The probe reads its clock at the start and the end of the reads: they take ``seconds``."""
    made = context(**ARGS)
    readings = iter([0.0, float(seconds)])
    made.clock = lambda: next(readings)
    return made


@pytest.mark.parametrize(
    ("seconds", "throttled_at", "outcome"),
    [(5, None, PASS), (5, 81, PASS), (20, 50, FAIL), (20, None, INCONCLUSIVE)],
    ids=["fast-unthrottled", "throttled-above-the-peak", "throttled-below-the-peak", "too-slow-to-tell"],
)
def test_the_read_rate_is_judged_against_the_guards_peak(stubs, context, seconds, throttled_at, outcome):
    team, batch = stubs("batch", role("research")), stubs("batch")
    submitted(team, "reads", "research")
    reads = service_jobs.READS if throttled_at is None else throttled_at
    for _ in range(reads):
        _read(batch)
    if throttled_at is not None:
        if throttled_at % 2:
            batch.add_client_error("describe_service_job", "TooManyRequestsException", "Rate exceeded")
        else:
            _read(batch, retries=2)
    terminated(team, "reads")
    (probe,) = [p for p in service_jobs.PROBES if p.name == "describe-service-job-rate"]
    result = framework.run_one(probe, _rate_context(context, seconds))
    assert result.verdict.outcome == outcome and result.cleanup_failures == ()
    assert (
        f"{reads if throttled_at is None or throttled_at % 2 else reads + 1} DescribeServiceJob"
        in result.verdict.detail
    )
