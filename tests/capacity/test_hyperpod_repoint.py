"""Re-pointing a HyperPod instance group at a training plan: SageMaker through the Stubber (moto
has no UpdateCluster; the Stubber checks every request and response against the botocore model),
the ledger in moto's DynamoDB."""

from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from gpu_governance_runtime.capacity.aws import PURCHASE_CLIENT_CONFIG
from gpu_governance_runtime.capacity.hyperpod import MissingInstanceGroup, repoint
from gpu_governance_runtime.hyperpod_cluster import specification

from .builders import at, reservation
from .stubbed_aws import create_ledger_table

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
PLAN = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/weekly-validation-202612070900-1"
NEXT_PLAN = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/weekly-validation-202612140900-1"
NOW = at(7, 9, 5)
WORKERS = {
    "InstanceGroupName": "workers",
    "InstanceType": "ml.p5.48xlarge",
    "CurrentCount": 2,
    "TargetCount": 2,
    "ExecutionRole": "arn:aws:iam::111122223333:role/hyperpod-nodes",
    "ThreadsPerCore": 1,
    "Status": "InService",
    "LifeCycleConfig": {"SourceS3Uri": "s3://acme-lifecycle/", "OnCreate": "on_create.sh"},
    "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
    "CurrentImageId": "ami-0aaaaaaaaaaaaaaa1",
    "DesiredImageId": "ami-0bbbbbbbbbbbbbbb2",
    "KubernetesConfig": {"CurrentLabels": {"team": "old"}, "DesiredLabels": {"team": "research"}},
}
CONTROLLER = {
    **WORKERS,
    "InstanceGroupName": "controller",
    "InstanceType": "ml.m5.xlarge",
    "CurrentCount": 1,
    "TargetCount": 1,
}
# What UpdateCluster must receive for the workers: the same group, desired values, no status fields.
WORKERS_SPEC = {
    "InstanceGroupName": "workers",
    "InstanceType": "ml.p5.48xlarge",
    "InstanceCount": 2,
    "ExecutionRole": "arn:aws:iam::111122223333:role/hyperpod-nodes",
    "ThreadsPerCore": 1,
    "LifeCycleConfig": {"SourceS3Uri": "s3://acme-lifecycle/", "OnCreate": "on_create.sh"},
    "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
    "ImageId": "ami-0bbbbbbbbbbbbbbb2",
    "KubernetesConfig": {"Labels": {"team": "research"}},
}


def plan(arn, start, *, state="active", days=1):
    return reservation(arn, start, days, state=state, count=2, window_name="weekly-validation")


@pytest.fixture
def aws():
    with mock_aws():
        ledger = create_ledger_table()
        sagemaker = boto3.client("sagemaker", region_name="us-east-1", config=PURCHASE_CLIENT_CONFIG)
        with Stubber(sagemaker) as stub:
            yield sagemaker, stub, ledger
            stub.assert_no_pending_responses()


def described(stub, *groups):
    stub.add_response(
        "describe_cluster",
        {"ClusterArn": CLUSTER, "ClusterStatus": "InService", "InstanceGroups": list(groups)},
        {"ClusterName": CLUSTER},
    )


def run(sagemaker, ledger, plans, *, now=NOW, fallback="on_demand", dry_run=False):
    return repoint(
        window="weekly-validation",
        cluster_arn=CLUSTER,
        instance_group="workers",
        plans=plans,
        fallback=fallback,
        dry_run=dry_run,
        sagemaker=sagemaker,
        ledger=ledger,
        now=now,
    )


def repoints(ledger):
    return ledger.actions("repoint#", ("done", "failed"))


def test_specification_maps_the_description_onto_the_request_shape():
    shape = boto3.client("sagemaker", region_name="us-east-1").meta.service_model.shape_for(
        "ClusterInstanceGroupSpecification"
    )
    assert specification(WORKERS, shape) == WORKERS_SPEC


def test_an_active_plan_is_set_on_the_declared_group_only_and_recorded(aws):
    sagemaker, stub, ledger = aws
    described(stub, CONTROLLER, WORKERS)
    stub.add_response(
        "update_cluster",
        {"ClusterArn": CLUSTER},
        {"ClusterName": CLUSTER, "InstanceGroups": [{**WORKERS_SPEC, "TrainingPlanArn": PLAN}]},
    )
    result = run(sagemaker, ledger, [plan(PLAN, at(7, 9, 0))])
    assert (result["changed"], result["from"], result["to"]) == (True, None, PLAN)
    [(action_id, status, details)] = repoints(ledger)
    assert status == "done" and details["to"] == PLAN and action_id.startswith(f"repoint#{CLUSTER}/workers@")


