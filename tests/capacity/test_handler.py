"""The Lambda entry point: policy limits, block events, metrics in embedded metric format."""

import json
from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from gpu_governance_runtime.capacity.handler import Clients, load_windows, process

from . import stubbed_batch as batch_side
from .builders import NOW, at, block
from .stubbed_aws import (
    CONTROLLER,
    TABLE,
    StubbedAws,
    capacity_reservation,
    create_ledger_table,
    training_plan_summary,
)

WINDOW = {
    "name": "launch-load-test",
    "team": "research",
    "cost_centre": None,
    "market": "capacity_block",
    "instance_type": "p5.48xlarge",
    "instance_count": 4,
    "start": "2026-12-10T14:00:00+00:00",
    "duration_hours": 6,
    "repeat_every_days": None,
    "availability_zones": [],
    "max_price_per_instance_hour": "40",
    "budget": "1000",
    "budget_period": "month",
    "buy_ahead_days": 14,
    "prefer_extension": False,
    "mode": "dry_run",
    "min_yield": "0",
    "fallback": "on_demand",
    "alarm_requests": [],
    "consumer": {
        "kind": "eks_node_group",
        "launch_template_name": "gpu-p5",
        "cluster_name": "ml",
        "nodegroup_name": "p5",
    },
}


@pytest.fixture
def env(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps(
            {"version": 1, "organisation": "acme-ml", "priority_classes": [], "pools": [], "capacity_windows": [WINDOW]}
        )
    )
    with mock_aws():
        create_ledger_table()
        topic = boto3.client("sns", region_name="us-east-1").create_topic(Name="capacity")["TopicArn"]
        stubbed = StubbedAws()
        eks = boto3.client("eks", region_name="us-east-1")
        eks_stub = Stubber(eks)
        eks_stub.activate()
        stubbed.node_group_stub = eks_stub  # the window feeds node group ml/p5
        clients = Clients(
            ec2=stubbed.ec2,
            sagemaker=stubbed.sagemaker,
            purchase_ec2=stubbed.ec2,
            purchase_sagemaker=stubbed.sagemaker,
            dynamodb=boto3.client("dynamodb", region_name="us-east-1"),
            sns=boto3.client("sns", region_name="us-east-1"),
            events=boto3.client("events", region_name="us-east-1"),
            batch=boto3.client("batch", region_name="us-east-1"),
            eks=eks,
            ecs=boto3.client("ecs", region_name="us-east-1"),
            ssm=boto3.client("ssm", region_name="us-east-1"),
            submit_batch=boto3.client("batch", region_name="us-east-1"),
        )
        settings = {
            "POLICY_PATH": str(policy),
            "CONTROLLER_ID": CONTROLLER,
            "LEDGER_TABLE": TABLE,
            "TOPIC_ARN": topic,
            "GPU_GOVERNANCE_BUDGET": "1000",
            "GPU_GOVERNANCE_PRICE_CAP": "40",
            "TICK_SECONDS": "900",
        }
        yield stubbed, clients, settings, eks_stub


def read_utilisation(stubbed, *plans):
    """The reads a scheduled run ends with (tests/chargeback/test_purchased_capacity.py checks them):
    no active block, and ``plans`` (DescribeTrainingPlan answers) in order."""
    stubbed.ec2_stub.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": []},
        {
            "Filters": [
                {"Name": "tag:gpu-governance:managed-by", "Values": [CONTROLLER]},
                {"Name": "state", "Values": ["active"]},
            ]
        },
    )
    for plan in plans:
        stubbed.sm_stub.add_response("describe_training_plan", plan, {"TrainingPlanName": plan["TrainingPlanArn"]})


def emf_records(output: str):
    return [json.loads(line) for line in output.splitlines() if line.startswith('{"_aws"')]


def test_policy_above_the_functions_own_limits_is_refused(env):
    _, _, settings, _ = env
    with pytest.raises(ValueError, match="exceed the function's limits 1000 / 39"):
        load_windows({**settings, "GPU_GOVERNANCE_PRICE_CAP": "39"})


