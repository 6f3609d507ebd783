"""The owner's HyperPod compute quota holds the bought capacity while the window's training plan
is active, and is lowered back to the declared quota before the plan ends: recorded, idempotent,
put right after a crash or a throttled call by the next run, and a change made by someone else
is not overwritten (Stubber with full response shapes: moto lacks compute quotas)."""

from __future__ import annotations

from datetime import UTC, datetime

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

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
QUOTA_ID = "cq-0123456789ab"
QUOTA_ARN = f"arn:aws:sagemaker:us-east-1:111122223333:compute-quota/{QUOTA_ID}"
TYPE = "ml.p5.48xlarge"
POOL = PoolPolicy(
    name="hyperpod-eks",
    backend="hyperpod_eks",
    capacity={TYPE: 8},
    shares=(
        Share(
            name="research",
            quota={TYPE: 2},
            strategy=SharingStrategy.LEND_AND_BORROW,
            borrow_limit=50,
            in_share_preemption=True,
            fair_share_weight=10,
        ),
    ),
)
GROUP = window(
    name="weekly-validation",
    team="research",
    market="training_plan",
    instance_type=TYPE,
    consumer={
        "kind": "hyperpod_instance_group",
        "pool": "hyperpod-eks",
        "instance_group": "workers",
        "cluster_arn": CLUSTER,
    },
)
PLAN = reservation(
    "arn:aws:sagemaker:us-east-1:111122223333:training-plan/p",
    at(10),
    1,
    state="active",
    count=4,
    window_name=GROUP.name,
)
SHARING = {"Strategy": "LendAndBorrow", "BorrowLimit": 50}
CREATED = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def aws():
    with mock_aws():
        sagemaker = boto3.client("sagemaker", region_name="us-east-1")
        with Stubber(sagemaker) as stub:
            yield sagemaker, stub, create_ledger_table()


def config(count: int) -> dict:
    return {
        "ComputeQuotaResources": [{"InstanceType": TYPE, "Count": count}],
        "ResourceSharingConfig": SHARING,
        "PreemptTeamTasks": "LowerPriority",
    }


def quota_shows(
    stub,
    count: int,
    *,
    version: int = 1,
    update_to: int | None = None,
    error: str | None = None,
    deleted_twin: bool = False,
):
    """ListComputeQuotas (the team's quota, a quota whose name only contains the team's, and
    optionally a deleted one of the same name), DescribeComputeQuota, then the update if any."""
    summary = {
        "ComputeQuotaArn": QUOTA_ARN,
        "ComputeQuotaId": QUOTA_ID,
        "Name": "research",
        "ComputeQuotaVersion": version,
        "Status": "Updated",
        "ClusterArn": CLUSTER,
        "ComputeQuotaConfig": config(count),
        "ActivationState": "Enabled",
        "ComputeQuotaTarget": {"TeamName": "research", "FairShareWeight": 10},
        "CreationTime": CREATED,
        "LastModifiedTime": CREATED,
    }
    others = [
        {
            **summary,
            "ComputeQuotaId": "cq-other",
            "ComputeQuotaArn": QUOTA_ARN + "x",
            "Name": "research-interns",
            "ComputeQuotaTarget": {"TeamName": "research-interns"},
        }
    ]
    if deleted_twin:
        others.append({**summary, "ComputeQuotaId": "cq-deleted", "Status": "Deleted"})
    stub.add_response(
        "list_compute_quotas",
        {"ComputeQuotaSummaries": others + [summary]},
        {"ClusterArn": CLUSTER, "NameContains": "research"},
    )
    stub.add_response(
        "describe_compute_quota",
        {
            "ComputeQuotaArn": QUOTA_ARN,
            "ComputeQuotaId": QUOTA_ID,
            "Name": "research",
            "ComputeQuotaVersion": version,
            "Status": "Updated",
            "ClusterArn": CLUSTER,
            "ComputeQuotaConfig": config(count),
            "ComputeQuotaTarget": {"TeamName": "research", "FairShareWeight": 10},
            "ActivationState": "Enabled",
            "CreationTime": CREATED,
            "CreatedBy": {"UserProfileName": "cloudformation"},
            "LastModifiedTime": CREATED,
        },
        {"ComputeQuotaId": QUOTA_ID},
    )
    expected = (
        {"ComputeQuotaId": QUOTA_ID, "TargetVersion": version, "ComputeQuotaConfig": config(update_to)}
        if update_to is not None
        else None
    )
    if error:
        stub.add_client_error(
            "update_compute_quota", service_error_code=error, http_status_code=400, expected_params=expected
        )
    elif update_to is not None:
        stub.add_response(
            "update_compute_quota", {"ComputeQuotaArn": QUOTA_ARN, "ComputeQuotaVersion": version + 1}, expected
        )


def run(sagemaker, ledger, now):
    desired = shares.desired_limits(
        windows={GROUP.name: GROUP}, owned=[PLAN], pools={POOL.name: POOL}, now=now, kind=shares.INSTANCE_GROUP
    )
    return shares.apply_compute_quotas(desired=desired, sagemaker=sagemaker, ledger=ledger, now=now)


def statuses(ledger):
    return [status for _, status, _ in ledger.actions("compute-quota#", shares.STATUSES)]


