"""The Lambda entry point: policy limits, block events, metrics in embedded metric format."""

import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from gpu_governance_runtime.capacity.handler import Clients, load_windows, process

from .builders import NOW, at, block
from .stubbed_aws import CONTROLLER, TABLE, StubbedAws, capacity_reservation, create_ledger_table

WINDOW = {
    "name": "launch-load-test", "market": "capacity_block", "instance_type": "p5.48xlarge", "instance_count": 4,
    "start": "2026-12-10T14:00:00+00:00", "duration_hours": 6, "repeat_every_days": None, "availability_zones": [],
    "max_price_per_instance_hour": "40", "budget": "1000", "budget_period": "month", "buy_ahead_days": 14,
    "prefer_extension": False, "mode": "dry_run", "fallback": "on_demand",
    "consumer": {"kind": "eks_node_group", "launch_template_name": "gpu-p5", "cluster_name": "ml", "nodegroup_name": "p5"},
}


@pytest.fixture
def env(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"version": 1, "capacity_windows": [WINDOW]}))
    with mock_aws():
        create_ledger_table()
        topic = boto3.client("sns", region_name="us-east-1").create_topic(Name="capacity")["TopicArn"]
        stubbed = StubbedAws()
        eks = boto3.client("eks", region_name="us-east-1")
        eks_stub = Stubber(eks)
        eks_stub.activate()
        clients = Clients(ec2=stubbed.ec2, sagemaker=stubbed.sagemaker, purchase_ec2=stubbed.ec2, purchase_sagemaker=stubbed.sagemaker, dynamodb=boto3.client("dynamodb", region_name="us-east-1"),
                          sns=boto3.client("sns", region_name="us-east-1"), events=boto3.client("events", region_name="us-east-1"),
                          batch=boto3.client("batch", region_name="us-east-1"), eks=eks)
        settings = {"POLICY_FILE": str(policy), "CONTROLLER_ID": CONTROLLER, "LEDGER_TABLE": TABLE, "TOPIC_ARN": topic,
                    "GPU_GOVERNANCE_BUDGET": "1000", "GPU_GOVERNANCE_PRICE_CAP": "40"}
        yield stubbed, clients, settings, eks_stub


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
    result = process({"source": "aws.events", "detail-type": "Scheduled Event"}, clients=clients, settings=settings, now=NOW)
    assert result["run"]["uncovered"] == [["launch-load-test@20261210T1400Z", "budget: cheapest cover costs 2784, 1000 left this month"]]
    records = emf_records(capsys.readouterr().out)
    summary = next(r for r in records if "WindowsUncovered" in r)
    assert summary["WindowsUncovered"] == 1 and summary["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "GpuGovernance/Capacity"
    assert next(r for r in records if "BudgetUsedPercent" in r)["Window"] == "launch-load-test"
    stubbed.done()


def test_delivered_event_rotates_the_node_group_onto_the_block(env, capsys):
    stubbed, clients, settings, eks_stub = env
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.create_launch_template(LaunchTemplateName="gpu-p5", LaunchTemplateData={"InstanceType": "p5.48xlarge"})
    # The launch template calls go to moto; only the capacity calls are stubbed.
    clients = Clients(**{**clients.__dict__, "ec2": _split_ec2(stubbed.ec2, ec2)})
    offer = block("cbo-1", at(10), 1, per_hour="29")
    reservation = capacity_reservation(offer, intent_id="launch-load-test-202612101400-1", window="launch-load-test")
    stubbed.ec2_stub.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation]},
                                  {"CapacityReservationIds": ["cr-0123456789abcdef0"]})
    eks_stub.add_response("update_nodegroup_version", {"update": {"id": "u-1"}},
                          {"clusterName": "ml", "nodegroupName": "p5", "launchTemplate": {"name": "gpu-p5", "version": "2"}})
    stubbed.owned(reservation)  # the controller run that follows sees the window covered
    event = {"source": "aws.ec2", "detail-type": "Capacity Block Delivered", "time": "2026-12-10T11:30:05Z",
             "detail": {"capacity-reservation-id": "cr-0123456789abcdef0", "end-date": "2026-12-11T11:30:00Z"}}
    result = process(event, clients=clients, settings=settings, now=at(10, 11, 31))
    assert result["block_event"] == {"rotated": "cr-0123456789abcdef0", "launch_template_version": 2, "changed": True}
    assert result["run"]["uncovered"] == []
    stubbed.done()
    eks_stub.assert_no_pending_responses()


class _split_ec2:
    """Capacity calls to the stubbed client, launch template calls to moto's."""

    def __init__(self, capacity, templates):
        self._capacity, self._templates = capacity, templates

    def __getattr__(self, name):
        return getattr(self._templates if "launch_template" in name else self._capacity, name)