def test_scheduled_run_reports_uncovered_windows_as_metrics(env, capsys):
    stubbed, clients, settings, _ = env
    stubbed.owned()
    stubbed.offerings(block("cbo-1", at(10), 1, per_hour="29"))  # 2784 > the 1000 budget
    read_utilisation(stubbed)
    result = process(
        {"source": "aws.events", "detail-type": "Scheduled Event"}, clients=clients, settings=settings, now=NOW
    )
    assert result["run"]["uncovered"] == [
        ["launch-load-test@20261210T1400Z", "budget: cheapest cover costs 2784, 1000 left this month"]
    ]
    records = emf_records(capsys.readouterr().out)
    summary = next(r for r in records if "WindowsUncovered" in r)
    assert (
        summary["WindowsUncovered"] == 1
        and summary["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "GpuGovernance/Capacity"
    )
    assert next(r for r in records if "BudgetUsedPercent" in r)["Window"] == "launch-load-test"
    stubbed.done()


def node_group_reads(eks_stub, version=1, desired=0):
    """DescribeNodegroup of the window's CAPACITY_BLOCK node group (rotation.reconcile reads it every run)."""
    eks_stub.add_response(
        "describe_nodegroup",
        {
            "nodegroup": {
                "nodegroupName": "p5",
                "clusterName": "ml",
                "capacityType": "CAPACITY_BLOCK",
                "status": "ACTIVE",
                "scalingConfig": {"minSize": 0, "maxSize": 8, "desiredSize": desired},
                "launchTemplate": {"name": "gpu-p5", "version": str(version), "id": "lt-1"},
            }
        },
        {"clusterName": "ml", "nodegroupName": "p5"},
    )


def test_delivered_event_is_a_run_whose_reconciliation_would_move_the_node_group_in_dry_run(env, capsys):
    stubbed, clients, settings, eks_stub = env
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.create_launch_template(LaunchTemplateName="gpu-p5", LaunchTemplateData={"InstanceType": "p5.48xlarge"})
    # The launch template calls go to moto; only the capacity calls are stubbed.
    clients = Clients(**{**clients.__dict__, "ec2": _split_ec2(stubbed.ec2, ec2)})
    offer = block("cbo-1", at(10), 1, per_hour="29")
    reservation = capacity_reservation(offer, intent_id="launch-load-test-202612101400-1", window="launch-load-test")
    stubbed.ec2_stub.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [reservation]},
        {"CapacityReservationIds": ["cr-0123456789abcdef0"]},
    )
    stubbed.owned(reservation)  # the controller run that follows sees the window covered
    node_group_reads(eks_stub)
    event = {
        "source": "aws.ec2",
        "detail-type": "Capacity Block Delivered",
        "time": "2026-12-10T11:30:05Z",
        "detail": {"capacity-reservation-id": "cr-0123456789abcdef0", "end-date": "2026-12-11T11:30:00Z"},
    }
    result = process(event, clients=clients, settings=settings, now=at(10, 11, 31))
    assert result["block_event"] == {
        "event": "Capacity Block Delivered",
        "block": "cr-0123456789abcdef0",
        "rotation": "reconciled by this run",
    }
    # The window is in dry run (issue 23, outcome 8): the run says what it would do and changes nothing.
    (rotated,) = result["rotation"]
    assert rotated["dry_run"] is True and rotated["would"].startswith(
        "make a launch template version into Capacity Block cr-0123456789abcdef0"
    )
    assert [
        v["VersionNumber"]
        for v in ec2.describe_launch_template_versions(LaunchTemplateName="gpu-p5")["LaunchTemplateVersions"]
    ] == [1]
    assert result["run"]["uncovered"] == []
    stubbed.done()
    eks_stub.assert_no_pending_responses()


class _split_ec2:
    """Capacity calls to the stubbed client, launch template calls to moto's."""

    def __init__(self, capacity, templates):
        self._capacity, self._templates = capacity, templates

    def __getattr__(self, name):
        return getattr(self._templates if "launch_template" in name else self._capacity, name)


HYPERPOD_WINDOW = {
    **WINDOW,
    "name": "weekly-validation",
    "market": "training_plan",
    "instance_type": "ml.p5.48xlarge",
    "instance_count": 2,
    "start": "2026-12-07T09:00:00+00:00",
    "duration_hours": 8,
    "mode": "auto",
    "consumer": {
        "kind": "hyperpod_instance_group",
        "pool": "hyperpod-eks",
        "instance_group": "workers",
        "cluster_arn": "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh",
    },
}


