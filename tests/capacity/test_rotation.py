"""Rotation and drain: launch templates through moto, Batch and EKS updates through the Stubber
(moto's Batch and EKS do not implement launch template updates of compute environments and node groups)."""

import json
from datetime import datetime, timezone

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from gpu_governance_runtime.capacity.rotation import DRAIN_EVENT_TYPE, drain, rotate

CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5"
BATCH_CONSUMER = {"kind": "batch_compute_environment", "launch_template_name": "gpu-p5", "compute_environment": CE}
EKS_CONSUMER = {"kind": "eks_node_group", "launch_template_name": "gpu-p5", "cluster_name": "ml", "nodegroup_name": "p5"}
ENDS = datetime(2026, 12, 11, 11, 30, tzinfo=timezone.utc)


@pytest.fixture
def aws():
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ec2.create_launch_template(LaunchTemplateName="gpu-p5", LaunchTemplateData={"InstanceType": "p5.48xlarge", "ImageId": "ami-12345678"})
        batch, eks = boto3.client("batch", region_name="us-east-1"), boto3.client("eks", region_name="us-east-1")
        events = boto3.client("events", region_name="us-east-1")
        stubs = Stubber(batch), Stubber(eks)
        for stub in stubs:
            stub.activate()
        yield ec2, batch, eks, events, stubs


def default_data(ec2):
    version = ec2.describe_launch_template_versions(LaunchTemplateName="gpu-p5", Versions=["$Default"])["LaunchTemplateVersions"][0]
    return version["VersionNumber"], version["LaunchTemplateData"]


def expect_batch(stub, version):
    stub.add_response("update_compute_environment", {"computeEnvironmentName": "gpu-p5", "computeEnvironmentArn": CE}, {
        "computeEnvironment": CE, "computeResources": {"launchTemplate": {"launchTemplateName": "gpu-p5", "version": str(version)}},
        "updatePolicy": {"terminateJobsOnUpdate": False, "jobExecutionTimeoutMinutes": 30}})


def test_rotation_points_the_template_and_compute_environment_at_the_block_once(aws):
    ec2, batch, eks, _, (batch_stub, _) = aws
    expect_batch(batch_stub, 2)
    assert rotate(consumer=BATCH_CONSUMER, reservation_id="cr-0123456789abcdef0", ec2=ec2, batch=batch, eks=eks) == (2, True)
    version, data = default_data(ec2)
    assert version == 2
    assert data["InstanceMarketOptions"]["MarketType"] == "capacity-block"
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == "cr-0123456789abcdef0"
    assert data["InstanceType"] == "p5.48xlarge"  # the rest of the template is kept
    # The delivered event arrives twice: nothing changes, no second update.
    assert rotate(consumer=BATCH_CONSUMER, reservation_id="cr-0123456789abcdef0", ec2=ec2, batch=batch, eks=eks) == (2, False)
    batch_stub.assert_no_pending_responses()


def test_drain_falls_back_to_on_demand_and_tells_jobs_to_checkpoint(aws):
    ec2, batch, eks, events, (batch_stub, eks_stub) = aws
    eks_stub.add_response("update_nodegroup_version", {"update": {"id": "u-1"}}, {"clusterName": "ml", "nodegroupName": "p5", "launchTemplate": {"name": "gpu-p5", "version": "2"}})
    eks_stub.add_response("update_nodegroup_version", {"update": {"id": "u-2"}}, {"clusterName": "ml", "nodegroupName": "p5", "launchTemplate": {"name": "gpu-p5", "version": "3"}})
    rotate(consumer=EKS_CONSUMER, reservation_id="cr-0123456789abcdef0", ec2=ec2, batch=batch, eks=eks)
    sent = []
    events.meta.events.register("provide-client-params.eventbridge.PutEvents", lambda params, **_: sent.append(params))
    result = drain(window="launch-load-test", consumer=EKS_CONSUMER, fallback="on_demand", reservation_id="cr-0123456789abcdef0",
                   next_block=None, ends_at=ENDS, ec2=ec2, batch=batch, eks=eks, events=events)
    version, data = default_data(ec2)
    assert (version, result["changed"], result["moved_to"]) == (3, True, "on_demand")
    assert "InstanceMarketOptions" not in data and "CapacityReservationSpecification" not in data
    assert sent[0]["Entries"][0]["DetailType"] == DRAIN_EVENT_TYPE
    assert json.loads(sent[0]["Entries"][0]["Detail"])["ends_at"] == "2026-12-11T11:30:00+00:00"
    # A repeated warning does not touch the template again but still reminds the jobs.
    again = drain(window="launch-load-test", consumer=EKS_CONSUMER, fallback="on_demand", reservation_id="cr-0123456789abcdef0",
                  next_block=None, ends_at=ENDS, ec2=ec2, batch=batch, eks=eks, events=events)
    assert again["changed"] is False and default_data(ec2)[0] == 3 and len(sent) == 2
    eks_stub.assert_no_pending_responses()


