"""Rotation as a reconciliation (issue 24, outcomes 2, 3 and 5; issue 23, outcome 8's dry run):
every run reads what the consumer actually launches from (the node group's capacity type, version
and size) and moves it one step toward its phase; Batch compute environments are in
tests/capacity/test_batch_block_queue.py. Launch templates and the ledger through moto, Batch and EKS through the Stubber (moto
implements neither's launch template updates)."""

from datetime import timedelta

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from gpu_governance_runtime.capacity.rotation import reconcile

from .builders import at, reservation, window
from .stubbed_aws import create_ledger_table

CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5"
BATCH_CONSUMER = {
    "kind": "batch_compute_environment",
    "launch_template_name": "gpu-p5",
    "compute_environment": CE,
    "block_compute_environment": CE + "-block",
    "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
}
EKS_CONSUMER = {
    "kind": "eks_node_group",
    "launch_template_name": "gpu-p5",
    "cluster_name": "ml",
    "nodegroup_name": "p5",
}
BLOCK = reservation("cr-0123456789abcdef0", at(10), 1, state="active")  # 10 Dec 11:30 to 11 Dec 11:30
ACTIVE, DRAINING = at(10, 12, 0), at(11, 10, 50)  # the expiration warning (40 minutes before the end): draining


@pytest.fixture
def aws():
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ec2.create_launch_template(
            LaunchTemplateName="gpu-p5", LaunchTemplateData={"InstanceType": "p5.48xlarge", "ImageId": "ami-12345678"}
        )
        batch, eks = boto3.client("batch", region_name="us-east-1"), boto3.client("eks", region_name="us-east-1")
        stubs = Stubber(batch), Stubber(eks)
        for stub in stubs:
            stub.activate()
        yield ec2, batch, eks, create_ledger_table(), stubs


def target(ec2, version):
    data = ec2.describe_launch_template_versions(LaunchTemplateName="gpu-p5", Versions=[str(version)])[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    return data.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget", {}).get(
        "CapacityReservationId"
    ), data["InstanceType"]


def run(aws, consumer, now, mode="auto", owned=(BLOCK,)):
    ec2, batch, eks, ledger, _ = aws
    return reconcile(
        window=window(consumer=consumer, mode=mode),
        owned=owned,
        dry_run=mode == "dry_run",
        ec2=ec2,
        batch=batch,
        eks=eks,
        ledger=ledger,
        now=now,
    )


def test_a_consumer_the_window_never_had_a_block_for_is_not_read(aws):
    assert run(aws, BATCH_CONSUMER, ACTIVE, owned=())["state"] == "no block of the window yet"


def node_group(stub, capacity_type="CAPACITY_BLOCK", version=1, desired=0, status="ACTIVE"):
    stub.add_response(
        "describe_nodegroup",
        {
            "nodegroup": {
                "nodegroupName": "p5",
                "clusterName": "ml",
                "capacityType": capacity_type,
                "status": status,
                "scalingConfig": {"minSize": 0, "maxSize": 8, "desiredSize": desired},
                "launchTemplate": {"name": "gpu-p5", "version": str(version), "id": "lt-1"},
            }
        },
        {"clusterName": "ml", "nodegroupName": "p5"},
    )


def expect_version_move(eks_stub, version=1):
    """The group at size 0 on ``version``, then moved to the next, the one into the block."""
    node_group(eks_stub, version=version, desired=0)
    eks_stub.add_response(
        "update_nodegroup_version",
        {"update": {"id": "u-1"}},
        {"clusterName": "ml", "nodegroupName": "p5", "launchTemplate": {"name": "gpu-p5", "version": str(version + 1)}},
    )


def test_an_on_demand_node_group_is_reported_not_re_templated(aws):
    _, _, _, _, (_, eks_stub) = aws
    node_group(eks_stub, capacity_type="ON_DEMAND")
    result = run(aws, EKS_CONSUMER, ACTIVE)
    assert result["error"].startswith(
        "node group p5 has capacityType ON_DEMAND; a Capacity Block needs a node group created with CAPACITY_BLOCK"
    )
    eks_stub.assert_no_pending_responses()  # no update queued: none made