@pytest.mark.parametrize("groups, outcome", [(["workers"], "pointed"), (["controller"], "missing")])
def test_scheduled_run_points_the_hyperpod_group_at_the_active_plan(env, tmp_path, capsys, groups, outcome):
    stubbed, clients, settings, _ = env
    policy = tmp_path / "hyperpod.json"
    policy.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme-ml",
                "priority_classes": [],
                "pools": [],
                "capacity_windows": [HYPERPOD_WINDOW],
            }
        )
    )
    cluster = HYPERPOD_WINDOW["consumer"]["cluster_arn"]
    plan = block("tpo-1", at(7, 9, 0), 1, per_hour="29", count=2, instance_type="ml.p5.48xlarge")
    summary = training_plan_summary(plan, "weekly-validation-202612070900-1", status="Active")
    stubbed.owned()
    stubbed.sm_stub.add_response("list_training_plans", {"TrainingPlanSummaries": [summary]}, {})
    stubbed.sm_stub.add_response(
        "describe_cluster",
        {
            "ClusterArn": cluster,
            "ClusterStatus": "InService",
            "InstanceGroups": [
                {
                    "InstanceGroupName": name,
                    "InstanceType": "ml.p5.48xlarge",
                    "TargetCount": 2,
                    "ExecutionRole": "arn:aws:iam::111122223333:role/nodes",
                }
                for name in groups
            ],
        },
        {"ClusterName": cluster},
    )
    if outcome == "pointed":
        stubbed.sm_stub.add_response(
            "update_cluster",
            {"ClusterArn": cluster},
            {
                "ClusterName": cluster,
                "InstanceGroups": [
                    {
                        "InstanceGroupName": "workers",
                        "InstanceType": "ml.p5.48xlarge",
                        "InstanceCount": 2,
                        "ExecutionRole": "arn:aws:iam::111122223333:role/nodes",
                        "TrainingPlanArn": summary["TrainingPlanArn"],
                    }
                ],
            },
        )
    read_utilisation(stubbed, summary)
    result = process(
        {"source": "aws.events", "detail-type": "Scheduled Event"},
        clients=clients,
        settings={**settings, "POLICY_PATH": str(policy)},
        now=at(7, 9, 5),
    )
    [repointed] = result["hyperpod"]
    errors = next(r for r in emf_records(capsys.readouterr().out) if "ConsumerErrors" in r)["ConsumerErrors"]
    if outcome == "pointed":
        assert (repointed["changed"], repointed["to"], errors) == (True, summary["TrainingPlanArn"], 0)
    else:
        assert "has no instance group 'workers'; it has ['controller']" in repointed["error"] and errors == 1
    stubbed.done()