def test_drain_moves_to_the_next_block_when_one_follows(aws):
    ec2, batch, eks, events, (batch_stub, _) = aws
    expect_batch(batch_stub, 2)
    expect_batch(batch_stub, 3)
    rotate(consumer=BATCH_CONSUMER, reservation_id="cr-0aaaaaaaaaaaaaaa1", ec2=ec2, batch=batch, eks=eks)
    result = drain(window="w", consumer=BATCH_CONSUMER, fallback="on_demand", reservation_id="cr-0aaaaaaaaaaaaaaa1",
                   next_block="cr-0bbbbbbbbbbbbbbb2", ends_at=ENDS, ec2=ec2, batch=batch, eks=eks, events=events)
    assert result["moved_to"] == "cr-0bbbbbbbbbbbbbbb2"
    assert default_data(ec2)[1]["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == "cr-0bbbbbbbbbbbbbbb2"
    batch_stub.assert_no_pending_responses()


def test_drain_with_fallback_none_leaves_the_template(aws):
    ec2, batch, eks, events, _ = aws
    result = drain(window="w", consumer=BATCH_CONSUMER, fallback="none", reservation_id="cr-0aaaaaaaaaaaaaaa1",
                   next_block=None, ends_at=ENDS, ec2=ec2, batch=batch, eks=eks, events=events)
    assert (result["changed"], result["moved_to"], default_data(ec2)[0]) == (False, None, 1)


# --- real launch templates: the description carries members the create call refuses ---------

from gpu_governance_runtime.capacity.rotation import set_default_version, into_block, on_demand  # noqa: E402
from gpu_governance_runtime.request_shapes import conform  # noqa: E402

from .shape_examples import example, problems  # noqa: E402

HARDENED = {  # a hardened GPU template as DescribeLaunchTemplateVersions returns it
    "ImageId": "ami-0123456789abcdef0", "InstanceType": "p5.48xlarge", "EbsOptimized": True,
    "IamInstanceProfile": {"Arn": "arn:aws:iam::111122223333:instance-profile/gpu-nodes"},
    "MetadataOptions": {"State": "applied", "HttpTokens": "required", "HttpPutResponseHopLimit": 2, "HttpEndpoint": "enabled",
                        "HttpProtocolIpv6": "disabled", "InstanceMetadataTags": "disabled"},
    "NetworkInterfaces": [{"DeviceIndex": 0, "NetworkCardIndex": 0, "InterfaceType": "efa", "SubnetId": "subnet-0123456789abcdef0",
                           "Groups": ["sg-0123456789abcdef0"], "DeleteOnTermination": True,
                           "Ipv6Addresses": [{"Ipv6Address": "2600:1f18::1", "IsPrimaryIpv6": True}], "PrimaryIpv6": True}],
    "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 500, "VolumeType": "gp3", "Iops": 16000,
                                                               "Throughput": 1000, "Encrypted": True, "DeleteOnTermination": True}}],
    "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "team", "Value": "research"}]}],
    "Operator": {"Managed": False, "Principal": "", "HiddenByDefault": False},
}
OUTPUT_ONLY = {("MetadataOptions", "State"), ("Operator", "Managed"), ("Operator", "HiddenByDefault")}


def stubbed_templates(data):
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ec2)
    stub.add_response("describe_launch_template_versions", {"LaunchTemplateVersions": [
        {"LaunchTemplateName": "gpu-p5", "VersionNumber": 4, "DefaultVersion": True, "LaunchTemplateData": data}]},
        {"LaunchTemplateName": "gpu-p5", "Versions": ["$Default"]})
    return ec2, stub


@pytest.mark.parametrize("transform, target", [(into_block("cr-0123456789abcdef0"), "block"), (on_demand, "on_demand")])
def test_a_hardened_template_is_rotated_with_only_what_the_create_call_accepts(transform, target):
    current = {**HARDENED, **({"InstanceMarketOptions": {"MarketType": "capacity-block"}, "CapacityReservationSpecification": {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaaaaaaaaaaaaaa1"}}} if target == "on_demand" else {})}
    ec2, stub = stubbed_templates(current)
    sent = {k: ({m: x for m, x in v.items() if (k, m) not in OUTPUT_ONLY} if isinstance(v, dict) else v) for k, v in HARDENED.items()}
    sent["NetworkInterfaces"] = [{**HARDENED["NetworkInterfaces"][0], "Ipv6Addresses": [{"Ipv6Address": "2600:1f18::1"}]}]
    if target == "block":
        sent.update(InstanceMarketOptions={"MarketType": "capacity-block"},
                    CapacityReservationSpecification={"CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}})
    # The Stubber checks the request against the model: the description sent back unchanged fails.
    stub.add_response("create_launch_template_version", {"LaunchTemplateVersion": {"VersionNumber": 5}},
                      {"LaunchTemplateName": "gpu-p5", "LaunchTemplateData": sent, "VersionDescription": ANY})
    stub.add_response("modify_launch_template", {}, {"LaunchTemplateName": "gpu-p5", "DefaultVersion": "5"})
    with stub:
        assert set_default_version(ec2, "gpu-p5", transform, "gpu-governance: test") == (5, True)
    stub.assert_no_pending_responses()


def test_the_fullest_possible_description_conforms_to_the_create_request():
    model = boto3.client("ec2", region_name="us-east-1").meta.service_model
    described = model.operation_model("DescribeLaunchTemplateVersions").output_shape.members["LaunchTemplateVersions"].member.members["LaunchTemplateData"]
    request = model.operation_model("CreateLaunchTemplateVersion").input_shape.members["LaunchTemplateData"]
    data = example(described)
    assert problems(data, request)  # the raw description is refused ...
    for transform in (into_block("cr-0123456789abcdef0"), on_demand):
        assert problems(transform(conform(data, request)), request) == ""  # ... the conformed one is not