def test_a_capacity_block_node_group_is_moved_at_size_0_scaled_up_then_scaled_to_0_before_the_end(aws):
    ec2, _, _, _, (_, eks_stub) = aws
    expect_version_move(eks_stub)
    assert run(aws, EKS_CONSUMER, ACTIVE)["did"].startswith(
        "make a launch template version into Capacity Block cr-0123456789abcdef0"
    )
    assert target(ec2, 2)[0] == "cr-0123456789abcdef0"
    node_group(eks_stub, version=2, desired=0)
    eks_stub.add_response(
        "update_nodegroup_config",
        {"update": {"id": "u-2"}},
        {"clusterName": "ml", "nodegroupName": "p5", "scalingConfig": {"desiredSize": 4}},
    )
    assert run(aws, EKS_CONSUMER, ACTIVE + timedelta(minutes=15))["did"] == "scale to 4"
    node_group(eks_stub, version=2, desired=4)
    assert run(aws, EKS_CONSUMER, ACTIVE + timedelta(minutes=30))["state"] == "in place"
    # From the expiration warning: scaled to zero (EKS drains the nodes), 40 minutes before the block ends.
    node_group(eks_stub, version=2, desired=4)
    eks_stub.add_response(
        "update_nodegroup_config",
        {"update": {"id": "u-3"}},
        {"clusterName": "ml", "nodegroupName": "p5", "scalingConfig": {"desiredSize": 0, "minSize": 0}},
    )
    assert run(aws, EKS_CONSUMER, DRAINING)["did"] == "scale to 0 (EKS drains each node first)"
    # After the block, whatever the window's fallback: the group stays at 0 on the ended block's template. A
    # CAPACITY_BLOCK node group's template must carry the capacity-block options [aws:
    # eks.capacity-block-template-required]; before issue 37 this run made an on-demand version and moved the group to it.
    node_group(eks_stub, version=2, desired=0)
    after = run(aws, EKS_CONSUMER, ACTIVE + timedelta(days=2))
    versions = ec2.describe_launch_template_versions(LaunchTemplateName="gpu-p5")["LaunchTemplateVersions"]
    assert after["state"] == "in place" and len(versions) == 2
    eks_stub.assert_no_pending_responses()


def test_a_node_group_is_moved_onto_the_next_block_at_size_0_before_it_starts_and_scaled_up_at_its_start(aws):
    """[aws: ec2-cb.launch-template-before-start]: within rotation.PREPARE_LEAD before the block starts, the group (at
    size 0) is moved to a version into it; at the start it is only scaled up, so its nodes launch then. Fails on the
    rotation before issue 40, which moved the version at the start and scaled up a run later."""
    ec2, _, _, _, (_, eks_stub) = aws
    expect_version_move(eks_stub)
    before = run(aws, EKS_CONSUMER, BLOCK.start - timedelta(minutes=45))
    assert before["did"].startswith("make a launch template version into Capacity Block cr-0123456789abcdef0")
    assert target(ec2, 2)[0] == "cr-0123456789abcdef0" and before["wanted_size"] == 0
    node_group(eks_stub, version=2, desired=0)
    eks_stub.add_response(
        "update_nodegroup_config",
        {"update": {"id": "u-2"}},
        {"clusterName": "ml", "nodegroupName": "p5", "scalingConfig": {"desiredSize": 4}},
    )
    assert run(aws, EKS_CONSUMER, BLOCK.start)["did"] == "scale to 4"
    eks_stub.assert_no_pending_responses()


from gpu_governance_runtime.capacity.rotation import _create_version, into_block  # noqa: E402
from gpu_governance_runtime.request_shapes import conform  # noqa: E402

from .shape_examples import example, problems  # noqa: E402