def test_expiration_warning_requeues_the_batch_jobs_on_the_block(env, tmp_path):
    stubbed, clients, settings, _ = env
    window = {
        **WINDOW,
        "mode": "auto",
        "consumer": {
            "kind": "batch_compute_environment",
            "launch_template_name": "gpu-p5",
            "compute_environment": batch_side.CE + "-on-demand",
            "block_compute_environment": batch_side.CE,
            "job_queue": batch_side.QUEUE,
        },
    }
    policy = tmp_path / "batch.json"
    policy.write_text(
        json.dumps(
            {"version": 1, "organisation": "acme-ml", "priority_classes": [], "pools": [], "capacity_windows": [window]}
        )
    )
    templates = boto3.client("ec2", region_name="us-east-1")
    templates.create_launch_template(LaunchTemplateName="gpu-p5", LaunchTemplateData={"InstanceType": "p5.48xlarge"})
    batch, ecs = boto3.client("batch", region_name="us-east-1"), boto3.client("ecs", region_name="us-east-1")
    stubs = {"ec2": stubbed.ec2_stub, "batch": Stubber(batch), "ecs": Stubber(ecs)}
    stubs["batch"].activate()
    stubs["ecs"].activate()
    clients = Clients(
        **{
            **clients.__dict__,
            "ec2": _split_ec2(stubbed.ec2, templates),
            "batch": batch,
            "ecs": ecs,
            "submit_batch": batch,
        }
    )
    reservation = capacity_reservation(
        block("cbo-1", at(10), 1, per_hour="29"),
        intent_id="launch-load-test-202612101400-1",
        window="launch-load-test",
        state="active",
    )
    stubbed.ec2_stub.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [reservation]},
        {"CapacityReservationIds": [batch_side.BLOCK]},
    )
    batch_side.discovery(
        stubs
    )  # at the warning the jobs are recorded, not stopped: they checkpoint until requeue.STOP_LEAD
    stubbed.owned(reservation)  # the controller run after the event
    stubs["batch"].add_response(
        "describe_compute_environments",
        {
            "computeEnvironments": [
                {  # the reconciliation: already behind on demand
                    "computeEnvironmentName": "gpu-p5",
                    "computeEnvironmentArn": batch_side.CE,
                    "state": "DISABLED",
                    "status": "VALID",
                    "computeResources": {
                        "type": "EC2",
                        "maxvCpus": 0,
                        "subnets": ["subnet-1"],
                        "launchTemplate": {"launchTemplateName": "gpu-p5", "version": "1"},
                    },
                }
            ]
        },
        {"computeEnvironments": [batch_side.CE]},
    )
    stubs["batch"].add_response(
        "describe_job_queues",
        {
            "jobQueues": [
                {
                    "jobQueueName": "gpu",
                    "jobQueueArn": batch_side.QUEUE,
                    "state": "ENABLED",
                    "priority": 1,
                    "computeEnvironmentOrder": [
                        {"order": 1, "computeEnvironment": batch_side.CE + "-on-demand"},
                        {"order": 2, "computeEnvironment": batch_side.CE},
                    ],
                }
            ]
        },
        {"jobQueues": [batch_side.QUEUE]},
    )
    event = {
        "source": "aws.ec2",
        "detail-type": "Capacity Block Reservation Expiration Warning",
        "time": "2026-12-11T10:50:00Z",
        "detail": {"capacity-reservation-id": batch_side.BLOCK, "end-date": "2026-12-11T11:30:00Z"},
    }
    result = process(event, clients=clients, settings={**settings, "POLICY_PATH": str(policy)}, now=batch_side.NOW)
    assert (result["block_event"]["requeue"]["requeued"], result["block_event"]["requeue"]["waiting"]) == (
        [],
        ["job-on-block"],
    )
    for stub in stubs.values():
        stub.assert_no_pending_responses()


