"""The owner's Batch quota share holds the bought capacity while its plan is active, and is
lowered back before the plan ends: recorded, idempotent, and put right after a crash or a failed
call by the next run (Stubber: moto lacks quota shares)."""

from __future__ import annotations

from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from gpu_governance_runtime.capacity import shares
from gpu_governance_runtime.contract import SharingStrategy
from gpu_governance_runtime.planners.reclaim import Share
from gpu_governance_runtime.policy import PoolPolicy

from .builders import at, reservation, window
from .stubbed_aws import create_ledger_table

ARN = "arn:aws:batch:us-east-1:111122223333:job-queue/sagemaker-training/quota-share/research"
POOL = PoolPolicy(
    name="sagemaker-training",
    backend="batch_quota_share",
    capacity={"ml.p5.48xlarge": 8},
    shares=(
        Share(
            name="research",
            quota={"ml.p5.48xlarge": 2},
            strategy=SharingStrategy.LEND,
            borrow_limit=None,
            in_share_preemption=False,
            fair_share_weight=10,
        ),
    ),
)
JOBS = window(
    name="finetune-eval",
    team="research",
    market="training_plan",
    instance_type="ml.p5.48xlarge",
    consumer={"kind": "sagemaker_training_jobs", "pool": "sagemaker-training"},
)
PLAN = reservation(
    "arn:aws:sagemaker:us-east-1:111122223333:training-plan/p",
    at(10),
    1,
    state="active",
    count=4,
    window_name=JOBS.name,
)


@pytest.fixture
def aws():
    with mock_aws():
        batch = boto3.client("batch", region_name="us-east-1")
        with Stubber(batch) as stub:
            yield batch, stub, create_ledger_table()


def share_shows(stub, count, update_to=None, error=None):
    stub.add_response(
        "list_quota_shares",
        {
            "quotaShares": [
                {
                    "quotaShareName": "research",
                    "quotaShareArn": ARN,
                    "jobQueueArn": "arn:aws:batch:us-east-1:111122223333:job-queue/sagemaker-training",
                }
            ]
        },
        {"jobQueue": "sagemaker-training"},
    )
    stub.add_response(
        "describe_quota_share",
        {"quotaShareArn": ARN, "capacityLimits": [{"capacityUnit": "ml.p5.48xlarge", "maxCapacity": count}]},
        {"quotaShareArn": ARN},
    )
    if error:
        stub.add_client_error("update_quota_share", service_error_code=error, http_status_code=400)
    elif update_to is not None:
        stub.add_response(
            "update_quota_share",
            {},
            {"quotaShareArn": ARN, "capacityLimits": [{"capacityUnit": "ml.p5.48xlarge", "maxCapacity": update_to}]},
        )


def run(batch, ledger, now):
    desired = shares.desired_limits(windows={JOBS.name: JOBS}, owned=[PLAN], pools={POOL.name: POOL}, now=now)
    return shares.apply(desired=desired, batch=batch, ledger=ledger, now=now)


def test_raised_while_the_plan_is_active_and_lowered_before_it_ends(aws):
    batch, stub, ledger = aws
    share_shows(stub, 2, update_to=6)
    assert run(batch, ledger, at(10, 12, 0)) == [
        {
            "share": "sagemaker-training/research",
            "limits": [{"capacityUnit": "ml.p5.48xlarge", "maxCapacity": 6}],
            "changed": True,
        }
    ]
    share_shows(stub, 6)  # a repeated run or event changes nothing
    assert run(batch, ledger, at(10, 12, 15))[0]["changed"] is False
    share_shows(stub, 6, update_to=2)  # the expiration warning's time: back to the declared quota
    assert run(batch, ledger, PLAN.end - shares.LOWER_LEAD)[0]["changed"] is True
    stub.assert_no_pending_responses()
    assert [status for _, status, _ in ledger.actions("share#", ("calling", "done", "failed"))] == ["done", "done"]


def test_a_failed_or_unrecorded_call_is_put_right_by_the_next_run(aws):
    batch, stub, ledger = aws
    share_shows(stub, 2, error="ThrottlingException")
    (failed,) = run(batch, ledger, at(10, 12, 0))
    assert failed["error"].startswith("ThrottlingException")
    assert [status for _, status, _ in ledger.actions("share#", ("calling", "done", "failed"))] == ["failed"]
    share_shows(stub, 2, update_to=6)  # also what a run finds after a crash between call and record
    assert run(batch, ledger, at(10, 12, 15))[0]["changed"] is True
    stub.assert_no_pending_responses()