def test_already_pointed_and_a_duplicate_event_make_no_call(aws):
    sagemaker, stub, ledger = aws
    for _ in range(2):  # the Stubber refuses any UpdateCluster, which is not queued
        described(stub, {**WORKERS, "TrainingPlanArn": PLAN, "TrainingPlanStatus": "Active"})
        assert run(sagemaker, ledger, [plan(PLAN, at(7, 9, 0))])["changed"] is False
    assert repoints(ledger) == []


def test_throttling_changes_nothing_and_the_next_run_retries(aws):
    sagemaker, stub, ledger = aws
    described(stub, WORKERS)
    stub.add_client_error("update_cluster", service_error_code="ThrottlingException", http_status_code=400)
    first = run(sagemaker, ledger, [plan(PLAN, at(7, 9, 0))])
    assert (first["changed"], first["error"], first["retry"]) == (False, "ThrottlingException", "next run")
    described(stub, WORKERS)
    stub.add_response(
        "update_cluster",
        {"ClusterArn": CLUSTER},
        {"ClusterName": CLUSTER, "InstanceGroups": [{**WORKERS_SPEC, "TrainingPlanArn": PLAN}]},
    )
    assert run(sagemaker, ledger, [plan(PLAN, at(7, 9, 0))], now=NOW + timedelta(minutes=15))["changed"] is True
    assert sorted(status for _, status, _ in repoints(ledger)) == ["done", "failed"]


def test_back_on_demand_when_the_plan_ends_and_on_to_the_next_plan(aws):
    sagemaker, stub, ledger = aws
    ended = [plan(PLAN, at(7, 9, 0), state="expired"), plan(NEXT_PLAN, at(14, 9, 0), state="scheduled")]
    described(stub, {**WORKERS, "TrainingPlanArn": PLAN, "TrainingPlanStatus": "Expired"})
    stub.add_response(
        "update_cluster", {"ClusterArn": CLUSTER}, {"ClusterName": CLUSTER, "InstanceGroups": [WORKERS_SPEC]}
    )
    assert run(sagemaker, ledger, ended, now=at(8, 9, 5))["to"] is None
    active = [plan(PLAN, at(7, 9, 0), state="expired"), plan(NEXT_PLAN, at(14, 9, 0))]
    described(stub, WORKERS)
    stub.add_response(
        "update_cluster",
        {"ClusterArn": CLUSTER},
        {"ClusterName": CLUSTER, "InstanceGroups": [{**WORKERS_SPEC, "TrainingPlanArn": NEXT_PLAN}]},
    )
    assert run(sagemaker, ledger, active, now=at(14, 9, 5))["to"] == NEXT_PLAN


def test_fallback_none_and_plans_set_by_hand_are_left_alone(aws):
    sagemaker, stub, ledger = aws
    described(stub, {**WORKERS, "TrainingPlanArn": PLAN})
    assert (
        run(sagemaker, ledger, [plan(PLAN, at(7, 9, 0), state="expired")], now=at(8, 9, 5), fallback="none")["changed"]
        is False
    )
    by_hand = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/someone-elses"
    described(stub, {**WORKERS, "TrainingPlanArn": by_hand})
    assert run(sagemaker, ledger, [], now=at(8, 9, 5))["to"] == by_hand


def test_dry_run_reports_without_calling(aws):
    sagemaker, stub, ledger = aws
    described(stub, WORKERS)
    result = run(sagemaker, ledger, [plan(PLAN, at(7, 9, 0))], dry_run=True)
    assert (result["changed"], result["dry_run"], result["to"]) == (False, True, PLAN)
    assert repoints(ledger) == []


def test_a_cluster_without_the_declared_group_is_a_clear_error(aws):
    sagemaker, stub, ledger = aws
    described(stub, CONTROLLER)
    with pytest.raises(
        MissingInstanceGroup, match=r"cluster/abcd1234efgh has no instance group 'workers'; it has \['controller'\]"
    ):
        run(sagemaker, ledger, [plan(PLAN, at(7, 9, 0))])