def test_a_scheduled_run_before_the_warning_tells_the_jobs_and_records_them_to_stop_with_two_runs_left(env, tmp_path):
    """Not only the expiration warning drains a block a Batch compute environment runs on: the first
    run from requeue.SIGNAL_LEAD before its end does, so the jobs checkpoint before STOP_LEAD and two
    scheduled runs (every 5 minutes) can stop them before the instances go."""
    from gpu_governance_runtime.capacity.requeue import STOP_LEAD

    stubbed, clients, settings, _ = env
    window = {
        **WINDOW,
        "mode": "auto",
        "consumer": {
            "kind": "batch_compute_environment",
            "launch_template_name": "gpu-p5",
            "compute_environment": batch_side.CE + "-on-demand",
            "block_compute_environment": batch_side.CE,
            "job_queue": batch_side.QUEUE,
        },
    }
    policy = tmp_path / "batch.json"
    policy.write_text(
        json.dumps(
            {"version": 1, "organisation": "acme-ml", "priority_classes": [], "pools": [], "capacity_windows": [window]}
        )
    )
    templates = boto3.client("ec2", region_name="us-east-1")
    templates.create_launch_template(
        LaunchTemplateName="gpu-p5",
        LaunchTemplateData={  # the block compute environment launches into the block
            "InstanceType": "p5.48xlarge",
            "InstanceMarketOptions": {"MarketType": "capacity-block"},
            "CapacityReservationSpecification": {
                "CapacityReservationTarget": {"CapacityReservationId": batch_side.BLOCK}
            },
        },
    )
    batch, ecs = boto3.client("batch", region_name="us-east-1"), boto3.client("ecs", region_name="us-east-1")
    stubs = {"ec2": stubbed.ec2_stub, "batch": Stubber(batch), "ecs": Stubber(ecs)}
    stubs["batch"].activate()
    stubs["ecs"].activate()
    clients = Clients(
        **{
            **clients.__dict__,
            "ec2": _split_ec2(stubbed.ec2, templates),
            "batch": batch,
            "ecs": ecs,
            "submit_batch": batch,
        }
    )
    reservation = capacity_reservation(
        block("cbo-1", at(10), 1, per_hour="29"),
        intent_id="launch-load-test-202612101400-1",
        window="launch-load-test",
        state="active",
    )
    stubbed.owned(reservation)
    stubs["batch"].add_response(
        "describe_compute_environments",
        {
            "computeEnvironments": [
                {  # the reconciliation: 48 minutes before the
                    "computeEnvironmentName": "gpu-p5",
                    "computeEnvironmentArn": batch_side.CE,
                    "state": "ENABLED",
                    "status": "VALID",  # end, before
                    "computeResources": {
                        "type": "EC2",
                        "maxvCpus": 192,
                        "subnets": ["subnet-1"],  # rotation.DRAIN_LEAD: still on the block, first
                        "launchTemplate": {"launchTemplateName": "gpu-p5", "version": "1"},
                    },
                }
            ]
        },
        {"computeEnvironments": [batch_side.CE]},
    )
    stubs["batch"].add_response(
        "describe_job_queues",
        {
            "jobQueues": [
                {
                    "jobQueueName": "gpu",
                    "jobQueueArn": batch_side.QUEUE,
                    "state": "ENABLED",
                    "priority": 1,
                    "computeEnvironmentOrder": [
                        {"order": 1, "computeEnvironment": batch_side.CE},
                        {"order": 2, "computeEnvironment": batch_side.CE + "-on-demand"},
                    ],
                }
            ]
        },
        {"jobQueues": [batch_side.QUEUE]},
    )
    stubbed.ec2_stub.add_response(
        "describe_instance_types",
        {"InstanceTypes": [{"InstanceType": "p5.48xlarge", "VCpuInfo": {"DefaultVCpus": 192}}]},
        {"InstanceTypes": ["p5.48xlarge"]},
    )
    batch_side.discovery(stubs)
    read_utilisation(stubbed)
    now = batch_side.ENDS - timedelta(minutes=48)
    result = process(
        {"source": "aws.events", "detail-type": "Scheduled Event"},
        clients=clients,
        settings={**settings, "POLICY_PATH": str(policy)},
        now=now,
    )
    (drained,) = result["draining_blocks"]
    assert (drained["capacity_reservation_id"], drained["signalled_at"], drained["requeue"]["waiting"]) == (
        batch_side.BLOCK,
        now.isoformat(),
        ["job-on-block"],
    )
    [(_, _, details)] = ledger_actions(settings, "requeue#")
    assert details["stop_at"] == (batch_side.ENDS - STOP_LEAD).isoformat()
    for stub in stubs.values():
        stub.assert_no_pending_responses()


def ledger_actions(settings, prefix):
    from gpu_governance_runtime.capacity.ledger import Ledger

    return Ledger(
        client=boto3.client("dynamodb", region_name="us-east-1"), table_name=settings["LEDGER_TABLE"]
    ).actions(prefix, ("claimed",))


def test_without_time_left_the_instance_group_is_left_for_the_next_run(env, tmp_path, capsys):
    stubbed, clients, settings, _ = env
    policy = tmp_path / "hyperpod.json"
    policy.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme-ml",
                "priority_classes": [],
                "pools": [],
                "capacity_windows": [HYPERPOD_WINDOW],
            }
        )
    )
    plan = block("tpo-1", at(7, 9, 0), 1, per_hour="29", count=2, instance_type="ml.p5.48xlarge")
    stubbed.owned()
    stubbed.sm_stub.add_response(
        "list_training_plans",
        {"TrainingPlanSummaries": [training_plan_summary(plan, "weekly-validation-202612070900-1", status="Active")]},
        {},
    )
    # No DescribeCluster / UpdateCluster queued: the Stubber fails the test if either is called.
    read_utilisation(stubbed, training_plan_summary(plan, "weekly-validation-202612070900-1", status="Active"))
    result = process(
        {"source": "aws.events", "detail-type": "Scheduled Event"},
        clients=clients,
        settings={**settings, "POLICY_PATH": str(policy)},
        now=at(7, 9, 5),
        time_left=lambda: 10,
    )
    assert result["hyperpod"] == [
        {"window": "weekly-validation", "deferred": "too little of the invocation left; the next run does it"}
    ]
    stubbed.done()


