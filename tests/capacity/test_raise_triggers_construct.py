"""What starts the capacity controller besides its schedule, and who may read the raised
guarantees: the alarm-request rules, the rule on updates of the stacks holding a raised quota,
and the one SSM parameter both controllers share (capacity/raised.py). Synthesized once, with a
team's quota share placed in a stack of its own (the reference app's per-team layout), with every
compliance pack (synth raises on any unacknowledged finding)."""

from __future__ import annotations

import copy

import pytest
import yaml
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from constructs_lib.controllers.capacity import CapacityController
from constructs_lib.controllers.reclaim import ReclaimController, ReclaimTarget
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.organisation.compliance import apply_standard_packs
from gpu_governance_runtime import contract

ENV = Environment(account="111122223333", region="us-east-1")
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/sagemaker-training"
PARAMETER_ARN = {
    "Fn::Join": [
        "",
        [
            "arn:",
            {"Ref": "AWS::Partition"},
            ":ssm:us-east-1:111122223333:parameter/gpu-governance/acme-ml/capacity/raised-guarantees",
        ],
    ]
}
WINDOWS = [
    {
        "team": "research",
        "name": "finetune-eval",
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 2,
        "start": "2026-12-10T14:00:00Z",
        "duration_hours": 8,
        "feeds": {"kind": "sagemaker_training_jobs", "pool": "sagemaker-training"},
        "max_price_per_instance_hour": 45,
        "budget": {"amount": 10000},
    },
    {
        "team": "training",
        "name": "spike",
        "instance_type": "p5.48xlarge",
        "instance_count": 4,
        "start": "2026-12-10T14:00:00Z",
        "duration_hours": 6,
        "max_price_per_instance_hour": 40,
        "budget": {"amount": 20000},
        "feeds": {
            "kind": "eks_node_group",
            "launch_template_name": "gpu-p5",
            "cluster_name": "ml",
            "nodegroup_name": "p5",
        },
        "alarm_requests": [
            {"alarm_name": "inference-p99-latency-high", "count": 2, "hours": 4},
            {"alarm_name": "queue-depth-high", "count": 4, "hours": 6},
        ],
    },
]


def model(windows):
    data = copy.deepcopy(yaml.safe_load(default_config_text()))
    data["capacity_windows"] = windows
    return GovernanceModel.from_dict(data)


class PerTeamStack(Stack):
    """Puts the research team's resources into a stack of its own (constructs_lib.core.placement)."""

    def __init__(self, scope, id, *, team_stack: Stack, **kwargs):
        super().__init__(scope, id, **kwargs)
        self.team_stack = team_stack

    def team_scope(self, owner, team_name):
        return self.team_stack if team_name == "research" else owner


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    team_stack = Stack(app, "TeamResearch", env=ENV)
    stack = PerTeamStack(app, "Capacity", env=ENV, team_stack=team_stack)
    governance = model(WINDOWS)
    capacity = CapacityController(stack, "CapacityController", model=governance)
    reclaim = ReclaimController(
        stack,
        "ReclaimController",
        model=governance,
        targets=[ReclaimTarget(pool="sagemaker-training", job_queue_arn=QUEUE)],
    )
    capacity.grant_read_raised_guarantees(reclaim.role)
    apply_standard_packs(app)
    app.synth()  # raises on any unacknowledged finding of any pack
    return Template.from_stack(stack), capacity, reclaim


def function_arn(template, handler):
    (logical_id,) = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def rules(template, source):
    return [
        r["Properties"]
        for r in template.find_resources("AWS::Events::Rule").values()
        if r["Properties"].get("EventPattern", {}).get("source") == [source]
    ]


def test_each_windows_alarms_request_capacity_when_they_go_to_alarm(synthesized):
    template, _, _ = synthesized
    (rule,) = rules(template, contract.ALARM_EVENT_SOURCE)
    assert rule["EventPattern"] == {
        "source": ["aws.cloudwatch"],
        "detail-type": ["CloudWatch Alarm State Change"],
        "detail": {"alarmName": ["inference-p99-latency-high", "queue-depth-high"], "state": {"value": ["ALARM"]}},
    }
    (target,) = rule["Targets"]
    assert target["Arn"] == function_arn(template, "gpu_governance_runtime.capacity.handler.handle")
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 2 and "DeadLetterConfig" in target


def test_an_update_of_a_stack_holding_a_raised_quota_runs_the_controller(synthesized):
    template, capacity, _ = synthesized
    (rule,) = rules(template, contract.STACK_EVENT_SOURCE)
    pattern = rule["EventPattern"]
    assert pattern["detail-type"] == ["CloudFormation Stack Status Change"]
    assert pattern["detail"]["status-details"] == {"status": ["UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE"]}
    # The service environment's stack and the stack the research team's quota share was placed in.
    assert capacity.raised_stacks == ["Capacity", "TeamResearch"]
    assert pattern["detail"]["stack-id"] == [
        {
            "prefix": {
                "Fn::Join": [
                    "",
                    ["arn:", {"Ref": "AWS::Partition"}, f":cloudformation:us-east-1:111122223333:stack/{name}/"],
                ]
            }
        }
        for name in ("Capacity", "TeamResearch")
    ]
    assert rule["Targets"][0]["Arn"] == function_arn(template, "gpu_governance_runtime.capacity.handler.handle")


