"""The probe of a DISABLED quota share, offline with botocore's Stubber: its verdicts, and that the
share is put back whatever happens."""

from __future__ import annotations

from tests.live import framework
from tests.live.framework import FAIL, INCONCLUSIVE, PASS
from tests.live.probes import quota_shares

from .conftest import role
from .test_batch_iam_probes import ARGS, described, submitted, terminated

QUEUE_ARN = "arn:aws:batch:us-east-1:111122223333:job-queue/sagemaker-training"
SHARE = f"{QUEUE_ARN}/quota-share/research"


def run(context, probe, **args):
    (found,) = [p for p in quota_shares.PROBES if p.name == probe]
    return framework.run_one(found, context(**{**ARGS, **args}))


def _share(admin, state="ENABLED"):
    admin.add_response(
        "describe_job_queues",
        {
            "jobQueues": [
                {
                    "jobQueueName": "sagemaker-training",
                    "jobQueueArn": QUEUE_ARN,
                    "state": "ENABLED",
                    "priority": 1,
                    "computeEnvironmentOrder": [],
                }
            ]
        },
        {"jobQueues": ["sagemaker-training"]},
    )
    admin.add_response(
        "describe_quota_share",
        {
            "quotaShareName": "research",
            "quotaShareArn": SHARE,
            "jobQueueArn": QUEUE_ARN,
            "capacityLimits": [{"capacityUnit": "ml.g6e.12xlarge", "maxCapacity": 2}],
            "resourceSharingConfiguration": {"strategy": "RESERVE"},
            "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
            "state": state,
            "status": "VALID",
        },
        {"quotaShareArn": SHARE},
    )


def _state(admin, state):
    admin.add_response(
        "update_quota_share",
        {"quotaShareName": "research", "quotaShareArn": SHARE},
        {"quotaShareArn": SHARE, "state": state},
    )


def _queued_then_disabled(stubs):
    """Batch's answers up to the share being DISABLED with a job of the team's queued in it."""
    admin, team = stubs("batch"), stubs("batch", role("research"))
    _share(admin)
    submitted(team, "queued", "research")
    _state(admin, "DISABLED")
    described(admin, "queued", "RUNNABLE")
    return admin, team


def test_a_queued_job_that_starts_in_the_disabled_share_passes_and_the_share_is_enabled_again(stubs, context):
    admin, team = _queued_then_disabled(stubs)
    team.add_client_error("submit_service_job", "ClientException", "the quota share is DISABLED")
    described(team, "queued", "STARTING")
    terminated(team, "queued", "STARTING")
    _state(admin, "ENABLED")  # the undo step, after the job is stopped
    result = run(context, "disabled-share-queued-job")
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()


def test_a_queued_job_held_until_the_timeout_fails_the_row(stubs, context):
    admin, team = _queued_then_disabled(stubs)
    team.add_client_error("submit_service_job", "ClientException", "the quota share is DISABLED")
    for _ in range(3):
        described(team, "queued", "RUNNABLE")
    terminated(team, "queued")
    _state(admin, "ENABLED")
    verdict = run(context, "disabled-share-queued-job").verdict
    assert verdict.outcome == FAIL and "Batch held it" in verdict.detail


def test_a_new_job_accepted_by_the_disabled_share_fails_the_row(stubs, context):
    admin, team = _queued_then_disabled(stubs)
    submitted(team, "late", "research")
    described(team, "queued", "STARTING")
    terminated(team, "late")
    terminated(team, "queued", "STARTING")
    _state(admin, "ENABLED")
    verdict = run(context, "disabled-share-queued-job").verdict
    assert verdict.outcome == FAIL and "accepted a new job" in verdict.detail


def test_the_share_is_enabled_again_when_disabling_it_failed_midway(stubs, context):
    """A lost answer may still have changed the share: the undo step runs anyway."""
    admin, team = stubs("batch"), stubs("batch", role("research"))
    _share(admin)
    submitted(team, "queued", "research")
    admin.add_client_error("update_quota_share", "ServerException", "timed out", http_status_code=500)
    terminated(team, "queued")
    _state(admin, "ENABLED")
    result = run(context, "disabled-share-queued-job")
    assert result.verdict.outcome == INCONCLUSIVE and result.cleanup_failures == ()


def test_a_share_not_enabled_is_left_alone(stubs, context):
    admin = stubs("batch")
    _share(admin, state="DISABLED")
    verdict = run(context, "disabled-share-queued-job").verdict
    assert verdict.outcome == INCONCLUSIVE and "was DISABLED before the probe" in verdict.detail