def test_a_team_without_a_share_in_the_pool_is_left_alone():
    other = window(
        name="x",
        team="training",
        market="training_plan",
        instance_type="ml.p5.48xlarge",
        consumer={"kind": "sagemaker_training_jobs", "pool": "sagemaker-training"},
    )
    assert shares.desired_limits(windows={"x": other}, owned=[], pools={POOL.name: POOL}, now=at(10)) == {}
    assert shares.desired_limits(
        windows={JOBS.name: JOBS}, owned=[PLAN], pools={POOL.name: POOL}, now=at(10) - timedelta(hours=1)
    ) == {("sagemaker-training", "research"): ({"ml.p5.48xlarge": 2}, {"ml.p5.48xlarge": 2})}


ENVIRONMENT_ARN = "arn:aws:batch:us-east-1:111122223333:service-environment/sagemaker-training"


def environment_shows(stub, count, update_to=None):
    stub.add_response(
        "describe_service_environments",
        {
            "serviceEnvironments": [
                {
                    "serviceEnvironmentName": "sagemaker-training",
                    "serviceEnvironmentArn": ENVIRONMENT_ARN,
                    "serviceEnvironmentType": "SAGEMAKER_TRAINING",
                    "state": "ENABLED",
                    "status": "VALID",
                    "capacityLimits": [{"capacityUnit": "ml.p5.48xlarge", "maxCapacity": count}],
                    "tags": {},
                }
            ]
        },
        {"serviceEnvironments": ["sagemaker-training"]},
    )
    if update_to is not None:
        stub.add_response(
            "update_service_environment",
            {"serviceEnvironmentName": "sagemaker-training", "serviceEnvironmentArn": ENVIRONMENT_ARN},
            {
                "serviceEnvironment": "sagemaker-training",
                "capacityLimits": [{"capacityUnit": "ml.p5.48xlarge", "maxCapacity": update_to}],
            },
        )


def run_pool(batch, ledger, now):
    desired = shares.desired_limits(windows={JOBS.name: JOBS}, owned=[PLAN], pools={POOL.name: POOL}, now=now)
    return shares.apply_batch(desired=desired, pools={POOL.name: POOL}, batch=batch, ledger=ledger, now=now)


def test_the_service_environment_holds_the_raise_before_the_share_and_after_it(aws):
    # Pool capacity 8 with a guarantee of 2 raised by the plan's 4: the environment goes to 12
    # first, so the raised guarantees still fit; at the end the share goes back first, then the
    # environment. Stubber checks the order of the calls.
    batch, stub, ledger = aws
    environment_shows(stub, 8, update_to=12)
    share_shows(stub, 2, update_to=6)
    assert [r.get("changed") for r in run_pool(batch, ledger, at(10, 12, 0))] == [True, True]
    share_shows(stub, 6, update_to=2)
    environment_shows(stub, 12, update_to=8)
    assert [next(iter(r)) for r in run_pool(batch, ledger, PLAN.end - shares.LOWER_LEAD)] == [
        "share",
        "service_environment",
    ]
    share_shows(stub, 2)  # after the end: nothing to change
    environment_shows(stub, 8)
    shares.apply_batch(
        desired=shares.desired_limits(windows={JOBS.name: JOBS}, owned=[PLAN], pools={POOL.name: POOL}, now=PLAN.end),
        pools={POOL.name: POOL},
        batch=batch,
        ledger=ledger,
        now=PLAN.end,
    )
    stub.assert_no_pending_responses()
    assert [a.split("@")[0] for a, status, _ in ledger.actions("environment#", ("done",))] == [
        "environment#sagemaker-training"
    ] * 2


def test_a_share_changed_by_someone_else_is_left_alone(aws):
    batch, stub, ledger = aws
    share_shows(stub, 3)  # neither the declared 2 nor a value the controller wrote
    (left,) = run(batch, ledger, at(10, 12, 0))
    assert "changed outside the capacity controller" in left["error"]
    stub.assert_no_pending_responses()