HARDENED = {  # a hardened GPU template as DescribeLaunchTemplateVersions returns it
    "ImageId": "ami-0123456789abcdef0",
    "InstanceType": "p5.48xlarge",
    "EbsOptimized": True,
    "IamInstanceProfile": {"Arn": "arn:aws:iam::111122223333:instance-profile/gpu-nodes"},
    "MetadataOptions": {
        "State": "applied",
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 2,
        "HttpEndpoint": "enabled",
        "HttpProtocolIpv6": "disabled",
        "InstanceMetadataTags": "disabled",
    },
    "NetworkInterfaces": [
        {
            "DeviceIndex": 0,
            "NetworkCardIndex": 0,
            "InterfaceType": "efa",
            "SubnetId": "subnet-0123456789abcdef0",
            "Groups": ["sg-0123456789abcdef0"],
            "DeleteOnTermination": True,
            "Ipv6Addresses": [{"Ipv6Address": "2600:1f18::1", "IsPrimaryIpv6": True}],
            "PrimaryIpv6": True,
        }
    ],
    "BlockDeviceMappings": [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {
                "VolumeSize": 500,
                "VolumeType": "gp3",
                "Iops": 16000,
                "Throughput": 1000,
                "Encrypted": True,
                "DeleteOnTermination": True,
            },
        }
    ],
    "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "team", "Value": "research"}]}],
    "Operator": {"Managed": False, "Principal": "", "HiddenByDefault": False},
}
OUTPUT_ONLY = {("MetadataOptions", "State"), ("Operator", "Managed"), ("Operator", "HiddenByDefault")}


@pytest.mark.parametrize(
    "wanted, target",
    [(("capacity-block", "cr-0123456789abcdef0"), "block"), (("capacity-block", "cr-0bbbbbbbbbbbbbbb2"), "next")],
)
def test_a_hardened_template_is_rotated_with_only_what_the_create_call_accepts(wanted, target):
    current = {
        **HARDENED,
        **(
            {
                "InstanceMarketOptions": {"MarketType": "capacity-block"},
                "CapacityReservationSpecification": {
                    "CapacityReservationTarget": {"CapacityReservationId": "cr-0aaaaaaaaaaaaaaa1"}
                },
            }
            if target == "next"
            else {}
        ),
    }
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ec2)
    sent = {
        k: ({m: x for m, x in v.items() if (k, m) not in OUTPUT_ONLY} if isinstance(v, dict) else v)
        for k, v in HARDENED.items()
    }
    sent["NetworkInterfaces"] = [
        {**HARDENED["NetworkInterfaces"][0], "Ipv6Addresses": [{"Ipv6Address": "2600:1f18::1"}]}
    ]
    sent.update(
        InstanceMarketOptions={"MarketType": "capacity-block"},
        CapacityReservationSpecification={"CapacityReservationTarget": {"CapacityReservationId": wanted[1]}},
    )
    # The Stubber checks the request against the model: the description sent back unchanged fails.
    stub.add_response(
        "create_launch_template_version",
        {"LaunchTemplateVersion": {"VersionNumber": 5}},
        {"LaunchTemplateName": "gpu-p5", "LaunchTemplateData": sent, "VersionDescription": ANY},
    )
    with stub:
        assert _create_version(ec2, "gpu-p5", {"VersionNumber": 4, "LaunchTemplateData": current}, wanted) == 5
    stub.assert_no_pending_responses()


def test_the_fullest_possible_description_conforms_to_the_create_request():
    model = boto3.client("ec2", region_name="us-east-1").meta.service_model
    described = (
        model.operation_model("DescribeLaunchTemplateVersions")
        .output_shape.members["LaunchTemplateVersions"]
        .member.members["LaunchTemplateData"]
    )
    request = model.operation_model("CreateLaunchTemplateVersion").input_shape.members["LaunchTemplateData"]
    data = example(described)
    assert problems(data, request)  # the raw description is refused ...
    assert (
        problems(into_block("cr-0123456789abcdef0")(conform(data, request)), request) == ""
    )  # ... the conformed one is not