def test_raised_while_the_plan_is_active_and_lowered_before_it_ends(aws):
    sagemaker, stub, ledger = aws
    quota_shows(
        stub, 2, update_to=6, deleted_twin=True
    )  # declared 2, plus the plan's 4; sharing and preemption sent back as read
    (raised,) = run(sagemaker, ledger, at(10, 12, 0))
    assert raised == {
        "compute_quota": f"{CLUSTER}/research",
        "limits": [{"InstanceType": TYPE, "Count": 6}],
        "changed": True,
    }
    quota_shows(stub, 6, version=2)  # a repeated run or event: read, nothing written
    assert run(sagemaker, ledger, at(10, 12, 15))[0]["changed"] is False
    quota_shows(stub, 6, version=2, update_to=2)  # the expiration warning's time: back to the declared quota
    assert run(sagemaker, ledger, PLAN.end - shares.LOWER_LEAD)[0]["changed"] is True
    stub.assert_no_pending_responses()
    assert statuses(ledger) == ["done", "done"]
    assert [d["to"] for _, _, d in ledger.actions("compute-quota#", ("done",))] == [
        [{"InstanceType": TYPE, "Count": c}] for c in (6, 2)
    ]


def test_nothing_is_written_when_the_quota_is_already_right(aws):
    sagemaker, stub, ledger = aws
    quota_shows(stub, 2)  # before the plan starts: the declared quota, already there
    assert run(sagemaker, ledger, at(10) - shares.LOWER_LEAD) == [
        {"compute_quota": f"{CLUSTER}/research", "limits": [{"InstanceType": TYPE, "Count": 2}], "changed": False}
    ]
    stub.assert_no_pending_responses()
    assert statuses(ledger) == []


def test_a_crash_between_the_update_and_its_record_is_put_right_by_the_next_run(aws):
    sagemaker, stub, ledger = aws
    quota_shows(stub, 2, update_to=6)
    real_record = ledger.record_action

    def crash_after_the_call(action, *, status, details, now):
        if status == "done":
            raise RuntimeError("Lambda timed out")
        real_record(action, status=status, details=details, now=now)

    ledger.record_action = crash_after_the_call
    with pytest.raises(RuntimeError):
        run(sagemaker, ledger, at(10, 12, 0))
    ledger.record_action = real_record
    assert statuses(ledger) == ["calling"]
    quota_shows(stub, 6, version=2)  # the update went through: the next run sees it done and writes nothing
    assert run(sagemaker, ledger, at(10, 12, 15))[0]["changed"] is False
    quota_shows(stub, 6, version=2, update_to=2)  # and the value it left is the controller's own: lowered at the end
    assert run(sagemaker, ledger, PLAN.end - shares.LOWER_LEAD)[0]["changed"] is True
    stub.assert_no_pending_responses()


def test_a_throttled_call_is_retried_by_the_next_run(aws):
    sagemaker, stub, ledger = aws
    quota_shows(stub, 2, error="ThrottlingException", update_to=6)
    (failed,) = run(sagemaker, ledger, at(10, 12, 0))
    assert failed["error"].startswith("ThrottlingException")
    assert statuses(ledger) == ["failed"]
    quota_shows(stub, 2, update_to=6)
    assert run(sagemaker, ledger, at(10, 12, 15))[0]["changed"] is True
    stub.assert_no_pending_responses()
    assert statuses(ledger) == ["failed", "done"]  # in time order


def test_a_change_made_since_the_read_is_refused_by_version_and_read_again(aws):
    sagemaker, stub, ledger = aws
    quota_shows(stub, 2, error="ConflictException", update_to=6)  # an admin updated it between our read and our write
    assert run(sagemaker, ledger, at(10, 12, 0))[0]["error"].startswith("ConflictException")
    stub.assert_no_pending_responses()


def test_a_platform_admins_change_is_not_overwritten(aws):
    sagemaker, stub, ledger = aws
    quota_shows(stub, 2, update_to=6)
    run(sagemaker, ledger, at(10, 12, 0))
    quota_shows(stub, 3, version=3)  # an admin set 3 during the plan: neither the declared 2 nor the controller's 6
    (left,) = run(sagemaker, ledger, PLAN.end - shares.LOWER_LEAD)
    assert left["changed"] is False and "changed outside the capacity controller" in left["error"]
    quota_shows(stub, 2, version=4, update_to=6)  # back to the declared quota: the controller acts again
    assert run(sagemaker, ledger, at(10, 13, 0))[0]["changed"] is True
    stub.assert_no_pending_responses()
    assert statuses(ledger) == ["done", "done"]


def test_a_missing_quota_or_a_team_without_one_is_reported_not_created(aws):
    sagemaker, stub, ledger = aws
    stub.add_response(
        "list_compute_quotas", {"ComputeQuotaSummaries": []}, {"ClusterArn": CLUSTER, "NameContains": "research"}
    )
    assert run(sagemaker, ledger, at(10, 12, 0))[0]["error"] == f"cluster {CLUSTER} has no compute quota research"
    stub.assert_no_pending_responses()
    other = window(name="x", team="training", market="training_plan", instance_type=TYPE, consumer=GROUP.consumer)
    assert (
        shares.desired_limits(
            windows={"x": other}, owned=[], pools={POOL.name: POOL}, now=at(10), kind=shares.INSTANCE_GROUP
        )
        == {}
    )
