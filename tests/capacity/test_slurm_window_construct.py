"""The capacity controller with a window feeding a HyperPod Slurm pool: SSM Run Command only on
the declared head node with AWS-RunShellScript, the node listing only on the declared cluster,
the head nodes handed to the function; synthesized once with every compliance pack (synth
raises on any unacknowledged finding). Without such a window none of it exists."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from aws_cdk import App, Duration, Environment, Stack
from aws_cdk.assertions import Annotations, Match, Template

from constructs_lib.controllers.capacity import CapacityController
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.organisation.compliance import apply_standard_packs
from gpu_governance_runtime.contract import ENV_TICK_SECONDS

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/slurm1234abc"
HEAD = "i-0123456789abcdef0"
SLURM_WINDOW = {
    "team": "research",
    "name": "release-warmup",
    "instance_type": "ml.p5.48xlarge",
    "instance_count": 2,
    "start": "2026-12-10T11:30:00Z",
    "duration_hours": 8,
    "max_price_per_instance_hour": 40,
    "budget": {"amount": 5000},
    "feeds": {"kind": "hyperpod_instance_group", "pool": "hyperpod-slurm", "instance_group": "research-window"},
}


def model(windows) -> GovernanceModel:
    data = yaml.safe_load(default_config_text())
    data = copy.deepcopy(data)
    next(p for p in data["pools"] if p["name"] == "hyperpod-slurm")["cluster_arn"] = CLUSTER
    data["capacity_windows"] = windows
    return GovernanceModel.from_dict(data)


def policy_of(controller: CapacityController) -> str:
    return json.dumps(Stack.of(controller).resolve(controller.role.node.find_child("DefaultPolicy").document.to_json()))


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> tuple[Template, Path]:
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = Stack(app, "Capacity", env=Environment(account="111122223333", region="us-east-1"))
    CapacityController(
        stack, "CapacityController", model=model([SLURM_WINDOW]), slurm_head_nodes={"hyperpod-slurm": HEAD}
    )
    apply_standard_packs(app)
    assembly = app.synth()  # raises ValidationFailed on any unacknowledged finding of any pack
    return Template.from_stack(stack), Path(assembly.directory)


@pytest.fixture(scope="module")
def template(synthesized) -> Template:
    return synthesized[0]


def statements(template: Template) -> dict[str, object]:
    policies = template.find_resources("AWS::IAM::Policy")
    return {
        json.dumps(s["Action"]): s["Resource"]
        for p in policies.values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    }


def test_ssm_commands_only_on_the_head_node_with_run_shell_script(template) -> None:
    found = statements(template)
    send = json.dumps(found['"ssm:SendCommand"'])
    assert (
        ":ssm:us-east-1::document/AWS-RunShellScript" in send and f":ec2:us-east-1:111122223333:instance/{HEAD}" in send
    )
    assert len(found['"ssm:SendCommand"']) == 2  # the document and the one instance, nothing else
    assert (
        found['["ssm:CancelCommand", "ssm:GetCommandInvocation"]'] == "*"
    )  # read and cancel: no resource level exists


def test_node_listing_only_on_the_windows_cluster(template) -> None:
    assert statements(template)['["sagemaker:ListClusterNodes", "sagemaker:DescribeClusterNode"]'] == CLUSTER


def test_the_function_knows_the_head_nodes(template) -> None:
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Environment": {"Variables": Match.object_like({"SLURM_HEAD_NODES": json.dumps({"hyperpod-slurm": HEAD})})}},
    )


def test_docs_give_every_acknowledgement_reason(synthesized) -> None:
    from constructs_lib.cli.report import summarise

    docs = "\n".join(path.read_text() for path in sorted((Path(__file__).parents[2] / "docs").glob("*.md")))
    reasons = set(summarise(synthesized[1]).acknowledged.values())
    assert any("ssm:GetCommandInvocation" in r for r in reasons)
    assert not {r for r in reasons if r not in docs}


def schedule_of(controller: CapacityController) -> str:
    return controller.node.find_child("Schedule").node.default_child.schedule_expression


def test_with_a_head_node_the_controller_runs_every_5_minutes_and_counts_utilisation_by_it(template) -> None:
    template.has_resource_properties(
        "AWS::Events::Rule", {"ScheduleExpression": "rate(5 minutes)"}
    )  # the default 15 shortened
    template.has_resource_properties(
        "AWS::Lambda::Function", {"Environment": {"Variables": Match.object_like({ENV_TICK_SECONDS: "300"})}}
    )


@pytest.mark.parametrize(
    "head_nodes, schedule, expected",
    [
        ({"hyperpod-slurm": HEAD}, Duration.minutes(2), "rate(2 minutes)"),  # a shorter schedule is kept
        ({}, Duration.minutes(15), "rate(15 minutes)"),  # nothing drained without a head node
    ],
)
def test_the_schedule_is_shortened_only_to_drain_on_time(head_nodes, schedule, expected) -> None:
    stack = Stack(App(), "Schedules", env=Environment(account="111122223333", region="us-east-1"))
    assert (
        schedule_of(
            CapacityController(stack, "C", model=model([SLURM_WINDOW]), schedule=schedule, slurm_head_nodes=head_nodes)
        )
        == expected
    )


def test_without_a_slurm_window_there_is_no_command_permission() -> None:
    windows = [{**SLURM_WINDOW, "feeds": {"kind": "sagemaker_training_jobs", "pool": "sagemaker-training"}}]
    controller = CapacityController(Stack(App(), "NoSlurm"), "C", model=model(windows))
    assert "ssm:SendCommand" not in policy_of(controller) and "ListClusterNodes" not in policy_of(controller)
    assert "SLURM_HEAD_NODES" not in json.dumps(
        Stack.of(controller).resolve(controller.function.node.default_child.environment)
    )


@pytest.mark.parametrize(
    "head_nodes, line",
    [
        (
            {"hyperpod-slurm": "i-0123; reboot"},
            "slurm_head_nodes.hyperpod-slurm: not an SSM target id ('i-0123; reboot') - the head node's "
            "SSM target id (i-<8 or 17 hex> or mi-<17 hex>)",
        ),
        (
            {"hyperpod-slurm": HEAD, "sagemaker-training": HEAD},
            "slurm_head_nodes.sagemaker-training: no capacity window feeds this "
            "hyperpod_slurm pool ('sagemaker-training') - one of ['hyperpod-slurm']",
        ),
    ],
)
def test_head_nodes_are_checked_before_anything_is_built(head_nodes, line) -> None:
    stack = Stack(App(), "Bad")
    with pytest.raises(GovernanceError) as raised:
        CapacityController(stack, "C", model=model([SLURM_WINDOW]), slurm_head_nodes=head_nodes)
    assert str(raised.value).splitlines() == [line]
    assert stack.node.try_find_child("C") is None or not stack.node.find_child("C").node.children


def test_a_fed_pool_without_a_head_node_synthesizes_with_a_warning_and_no_command_permission() -> None:
    stack = Stack(App(), "NoHead", env=Environment(account="111122223333", region="us-east-1"))
    controller = CapacityController(stack, "C", model=model([SLURM_WINDOW]))
    Annotations.from_stack(stack).has_warning(
        "/NoHead/C",
        Match.string_like_regexp(
            r"capacity windows feed hyperpod_slurm pools \['hyperpod-slurm'\] but slurm_head_nodes names no head node"
        ),
    )
    assert "ssm:SendCommand" not in policy_of(controller)


def test_a_window_feeding_a_batch_compute_environment_runs_the_controller_every_5_minutes() -> None:
    """Its jobs are stopped and copied between requeue.STOP_LEAD (40 min) and 30 min before a block ends: two runs must land there."""
    batch_window = {
        **SLURM_WINDOW,
        "instance_type": "p5.48xlarge",
        "feeds": {
            "kind": "batch_compute_environment",
            "launch_template_name": "gpu-p5",
            "compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5",
            "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
            "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
        },
    }
    stack = Stack(App(), "BatchSchedule", env=Environment(account="111122223333", region="us-east-1"))
    assert schedule_of(CapacityController(stack, "C", model=model([batch_window]))) == "rate(5 minutes)"
