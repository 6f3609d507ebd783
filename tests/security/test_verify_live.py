"""make verify-live decides from real answers; here botocore's Stubber plays Batch (and checks
every request against the real service model), so the verdict logic is tested offline."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import ANY, Stubber

from tests.live.verify_live import (
    AS_ASSUMED,
    DIFFERS,
    ENFORCED,
    HOLE,
    INCONCLUSIVE,
    check_pass_role,
    check_payload_refused,
    check_quota_share,
    payload,
)

QUEUE = "sagemaker-training"
BODY = payload(
    "training-verify-live-b",
    "arn:aws:iam::111122223333:role/gpu-governance/training-gpu-training",
    "img",
    "ml.g6e.12xlarge",
    "s3://b/o/",
)


@pytest.fixture
def batch():
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def _submitted(stubber, job_id, share):
    stubber.add_response(
        "submit_service_job",
        {"jobArn": f"arn:aws:batch:us-east-1:111122223333:service-job/{job_id}", "jobName": "n", "jobId": job_id},
        {
            "jobName": ANY,
            "jobQueue": QUEUE,
            "serviceJobType": "SAGEMAKER_TRAINING",
            "serviceRequestPayload": ANY,
            "quotaShareName": share,
            "tags": {"gpu-governance:team": "research"},
        },
    )


def _terminated(stubber, job_id):
    stubber.add_response("terminate_service_job", {}, {"jobId": job_id, "reason": ANY})


def _quota(client):
    return check_quota_share(client, queue=QUEUE, team_a="research", team_b="training", body=lambda name: BODY)


def test_share_refused_is_enforced(batch):
    client, stubber = batch
    _submitted(stubber, "own", "research")
    _terminated(stubber, "own")
    stubber.add_client_error(
        "submit_service_job", "AccessDeniedException", "not authorized to perform batch:SubmitServiceJob"
    )
    assert _quota(client).verdict == ENFORCED


def test_share_accepted_is_a_hole_and_the_job_is_stopped(batch):
    client, stubber = batch
    _submitted(stubber, "own", "research")
    _terminated(stubber, "own")
    _submitted(stubber, "intruder", "training")
    _terminated(stubber, "intruder")
    assert _quota(client).verdict == HOLE


def test_own_share_refused_proves_nothing(batch):
    client, stubber = batch
    stubber.add_client_error("submit_service_job", "AccessDeniedException", "denied")
    assert _quota(client).verdict == INCONCLUSIVE


def _describe(stubber, job_id, status, reason="", resource=None):
    response = {
        "jobArn": f"arn:aws:batch:us-east-1:111122223333:service-job/{job_id}",
        "jobName": "n",
        "jobId": job_id,
        "jobQueue": QUEUE,
        "status": status,
        "statusReason": reason,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": BODY,
        "createdAt": 1,
        "startedAt": 1,
    }
    if resource:
        response["latestAttempt"] = {"serviceResourceId": {"name": "TrainingJobArn", "value": resource}}
    stubber.add_response("describe_service_job", response, {"jobId": job_id})


def _pass_role(client):
    return check_pass_role(
        client, queue=QUEUE, team_a="research", team_b="training", body=BODY, timeout_s=60, sleep=lambda s: None
    )


def test_job_running_as_the_other_teams_role_is_a_hole(batch):
    client, stubber = batch
    _submitted(stubber, "probe", "research")
    _describe(stubber, "probe", "RUNNABLE")
    _describe(
        stubber,
        "probe",
        "STARTING",
        resource="arn:aws:sagemaker:us-east-1:111122223333:training-job/AWSBatchtraining-verify-live-b-1a2b",
    )
    _terminated(stubber, "probe")
    role, naming = _pass_role(client)
    assert (role.verdict, naming.verdict) == (HOLE, AS_ASSUMED)


def test_failed_for_pass_role_is_enforced_and_other_names_are_reported(batch):
    client, stubber = batch
    _submitted(stubber, "probe", "research")
    _describe(
        stubber,
        "probe",
        "FAILED",
        reason="User is not authorized to perform iam:PassRole",
        resource="arn:aws:sagemaker:us-east-1:111122223333:training-job/AWSBatch-4711",
    )
    role, naming = _pass_role(client)
    assert (role.verdict, naming.verdict) == (ENFORCED, DIFFERS)


def test_refused_at_submission_is_enforced(batch):
    client, stubber = batch
    stubber.add_client_error("submit_service_job", "AccessDeniedException", "not authorized to perform iam:PassRole")
    role, naming = _pass_role(client)
    assert (role.verdict, naming.verdict) == (ENFORCED, INCONCLUSIVE)
    assert json.loads(BODY)["RoleArn"].endswith("/training-gpu-training")


def _payload_check(client):
    return check_payload_refused(
        client, check="plan", queue=QUEUE, team="research", body=BODY, timeout_s=60, sleep=lambda s: None
    )


def test_a_payload_batch_starts_is_one_only_the_guard_stops(batch):
    client, stubber = batch
    _submitted(stubber, "probe", "research")
    _describe(stubber, "probe", "RUNNABLE")
    _describe(stubber, "probe", "STARTING")
    _terminated(stubber, "probe")
    outcome = _payload_check(client)
    assert outcome.verdict == HOLE and "only the submission guard stops it" in outcome.detail


def test_a_payload_refused_at_submission_or_failed_before_starting_is_enforced(batch):
    client, stubber = batch
    stubber.add_client_error("submit_service_job", "ClientException", "TrainingPlanArn belongs to another principal")
    assert _payload_check(client).verdict == ENFORCED
    _submitted(stubber, "probe", "research")
    _describe(
        stubber,
        "probe",
        "FAILED",
        reason="Received status from SageMaker: the training plan is not available to this job",
    )
    outcome = _payload_check(client)
    assert outcome.verdict == ENFORCED and "training plan is not available" in outcome.detail


def test_a_payload_still_waiting_at_the_timeout_is_inconclusive_and_stopped(batch):
    client, stubber = batch
    _submitted(stubber, "probe", "research")
    _describe(stubber, "probe", "RUNNABLE")
    _terminated(stubber, "probe")
    ticks = iter([0, 0, 120])
    outcome = check_payload_refused(
        client,
        check="image",
        queue=QUEUE,
        team="research",
        body=BODY,
        timeout_s=60,
        sleep=lambda s: None,
        clock=lambda: next(ticks),
    )
    assert outcome.verdict == INCONCLUSIVE
