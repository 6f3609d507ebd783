"""The SubmissionGuard construct: a rule on the governed queues' service-job state changes, a
function that may read service jobs and training plan tags and stop only governed teams' service
jobs, dry run by default, and every compliance pack clean (synth raises on any finding)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from constructs_lib import SubmissionGuard
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model.loader import load_model
from constructs_lib.organisation.compliance import apply_standard_packs
from gpu_governance_runtime import contract

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the handler builds its clients on import
from gpu_governance_runtime.guard.handler import queues_from  # noqa: E402

ENV = Environment(account="111122223333", region="us-east-1")
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/sagemaker-training"


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    model = load_model(None)
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = Stack(app, "Capacity", env=ENV)
    guard = SubmissionGuard(stack, "SubmissionGuard", model=model, job_queues={"sagemaker-training": QUEUE})
    apply_standard_packs(app)
    app.synth()  # raises on any unacknowledged finding of any pack
    return model, guard, Template.from_stack(stack)


def _rules(template):
    rules = template.find_resources("AWS::Events::Rule").values()
    (states,) = [r for r in rules if "EventPattern" in r["Properties"]]
    (redrive,) = [r for r in rules if "ScheduleExpression" in r["Properties"]]
    return states, redrive


def test_the_rule_sends_every_state_before_the_job_runs_of_the_governed_queue(synthesized):
    _, guard, template = synthesized
    rule, _ = _rules(template)
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.batch"],
        "detail-type": ["Batch Service Job State Change"],
        "detail": {
            "jobQueue": [QUEUE],
            "status": ["SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING"],
        },
    }
    # EventBridge's retries cover handing the event to Lambda only: the most it allows, then the dead-letter queue.
    (target,) = rule["Properties"]["Targets"]
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
    assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": [_logical_id(guard.dead_letters), "Arn"]}


def _logical_id(construct):
    return construct.node.default_child.stack.get_logical_id(construct.node.default_child)


def test_an_event_the_guard_could_not_decide_is_retried_dead_lettered_and_checked_again(synthesized):
    """Row 4: Lambda retries a failed event twice and keeps throttled ones six hours; the function's
    dead-letter queue keeps the rest, which a run every ten minutes checks again (handler.redrive)."""
    _, guard, template = synthesized
    function_id = _logical_id(guard.function)
    (config,) = template.find_resources("AWS::Lambda::EventInvokeConfig").values()
    assert config["Properties"]["FunctionName"] == {"Ref": function_id}
    assert (config["Properties"]["MaximumRetryAttempts"], config["Properties"]["MaximumEventAgeInSeconds"]) == (
        2,
        21600,
    )
    function = _guard_function(template)["Properties"]
    queue = {"Fn::GetAtt": [_logical_id(guard.dead_letters), "Arn"]}
    assert function["DeadLetterConfig"] == {"TargetArn": queue}
    assert function["Environment"]["Variables"][contract.ENV_DEAD_LETTERS_URL] == {
        "Ref": _logical_id(guard.dead_letters)
    }
    _, redrive = _rules(template)
    assert redrive["Properties"]["ScheduleExpression"] == "rate(10 minutes)"
    (target,) = redrive["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    (policy,) = [p for lid, p in template.find_resources("AWS::IAM::Policy").items() if "SubmissionGuard" in lid]
    (consume,) = [
        s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if sorted(s["Action"]) == ["sqs:DeleteMessage", "sqs:ReceiveMessage"]
    ]
    assert consume["Resource"] == queue


def test_its_concurrency_is_sized_and_every_way_an_event_waits_or_is_lost_alarms(synthesized):
    _, guard, template = synthesized
    function_id = _logical_id(guard.function)
    assert _guard_function(template)["Properties"]["ReservedConcurrentExecutions"] == 10
    alarms = {
        (a["Properties"].get("Namespace"), a["Properties"]["MetricName"]): a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
    }
    function = [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    expected = {
        ("AWS/Lambda", "Errors"): (function, 1),
        ("AWS/Lambda", "Throttles"): (function, 1),
        ("AWS/Lambda", "AsyncEventAge"): (function, 300_000),  # milliseconds: five minutes
        ("AWS/Lambda", "DeadLetterErrors"): (function, 1),
        ("AWS/Events", "FailedInvocations"): ([{"Name": "RuleName", "Value": {"Ref": _logical_id(guard.rule)}}], 1),
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"): (
            [{"Name": "QueueName", "Value": {"Fn::GetAtt": [_logical_id(guard.dead_letters), "QueueName"]}}],
            1,
        ),
        (contract.GUARD_NAMESPACE, contract.MISSING_API_OPERATIONS): (None, 1),
    }
    assert set(alarms) == set(expected)
    for key, (dimensions, threshold) in expected.items():
        alarm = alarms[key]
        assert (alarm.get("Dimensions"), alarm["Threshold"], alarm["ComparisonOperator"]) == (
            dimensions,
            threshold,
            "GreaterThanOrEqualToThreshold",
        ), key
        assert alarm["AlarmActions"], key  # every alarm notifies


def _guard_function(template):
    (function,) = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "gpu_governance_runtime.guard.handler.handler"}}
    ).values()
    return function


def _joined(value):
    """A synthesized string, its tokens (partition, URL suffix) as <token>."""
    return (
        value
        if isinstance(value, str)
        else "".join(p if isinstance(p, str) else "<token>" for p in value["Fn::Join"][1])
    )


def test_the_function_knows_each_teams_role_repository_cost_centre_and_owner_topic_and_is_dry_run(synthesized):
    model, guard, template = synthesized
    function = _guard_function(template)
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables[contract.ENV_DRY_RUN] == "true"
    (queue,) = json.loads(_joined(variables[contract.ENV_GUARD_QUEUES]))
    assert queue == {"job_queue": QUEUE, "pool": "sagemaker-training"}
    names = json.loads(_joined(variables[contract.ENV_GUARD_NAMES]))
    # The teams are in the package, not the environment (4 KB in all): what the handler reads, expanded as it expands it.
    asset_hash = function["Properties"]["Code"]["S3Key"].removesuffix(".zip")
    package = Path(guard.node.root.outdir) / f"asset.{asset_hash}" / "gpu_governance_runtime"
    document = json.loads((package / contract.GUARD_FILE_NAME).read_text())
    (expanded,) = queues_from([queue], names, document).values()
    teams = {t.name: t for t in model.teams_in("sagemaker-training")}
    assert set(expanded["teams"]) == set(teams)
    for name, rules in expanded["teams"].items():
        assert rules["execution_role_arn"] == f"arn:<token>:iam::111122223333:role/gpu-governance/{name}-gpu-training"
        assert rules["repository"] == f"111122223333.dkr.ecr.us-east-1.<token>/{model.organisation}/{name}"
        assert rules["cost_centre"] == teams[name].cost_centre
    assert expanded["team_topics"] == {
        name: f"arn:<token>:sns:us-east-1:111122223333:{model.organisation}-gpu-guard-{name}"
        for name, team in teams.items()
        if team.owner
    }
    assert len(json.dumps(variables)) < 4096 // 2  # Lambda: 4 KB of environment in all; the teams do not grow it


def test_it_may_stop_only_governed_teams_service_jobs_and_read_only_what_it_checks(synthesized):
    model, guard, template = synthesized
    (policy,) = [p for lid, p in template.find_resources("AWS::IAM::Policy").items() if "SubmissionGuard" in lid]
    statements = {
        s["Action"] if isinstance(s["Action"], str) else tuple(s["Action"]): s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    }
    terminate = statements["batch:TerminateServiceJob"]
    assert terminate["Condition"] == {
        "Null": {f"aws:ResourceTag/{contract.TAG_TEAM}": "false"}
    }  # a team's job, whichever team
    assert "service-job/*" in json.dumps(terminate["Resource"])
    tags = json.dumps(statements["sagemaker:ListTags"]["Resource"])  # whose plan; which tags the training job carries
    assert "training-plan/*" in tags and "training-job/*" in tags
    ledger = statements[("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")]
    assert ledger["Resource"] == {"Fn::GetAtt": [_logical_id(guard.ledger), "Arn"]}
    assert not any(
        a.startswith(("batch:Submit", "batch:Update", "sagemaker:Stop", "sagemaker:Create"))
        for a in statements
        if isinstance(a, str)
    )
    # Its own topic and its team owner topics, by name prefix: no team's topic is referred to (per_team: no cycle).
    publish = [_joined(r) if "Fn::Join" in r else r for r in statements["sns:Publish"]["Resource"]]
    assert publish[1:] == [f"arn:<token>:sns:us-east-1:111122223333:{model.organisation}-gpu-guard-*"]
    names = {t["Properties"].get("TopicName") for t in template.find_resources("AWS::SNS::Topic").values()}
    assert {
        f"{model.organisation}-gpu-guard-{t.name}" for t in model.teams_in("sagemaker-training") if t.owner
    } <= names


def test_only_quota_share_pools_can_be_guarded():
    stack = Stack(App(), "Bad", env=ENV)
    with pytest.raises(GovernanceError) as raised:
        SubmissionGuard(
            stack, "Guard", model=load_model(None), job_queues={"ec2-gpu": QUEUE, "sagemaker-training": "not-an-arn"}
        )
    text = str(raised.value)
    assert (
        "job_queues.ec2-gpu: not a batch_quota_share pool ('ec2-gpu')" in text
        and "job_queues.sagemaker-training: not a job queue ARN" in text
    )