def test_a_failed_step_is_logged_as_an_error_and_counted(env, capsys):
    stubbed, clients, settings, _ = env
    stubbed.owned()
    stubbed.node_group_subnets()
    stubbed.ec2_stub.add_client_error(
        "describe_capacity_block_offerings", service_error_code="Unavailable", http_status_code=503
    )
    read_utilisation(stubbed)
    result = process(
        {"source": "aws.events", "detail-type": "Scheduled Event"}, clients=clients, settings=settings, now=NOW
    )
    assert result["run"]["errors"][0][0] == "window launch-load-test"
    out = capsys.readouterr().out
    assert next(r for r in emf_records(out) if "RunErrors" in r)["RunErrors"] == 1
    assert any('"level": "ERROR"' in line and "window launch-load-test" in line for line in out.splitlines())
    stubbed.done()


def _delivered(reservation_id="cr-0123456789abcdef0"):
    return {
        "source": "aws.ec2",
        "detail-type": "Capacity Block Delivered",
        "time": "2026-12-10T11:30:05Z",
        "detail": {"capacity-reservation-id": reservation_id, "end-date": "2026-12-11T11:30:00Z"},
    }


def test_a_delivered_event_arriving_after_the_expiration_warning_moves_nothing_onto_the_block(env):
    stubbed, clients, settings, _ = env
    offer = block("cbo-1", at(10), 1, per_hour="29")
    reservation = capacity_reservation(
        offer, intent_id="launch-load-test-202612101400-1", window="launch-load-test", state="active"
    )
    stubbed.ec2_stub.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [reservation]},
        {"CapacityReservationIds": ["cr-0123456789abcdef0"]},
    )
    stubbed.owned(reservation)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.create_launch_template(LaunchTemplateName="gpu-p5", LaunchTemplateData={"InstanceType": "p5.48xlarge"})
    clients = Clients(**{**clients.__dict__, "ec2": _split_ec2(stubbed.ec2, ec2)})
    node_group_reads(env[3])
    # Out of order: the block ends at 11:30 and its warning (10:50) has come: the phase wants on demand, where it is.
    result = process(_delivered(), clients=clients, settings=settings, now=at(11, 10, 55))
    assert result["rotation"][0]["wants"] == "on demand" and result["rotation"][0]["state"] == "in place"
    stubbed.done()


def test_a_delivered_block_ec2_does_not_list_yet_is_found_in_the_ledger_and_rotated(env):
    from gpu_governance_runtime.capacity.ledger import Ledger
    from gpu_governance_runtime.planners.capacity import Window, plan

    stubbed, clients, settings, eks_stub = env
    ledger = Ledger(client=clients.dynamodb, table_name=TABLE)
    window = Window.from_policy(WINDOW)
    offer = block("cbo-1", at(10), 1, per_hour="10")  # 960, within the window's 1000 budget
    [purchase] = plan(windows=[window], reservations=[], offerings=[offer], spent={}, now=NOW).purchases
    intent = ledger.claim(purchase, window, status="purchasing", now=NOW)
    ledger.settle(intent, status="purchased", now=NOW, reservation_id="cr-0123456789abcdef0")
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.create_launch_template(LaunchTemplateName="gpu-p5", LaunchTemplateData={"InstanceType": "p5.48xlarge"})
    clients = Clients(**{**clients.__dict__, "ec2": _split_ec2(stubbed.ec2, ec2)})
    stubbed.ec2_stub.add_client_error(
        "describe_capacity_reservations",
        service_error_code="InvalidCapacityReservationId.NotFound",
        expected_params={"CapacityReservationIds": ["cr-0123456789abcdef0"]},
    )
    node_group_reads(eks_stub)
    stubbed.owned()  # still not listed: the purchased intent holds the window, nothing is bought or looked up
    result = process(_delivered(), clients=clients, settings=settings, now=at(10, 11, 31))
    assert result["rotation"][0]["wants"] == "Capacity Block cr-0123456789abcdef0"  # known from the ledger
    assert result["run"]["planned"] == [] and result["run"]["uncovered"] == []
    stubbed.done()
    eks_stub.assert_no_pending_responses()


