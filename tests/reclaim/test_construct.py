"""The ReclaimController construct, synthesized once with every compliance pack (synth raises
ValidationFailed on any unacknowledged finding)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Match, Template

from constructs_lib.controllers.reclaim import ReclaimController, ReclaimTarget
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.organisation.compliance import apply_standard_packs

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-fair-share"
QUOTA_QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/sagemaker-training"
MODEL = GovernanceModel.from_dict(yaml.safe_load(default_config_text()))
TARGETS = [
    ReclaimTarget(pool="ec2-gpu", job_queue_arn=QUEUE),
    ReclaimTarget(pool="sagemaker-training", job_queue_arn=QUOTA_QUEUE),
]


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = Stack(app, "Capacity", env=Environment(account="111122223333", region="us-east-1"))
    controller = ReclaimController(stack, "ReclaimController", model=MODEL, targets=TARGETS)
    apply_standard_packs(app)
    app.synth()  # raises on any unacknowledged finding of AwsSolutions, NIST 800-53 R5, HIPAA, PCI DSS, Serverless
    return Template.from_stack(stack), controller


def test_a_failed_tick_is_never_retried_by_lambda(synthesized):
    """Lambda retries a failed asynchronous invocation twice by default: two ticks within a minute."""
    template, _ = synthesized
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig", {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}
    )


def test_victims_copies_may_be_submitted_only_to_governed_queues_under_a_share_and_with_a_team_tag(synthesized):
    """Every job of a governed queue carries a team tag, the controller's copies too; documented
    keys only (issue 37, row 1): SubmitJob's batch:ShareIdentifier, the copy's aws:RequestTag."""
    template, _ = synthesized
    submit = next(s for s in statements(template) if s["Action"] == "batch:SubmitJob")
    resources = json.dumps(submit["Resource"])
    assert QUEUE in resources and "job-definition/*" in resources and "job/*" in resources
    assert QUOTA_QUEUE not in resources and "job-queue/*" not in resources
    assert submit["Condition"] == {
        "Null": {"batch:ShareIdentifier": "false", "aws:RequestTag/gpu-governance:team": "false"}
    }
    tag = next(s for s in statements(template) if s["Action"] == "batch:TagResource")
    assert tag["Condition"] == {
        "Null": {"aws:RequestTag/gpu-governance:team": "false", "aws:RequestTag/gpu-governance:requeued-from": "false"}
    }
    assert not any("UntagResource" in json.dumps(s["Action"]) for s in statements(template))


def statements(template):
    return [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_one_tick_at_a_time_dry_run_by_default(synthesized):
    template, _ = synthesized
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "gpu_governance_runtime.reclaim.handler.handler",
            "ReservedConcurrentExecutions": 1,
            "Environment": {
                "Variables": Match.object_like(
                    {
                        "DRY_RUN": "true",
                        "RECLAIM_TARGETS": json.dumps(
                            [
                                {"job_queue": QUEUE, "pool": "ec2-gpu"},
                                {"job_queue": QUOTA_QUEUE, "pool": "sagemaker-training"},
                            ],
                            sort_keys=True,
                        ),
                    }
                )
            },
        },
    )
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(1 minute)"})


def test_only_fair_share_jobs_may_be_terminated_and_the_snapshot_is_scoped_to_its_queue(synthesized):
    template, _ = synthesized
    by_action = {json.dumps(s["Action"]): s for s in statements(template)}
    terminate = by_action['"batch:TerminateJob"']
    assert "job/*" in json.dumps(terminate["Resource"]) and ":us-east-1:111122223333:" in json.dumps(
        terminate["Resource"]
    )
    # any job with a team tag (only a governed team's own submission sets one), not a list of the
    # teams: the list reached IAM's 10,240 characters per role at about 420 fair-share teams
    assert terminate["Condition"] == {"Null": {"aws:ResourceTag/gpu-governance:team": "false"}}
    (policy,) = [
        p
        for lid, p in template.find_resources("AWS::IAM::Policy").items()
        if lid.startswith("ReclaimControllerRoleDefaultPolicy")
    ]
    assert not any(f'"{t.name}"' in json.dumps(policy) for t in MODEL.teams)
    assert by_action['"batch:GetJobQueueSnapshot"']["Resource"] == QUOTA_QUEUE
    assert not any("ssm:SendCommand" in json.dumps(s["Action"]) for s in statements(template))


def test_ledger_retained_with_expiry_and_starvation_alarms_per_team(synthesized):
    template, controller = synthesized
    template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "DeletionPolicy": "Retain",
            "Properties": Match.object_like(
                {
                    "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
                    "DeletionProtectionEnabled": True,
                }
            ),
        },
    )
    starved = [
        a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "StarvedBelowGuarantee"
    ]
    assert {(tuple(sorted((d["Name"], d["Value"]) for d in a["Dimensions"]))) for a in starved} == {
        (("Pool", t.pool), ("Share", team.name)) for t in TARGETS for team in MODEL.teams_in(t.pool)
    }
    assert all(
        a["EvaluationPeriods"] == 3
        and a["Threshold"] == 1
        and a["Namespace"] == "GpuGovernance/Reclaim"
        and a["AlarmActions"]
        for a in starved
    )
    template.resource_count_is("AWS::CloudWatch::Dashboard", len(TARGETS))  # one per pool
    assert controller.metric_share("ec2-gpu", "research", "Borrowed").metric_name == "Borrowed"


def test_slurm_target_may_send_commands_only_to_its_head_node():
    data = copy.deepcopy(yaml.safe_load(default_config_text()))
    data["pools"].append(
        {
            "name": "slurm",
            "backend": "hyperpod_slurm",
            "capacity": {"ml.p5.48xlarge": 4},
            "cluster_name": "ml-slurm",
            "gpus_per_instance": {"ml.p5.48xlarge": 8},
        }
    )
    data["teams"][0]["quotas"]["slurm"] = {"ml.p5.48xlarge": 2}
    model = GovernanceModel.from_dict(data)
    stack = Stack(App(), "S", env=Environment(account="111122223333", region="us-east-1"))
    ReclaimController(
        stack,
        "R",
        model=model,
        targets=[
            ReclaimTarget(pool="slurm", head_node_instance_id="i-0123456789abcdef0", instance_type="ml.p5.48xlarge")
        ],
    )
    send = next(s for s in statements(Template.from_stack(stack)) if s["Action"] == "ssm:SendCommand")
    text = json.dumps(send["Resource"])
    assert "document/AWS-RunShellScript" in text and "instance/i-0123456789abcdef0" in text and "*" not in text


def test_bad_targets_are_all_reported():
    stack = Stack(App(), "Bad")
    with pytest.raises(GovernanceError) as error:
        ReclaimController(
            stack,
            "R",
            model=MODEL,
            starved_ticks=0,
            targets=[
                ReclaimTarget(pool="nope"),
                ReclaimTarget(pool="ec2-gpu", job_queue_arn="arn:aws:s3:::bucket"),
                ReclaimTarget(pool="ec2-gpu", job_queue_arn=QUEUE),
            ],
        )
    text = str(error.value)
    for expected in (
        "targets[0].pool: undeclared pool ('nope')",
        "targets[1].job_queue_arn: missing or not a job queue ARN",
        "targets[2].pool: pool governed twice",
        "starved_ticks: out of range (0) - 1-100",
    ):
        assert expected in text


def custom_alarms(template):
    """(namespace, metric, ((dimension, value), ...)) -> alarm properties, for the metrics the function publishes."""
    return {
        (a["Namespace"], a["MetricName"], tuple(sorted((d["Name"], d["Value"]) for d in a.get("Dimensions", [])))): a
        for a in (r["Properties"] for r in template.find_resources("AWS::CloudWatch::Alarm").values())
        if not a["Namespace"].startswith("AWS/")
    }


def emitted(output: str) -> set[tuple]:
    """(namespace, metric, ((dimension, value), ...)) of each embedded-metric record on stdout."""
    return {
        (m["Namespace"], metric["Name"], tuple(sorted((name, record[name]) for name in names)))
        for record in (json.loads(line) for line in output.splitlines() if '"_aws"' in line)
        for m in record["_aws"]["CloudWatchMetrics"]
        for names in m["Dimensions"]
        for metric in m["Metrics"]
    }


def test_a_failing_pool_and_a_runtime_without_an_operation_alarm_to_the_topic(synthesized):
    template, controller = synthesized
    alarms = custom_alarms(template)
    topic = next(t for t in template.find_resources("AWS::SNS::Topic") if t.startswith("ReclaimControllerTopic"))
    for pool in (t.pool for t in TARGETS):
        alarm = alarms[("GpuGovernance/Reclaim", "PoolErrors", (("Pool", pool),))]
        assert (
            alarm["Statistic"],
            alarm["Period"],
            alarm["EvaluationPeriods"],
            alarm["Threshold"],
            alarm["ComparisonOperator"],
        ) == ("Sum", 60, 3, 1, "GreaterThanOrEqualToThreshold")
    missing = alarms[("GpuGovernance/Reclaim", "MissingApiOperations", ())]
    assert (missing["Statistic"], missing["EvaluationPeriods"], missing["Threshold"]) == ("Maximum", 1, 1)
    every = [a["Properties"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()]
    # first to the platform's topic (team alarms then to the owner's: tests/chargeback)
    assert all(a["AlarmActions"][0] == {"Ref": topic} and a["TreatMissingData"] == "notBreaching" for a in every)
    assert controller.metric_pool_errors("ec2-gpu").metric_name == "PoolErrors"


def test_the_alarms_watch_what_the_deployed_handler_emits(synthesized, monkeypatch, capsys):
    """Runs the handler with the synthesized function's environment and compiled policy, against a
    Batch that refuses every call, then cold-starts a copy of it whose boto3 lacks an operation:
    every PoolErrors / MissingApiOperations alarm must match a record it wrote (namespace, name,
    dimensions and values), so a rename on either side fails here."""
    import importlib.util

    from botocore.exceptions import ClientError

    template, controller = synthesized
    [function] = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "gpu_governance_runtime.reclaim.handler.handler"}}
    ).values()
    code = Path(App.of(controller).outdir) / f"asset.{function['Properties']['Code']['S3Key'].split('.')[0]}"
    for name, value in function["Properties"]["Environment"]["Variables"].items():
        monkeypatch.setenv(name, value if isinstance(value, str) else "ledger")  # the table name is a reference
    for name, value in (
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("POLICY_PATH", str(code / "gpu_governance_runtime" / "policy.json")),
    ):
        monkeypatch.setenv(name, value)
    from gpu_governance_runtime import api_check
    from gpu_governance_runtime.reclaim import handler

    class Refusing:  # every call: AccessDenied, as after a permission was taken away
        def __getattr__(self, operation):
            def call(*args, **kwargs):
                raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, operation)

            return call

    monkeypatch.setattr(handler, "batch", Refusing())
    assert handler.handler({}, None)["pools"] == []  # the invocation succeeds: only the metric tells
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "reclaim")
    monkeypatch.setattr(api_check, "missing", lambda clients, required: ["batch:GetJobQueueSnapshot"])
    spec = importlib.util.spec_from_file_location("gpu_governance_runtime.reclaim.cold_start", handler.__file__)
    with pytest.raises(RuntimeError, match="GetJobQueueSnapshot"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    alarmed = {key for key in custom_alarms(template) if key[1] in ("PoolErrors", "MissingApiOperations")}
    assert len(alarmed) == len(TARGETS) + 1
    assert alarmed <= emitted(capsys.readouterr().out)