def policy_statements(template, role_fragment):
    return [
        s
        for logical_id, p in template.find_resources("AWS::IAM::Policy").items()
        if role_fragment in logical_id
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_both_controllers_name_the_one_parameter_and_only_the_reclaim_side_reads(synthesized):
    template, _, _ = synthesized
    name = contract.raised_guarantees_parameter("acme-ml")
    for handler in ("gpu_governance_runtime.capacity.handler.handle", "gpu_governance_runtime.reclaim.handler.handler"):
        (function,) = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}}).values()
        assert function["Properties"]["Environment"]["Variables"][contract.ENV_RAISED_GUARANTEES] == name
    reclaim = [s for s in policy_statements(template, "ReclaimController") if s["Resource"] == PARAMETER_ARN]
    assert reclaim == [{"Action": "ssm:GetParameter", "Effect": "Allow", "Resource": PARAMETER_ARN}]
    capacity = [s for s in policy_statements(template, "CapacityController") if s["Resource"] == PARAMETER_ARN]
    assert capacity == [
        {"Action": ["ssm:GetParameter", "ssm:PutParameter"], "Effect": "Allow", "Resource": PARAMETER_ARN}
    ]


def test_only_the_capacity_controller_can_write_a_raise_the_reclaim_controller_reads(synthesized):
    template, capacity, reclaim = synthesized
    stack = capacity.key.stack
    (function,) = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "gpu_governance_runtime.capacity.handler.handle"}}
    ).values()
    assert function["Properties"]["Environment"]["Variables"][contract.ENV_RAISED_GUARANTEES_KEY] == stack.resolve(
        capacity.key.key_arn
    )
    key_policy = template.to_json()["Resources"][stack.get_logical_id(capacity.key.node.default_child)]["Properties"][
        "KeyPolicy"
    ]["Statement"]
    encrypters = [
        s["Principal"] for s in key_policy if "kms:Encrypt" in s["Action"] or "kms:GenerateDataKey*" in s["Action"]
    ]
    assert {"AWS": stack.resolve(capacity.role.role_arn)} in encrypters
    assert {
        "AWS": stack.resolve(reclaim.role.role_arn)
    } not in encrypters  # the reclaim role never encrypts: it cannot write one
    (decrypt,) = [s for s in key_policy if s["Principal"] == {"AWS": stack.resolve(reclaim.role.role_arn)}]
    assert decrypt["Action"] == "kms:Decrypt" and decrypt["Condition"] == {
        "StringEquals": {"kms:EncryptionContext:PARAMETER_ARN": PARAMETER_ARN}
    }


def test_without_a_raising_window_there_is_no_parameter_and_no_stack_rule(tmp_path):
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Plain", env=ENV)
    governance = model(WINDOWS[1:])  # an EKS node group: nothing raises a share
    capacity = CapacityController(stack, "CapacityController", model=governance)
    ReclaimController(
        stack,
        "ReclaimController",
        model=governance,
        targets=[ReclaimTarget(pool="sagemaker-training", job_queue_arn=QUEUE)],
    )
    template = Template.from_stack(stack)
    assert capacity.raised_stacks == [] and rules(template, contract.STACK_EVENT_SOURCE) == []
    assert contract.ENV_RAISED_GUARANTEES not in str(template.find_resources("AWS::Lambda::Function"))
    assert "raised-guarantees" not in str(template.find_resources("AWS::IAM::Policy"))


@pytest.mark.parametrize(
    "alarms, path, message",
    [
        ([{"alarm_name": "x", "count": 0, "hours": 4}], "capacity_windows[1].alarm_requests[0].count", "at least 1"),
        (
            [{"alarm_name": "bad\nname", "count": 1, "hours": 4}],
            "capacity_windows[1].alarm_requests[0].alarm_name",
            "must match",
        ),
        (
            [{"alarm_name": f"a{i}", "count": 1, "hours": 1} for i in range(6)],
            "capacity_windows[1].alarm_requests",
            "at most 5",
        ),
    ],
)
def test_alarm_requests_are_validated_field_by_field(alarms, path, message):
    with pytest.raises(GovernanceError) as caught:
        model([WINDOWS[0], {**WINDOWS[1], "alarm_requests": alarms}])
    lines = str(caught.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(path) and message in lines[0], lines


def test_an_alarm_requests_for_one_window_only():
    second = {
        **WINDOWS[1],
        "name": "spike-2",
        "alarm_requests": [{"alarm_name": "queue-depth-high", "count": 1, "hours": 1}],
    }
    with pytest.raises(GovernanceError) as caught:
        model([*WINDOWS, second])
    assert str(caught.value) == (
        "capacity_windows[2].alarm_requests[0].alarm_name: already requests for window spike ('queue-depth-high') - "
        "an alarm requests capacity for one window only"
    )