@pytest.mark.parametrize("head_nodes", [None, {"research-slurm": "i-0123456789abcdef0"}])
def test_a_slurm_window_reaches_its_head_node_or_the_missing_one_is_counted(env, tmp_path, capsys, head_nodes):
    stubbed, clients, settings, _ = env
    window = {
        **HYPERPOD_WINDOW,
        "consumer": {**HYPERPOD_WINDOW["consumer"], "pool": "research-slurm", "instance_group": "research-window"},
    }
    pool = {"name": "research-slurm", "backend": "hyperpod_slurm", "capacity": {"ml.p5.48xlarge": 2}, "shares": []}
    policy = tmp_path / "slurm.json"
    policy.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme-ml",
                "priority_classes": [],
                "pools": [pool],
                "capacity_windows": [window],
            }
        )
    )
    cluster = window["consumer"]["cluster_arn"]
    summary = training_plan_summary(
        block("tpo-1", at(7, 9, 0), 1, per_hour="29", count=2, instance_type="ml.p5.48xlarge"),
        "weekly-validation-202612070900-1",
        status="Active",
    )
    stubbed.owned()
    stubbed.sm_stub.add_response("list_training_plans", {"TrainingPlanSummaries": [summary]}, {})
    stubbed.sm_stub.add_response(
        "describe_cluster",
        {
            "ClusterArn": cluster,
            "ClusterStatus": "InService",
            "InstanceGroups": [
                {
                    "InstanceGroupName": "research-window",
                    "InstanceType": "ml.p5.48xlarge",
                    "TargetCount": 2,
                    "TrainingPlanArn": summary["TrainingPlanArn"],
                    "ExecutionRole": "arn:aws:iam::111122223333:role/nodes",
                }
            ],
        },
        {"ClusterName": cluster},
    )
    if head_nodes:  # the plan's instances are not up yet: nothing to read on the head node
        stubbed.sm_stub.add_response(
            "list_cluster_nodes",
            {"ClusterNodeSummaries": []},
            {"ClusterName": cluster, "InstanceGroupNameContains": "research-window"},
        )
    read_utilisation(stubbed, summary)
    result = process(
        {"source": "aws.events", "detail-type": "Scheduled Event"},
        clients=clients,
        now=at(7, 9, 5),
        settings={
            **settings,
            "POLICY_PATH": str(policy),
            **({"SLURM_HEAD_NODES": json.dumps(head_nodes)} if head_nodes else {}),
        },
    )
    [nodes] = result["slurm_nodes"]
    errors = next(r for r in emf_records(capsys.readouterr().out) if "ConsumerErrors" in r)["ConsumerErrors"]
    if head_nodes:
        assert (nodes["phase"], nodes["nodes"], errors) == ("serve", [], 0)
    else:
        assert "no head node for Slurm pool research-slurm" in nodes["error"] and errors == 1
    stubbed.done()


def test_the_function_sends_a_requeued_jobs_copy_and_a_purchase_in_one_request_each(monkeypatch):
    """As deployed (AWS_LAMBDA_FUNCTION_NAME set), the clients that submit a copy and buy capacity never resend a
    request that AWS answered with a 503: SubmitJob or a purchase resent after it may have been carried out would
    run the job twice or buy twice. The reading clients do retry."""
    from botocore.awsrequest import AWSResponse
    from botocore.exceptions import ClientError

    from gpu_governance_runtime.capacity import handler
    from tests.aws_model.sdk import no_backoff

    for name, value in {
        "AWS_LAMBDA_FUNCTION_NAME": "capacity-controller",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    built = handler._clients()
    sent = []

    class Empty:  # a response body without content
        def stream(self, **_):
            yield b""

    def unavailable(request, **_):
        sent.append(request.url)
        return AWSResponse(request.url, 503, {}, Empty())

    def attempts(client, call) -> int:
        sent.clear()
        client.meta.events.register("before-send", unavailable)
        with no_backoff(), pytest.raises(ClientError):
            call(client)
        return len(sent)

    assert attempts(built.submit_batch, lambda c: c.submit_job(jobName="j", jobQueue="q", jobDefinition="d")) == 1
    assert (
        attempts(
            built.purchase_ec2,
            lambda c: c.purchase_capacity_block(
                CapacityBlockOfferingId="cbo-1111111111111111", InstancePlatform="Linux/UNIX"
            ),
        )
        == 1
    )
    assert attempts(built.batch, lambda c: c.describe_jobs(jobs=["j"])) > 1
