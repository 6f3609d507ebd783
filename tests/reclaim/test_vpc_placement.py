"""The reclaim controller placed in a VPC (a HyperPod EKS cluster with a private API endpoint):
the function's VPC configuration, what cdk-nag then acknowledges and what it no longer does, the
cluster's security group admitting it, and the default placement outside any VPC. One synthesis,
with every compliance pack."""

from __future__ import annotations

import json

import pytest
import yaml
from aws_cdk import App, Environment, Stack, aws_ec2 as ec2
from aws_cdk.assertions import Template

from constructs_lib.cli.report import summarise
from constructs_lib.controllers.reclaim import ReclaimController, ReclaimTarget
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.organisation.compliance import apply_standard_packs
from gpu_governance_runtime.contract import ENV_IN_VPC

MODEL = GovernanceModel.from_dict(yaml.safe_load(default_config_text()))
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-fair-share"
TARGETS = [ReclaimTarget(pool="ec2-gpu", job_queue_arn=QUEUE), ReclaimTarget(pool="hyperpod-eks")]
ENV = Environment(account="111122223333", region="us-east-1")
SUBNETS = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]
VPC_ACKNOWLEDGED = (
    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]"
)


def cluster_vpc(stack: Stack) -> ec2.IVpc:
    """The HyperPod cluster's existing VPC, imported (the library creates no VPC)."""
    return ec2.Vpc.from_vpc_attributes(
        stack,
        "ClusterVpc",
        vpc_id="vpc-0aaaaaaaaaaaaaaa0",
        availability_zones=["us-east-1a", "us-east-1b"],
        private_subnet_ids=SUBNETS,
    )


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    """Stacks: ``Outside`` (the default), ``InVpc`` (a vpc alone: the CDK makes the function's
    security group), ``Chosen`` (one subnet and the platform's own security group, and the
    cluster's security group admitting the function on 443)."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(outdir=str(outdir))
    stacks = {name: Stack(app, name, env=ENV) for name in ("Outside", "InVpc", "Chosen")}
    ReclaimController(stacks["Outside"], "ReclaimController", model=MODEL, targets=TARGETS)
    ReclaimController(
        stacks["InVpc"], "ReclaimController", model=MODEL, targets=TARGETS, vpc=cluster_vpc(stacks["InVpc"])
    )
    chosen = stacks["Chosen"]
    own = ec2.SecurityGroup.from_security_group_id(chosen, "Own", "sg-0ccccccccccccccc1", mutable=False)
    controller = ReclaimController(
        chosen,
        "ReclaimController",
        model=MODEL,
        targets=TARGETS,
        vpc=cluster_vpc(chosen),
        vpc_subnets=ec2.SubnetSelection(subnet_filters=[ec2.SubnetFilter.by_ids(SUBNETS[:1])]),
        security_groups=[own],
    )
    cluster_sg = ec2.SecurityGroup.from_security_group_id(chosen, "ClusterSg", "sg-0eeeeeeeeeeeeeee1")
    cluster_sg.connections.allow_from(controller.function, ec2.Port.tcp(443), "reclaim controller reads Kueue")
    apply_standard_packs(app)
    app.synth()  # raises on any unacknowledged finding
    return {name: Template.from_stack(stack).to_json() for name, stack in stacks.items()}, summarise(outdir)


def reclaim_function(template: dict) -> dict:
    (function,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"]["Handler"] == "gpu_governance_runtime.reclaim.handler.handler"
    ]
    return function


def acknowledged(summary, stack: str, rule: str) -> list[str]:
    return [
        key
        for key in summary.acknowledged
        if key.startswith(f"/{stack}/ReclaimController/") and key.endswith(f": {rule}")
    ]


def test_by_default_the_function_runs_outside_any_vpc_and_says_why(synthesized):
    templates, summary = synthesized
    function = reclaim_function(templates["Outside"])
    assert "VpcConfig" not in function and ENV_IN_VPC not in function["Environment"]["Variables"]
    assert acknowledged(summary, "Outside", "NIST.800.53.R5-LambdaInsideVPC")
    assert not acknowledged(summary, "Outside", VPC_ACKNOWLEDGED)
    assert not [r for r in templates["Outside"]["Resources"].values() if r["Type"].startswith("AWS::EC2::")]
    assert not [r for r in templates["Outside"]["Resources"].values() if r["Properties"].get("ManagedPolicyArns")]


def test_given_a_vpc_the_function_runs_in_its_private_subnets_and_is_no_longer_excused(synthesized):
    templates, summary = synthesized
    function = reclaim_function(templates["InVpc"])
    assert function["VpcConfig"]["SubnetIds"] == SUBNETS
    (group,) = function["VpcConfig"]["SecurityGroupIds"]
    group_id = group["Fn::GetAtt"][0]
    assert templates["InVpc"]["Resources"][group_id]["Type"] == "AWS::EC2::SecurityGroup"
    assert function["Environment"]["Variables"][ENV_IN_VPC] == "true"
    (role,) = [
        r["Properties"]
        for k, r in templates["InVpc"]["Resources"].items()
        if r["Type"] == "AWS::IAM::Role" and k.startswith("ReclaimControllerRole")
    ]
    assert (
        json.dumps(role["ManagedPolicyArns"]).count("policy/service-role/AWSLambdaVPCAccessExecutionRole") == 1
    )  # its network interfaces
    for stack in ("InVpc", "Chosen"):
        assert not [key for key in summary.acknowledged if key.startswith(f"/{stack}/") and "LambdaInsideVPC" in key]
        assert len(acknowledged(summary, stack, VPC_ACKNOWLEDGED)) == 1  # the network-interface policy the CDK attaches


def test_chosen_subnets_and_security_groups_are_used_and_the_cluster_admits_the_function_on_443(synthesized):
    templates, _ = synthesized
    function = reclaim_function(templates["Chosen"])
    assert function["VpcConfig"] == {"SubnetIds": SUBNETS[:1], "SecurityGroupIds": ["sg-0ccccccccccccccc1"]}
    assert not [r for r in templates["Chosen"]["Resources"].values() if r["Type"] == "AWS::EC2::SecurityGroup"]
    (ingress,) = [
        r["Properties"]
        for r in templates["Chosen"]["Resources"].values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress"
    ]
    assert {k: ingress[k] for k in ("GroupId", "SourceSecurityGroupId", "IpProtocol", "FromPort", "ToPort")} == {
        "GroupId": "sg-0eeeeeeeeeeeeeee1",
        "SourceSecurityGroupId": "sg-0ccccccccccccccc1",
        "IpProtocol": "tcp",
        "FromPort": 443,
        "ToPort": 443,
    }


def test_every_pack_is_clean_in_every_placement(synthesized):
    _, summary = synthesized
    assert summary.open_findings == []


def test_subnets_or_security_groups_without_a_vpc_are_refused_with_the_other_problems():
    stack = Stack(App(), "Capacity", env=ENV)
    group = ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-0ccccccccccccccc1")
    with pytest.raises(GovernanceError) as error:
        ReclaimController(
            stack,
            "ReclaimController",
            model=MODEL,
            targets=TARGETS,
            starved_ticks=0,
            security_groups=[group],
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED),
        )
    lines = str(error.value).splitlines()
    assert lines[0].startswith("vpc_subnets: given without vpc (") and lines[0].endswith(
        ") - only with vpc (the VPC they belong to)"
    )
    assert lines[1].startswith("security_groups: given without vpc ([")
    assert "starved_ticks: out of range (0) - 1-100" in lines
    assert not stack.node.try_find_child("ReclaimController")  # refused before any resource
