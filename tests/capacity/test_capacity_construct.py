"""The controller construct, synthesized once with every compliance pack (synth raises on any
unacknowledged finding)."""

import copy
import json
from pathlib import Path

import pytest
import yaml
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Match, Template

from constructs_lib.controllers.capacity import CapacityController
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.organisation.compliance import apply_standard_packs
from tests.foundation.org import with_raisable_compute_quota

BASE = yaml.safe_load(default_config_text())
WINDOWS = [
    {
        "team": "research",
        "name": "launch-load-test",
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
    },
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
        "team": "research",
        "name": "batch-burst",
        "instance_type": "p5.48xlarge",
        "instance_count": 2,
        "start": "2026-12-10T14:00:00Z",
        "duration_hours": 24,
        "max_price_per_instance_hour": 40,
        "budget": {"amount": 5000},
        "feeds": {
            "kind": "batch_compute_environment",
            "launch_template_name": "gpu-p5",
            "compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5",
            "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
            "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
        },
    },
    {
        "team": "research",
        "name": "hyperpod-burst",
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 2,
        "start": "2026-12-10T14:00:00Z",
        "duration_hours": 24,
        "max_price_per_instance_hour": 40,
        "budget": {"amount": 5000},
        "feeds": {"kind": "hyperpod_instance_group", "pool": "hyperpod-eks", "instance_group": "workers"},
    },
]


def model(windows):
    data = with_raisable_compute_quota(copy.deepcopy(BASE))  # hyperpod-burst raises research's compute quota
    data["capacity_windows"] = windows
    return GovernanceModel.from_dict(data)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = Stack(app, "Capacity", env=Environment(account="111122223333", region="us-east-1"))
    controller = CapacityController(stack, "CapacityController", model=model(WINDOWS))
    apply_standard_packs(app)
    assembly = app.synth()  # raises ValidationFailed on any unacknowledged finding of any pack
    return Template.from_stack(stack), controller, Path(assembly.directory)


def statements(template):
    policies = template.find_resources("AWS::IAM::Policy")
    return [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def test_function_runs_alone_with_its_limits(synthesized):
    template, _, _ = synthesized
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "gpu_governance_runtime.capacity.handler.handle",
            "ReservedConcurrentExecutions": 1,
            "Environment": {
                "Variables": Match.object_like(
                    {
                        "GPU_GOVERNANCE_BUDGET": "20000",
                        "GPU_GOVERNANCE_PRICE_CAP": "45",
                        "CONTROLLER_ID": "acme-ml-capacity",
                    }
                )
            },
            "TracingConfig": {"Mode": "Active"},
            "DeadLetterConfig": Match.any_value(),
        },
    )


def test_triggers_schedule_and_capacity_block_events_by_prefix(synthesized):
    template, _, _ = synthesized
    template.has_resource_properties(
        "AWS::Events::Rule", {"EventPattern": {"source": ["aws.ec2"], "detail-type": [{"prefix": "Capacity Block"}]}}
    )
    # the default 15 minutes, shortened: window batch-burst feeds a Batch compute environment (requeue.STOP_LEAD)
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(5 minutes)"})


def test_ledger_is_retained_with_point_in_time_recovery(synthesized):
    template, _, _ = synthesized
    template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "DeletionPolicy": "Retain",
            "Properties": Match.object_like(
                {
                    "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                    "DeletionProtectionEnabled": True,
                    "SSESpecification": Match.object_like({"SSEEnabled": True, "SSEType": "KMS"}),
                }
            ),
        },
    )
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})


def test_purchases_are_scoped_to_region_and_the_controllers_tags(synthesized):
    template, _, _ = synthesized
    purchase = [s for s in statements(template) if s["Action"] == "ec2:PurchaseCapacityBlock"]
    assert len(purchase) == 1
    assert purchase[0]["Condition"]["StringEquals"] == {"aws:RequestTag/gpu-governance:managed-by": "acme-ml-capacity"}
    assert "capacity-reservation/*" in json.dumps(purchase[0]["Resource"]) and ":us-east-1:" in json.dumps(
        purchase[0]["Resource"]
    )
    plans = [s for s in statements(template) if "sagemaker:CreateTrainingPlan" in s["Action"]]
    assert plans[0]["Condition"]["StringEquals"] == {"aws:RequestTag/gpu-governance:managed-by": "acme-ml-capacity"}
    buying = ("ec2:PurchaseCapacityBlock", "ec2:PurchaseCapacityBlockExtension", "sagemaker:CreateTrainingPlan")
    assert not [
        s
        for s in statements(template)
        if s["Resource"] == "*" and set(buying) & set(s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]


def test_consumers_are_acted_on_only_where_declared(synthesized):
    template, _, _ = synthesized
    found = {json.dumps(s["Action"]): s["Resource"] for s in statements(template)}
    assert (
        found['["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"]']
        == "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
    )
    # Only the block compute environment and its queue: the on-demand compute environment, where running work stays, is never updated.
    assert (
        found['"batch:UpdateComputeEnvironment"']
        == "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block"
    )
    assert found['"batch:UpdateJobQueue"'] == "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5"
    assert "job/*" in json.dumps(found['"batch:TerminateJob"']) and "job/*" in json.dumps(found['"batch:TagResource"'])
    # A requeue copy, and the tagging Batch authorises inside its submission, carry the requeue mark
    # (documented keys only, issue 37 row 1); SubmitJob is authorised on the new job too.
    copies = [s for s in statements(template) if s["Action"] in ("batch:SubmitJob", "batch:TagResource")]
    assert len(copies) == 2 and all(
        s["Condition"] == {"Null": {"aws:RequestTag/gpu-governance:requeued-from": "false"}} for s in copies
    )
    assert "job/*" in json.dumps(found['"batch:SubmitJob"'])
    assert "cluster/*" in json.dumps(found['"ecs:ListContainerInstances"'])


def test_alarms_publish_to_the_topic(synthesized):
    template, _, _ = synthesized
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    assert len(alarms) == 9 + len(WINDOWS)
    [topic] = template.find_resources("AWS::SNS::Topic")
    assert all(a["Properties"]["AlarmActions"] == [{"Ref": topic}] for a in alarms.values())
    assert all(a["Properties"]["TreatMissingData"] == "notBreaching" for a in alarms.values())


def custom_alarms(template):
    """(namespace, metric, ((dimension, value), ...)) -> alarm properties, for the metrics the function publishes."""
    return {
        (a["Namespace"], a["MetricName"], tuple(sorted((d["Name"], d["Value"]) for d in a.get("Dimensions", [])))): a
        for a in (r["Properties"] for r in template.find_resources("AWS::CloudWatch::Alarm").values())
        if not a["Namespace"].startswith("AWS/")
    }


@pytest.mark.parametrize(
    "metric, statistic, periods, what",
    [
        ("RunErrors", "Sum", 1, "a step of a run failed"),
        ("PurchasesFoundLate", "Sum", 1, "a block settled as failed was listed after all"),
        ("PurchasesDeferred", "Sum", 2, "runs keep running out of time"),
        ("MissingApiOperations", "Maximum", 1, "the runtime's boto3 lacks an operation"),
    ],
)
def test_each_run_outcome_an_operator_must_hear_of_alarms(synthesized, metric, statistic, periods, what):
    from gpu_governance_runtime.capacity.handler import METRIC_NAMESPACE

    template, controller, _ = synthesized
    alarm = custom_alarms(template)[(METRIC_NAMESPACE, metric, ())]
    assert (
        alarm["Statistic"],
        alarm["EvaluationPeriods"],
        alarm["Threshold"],
        alarm["ComparisonOperator"],
        alarm["Period"],
    ) == (statistic, periods, 0, "GreaterThanThreshold", 900), what
    assert controller.metric(metric).metric_name == metric and controller.metric(metric).namespace == METRIC_NAMESPACE


def test_every_alarmed_metric_is_one_the_runtime_emits(synthesized, capsys, monkeypatch):
    """Runs the runtime's own metric writers (a run's report with one of each outcome, and a cold
    start whose boto3 lacks an operation) and matches every alarm on a custom metric to a
    record's namespace, name and dimensions: a rename on either side fails here."""
    from decimal import Decimal

    from gpu_governance_runtime.capacity import controller, handler
    from gpu_governance_runtime.contract import ENV_POLICY_PATH

    template, _, outdir = synthesized
    [function] = template.find_resources("AWS::Lambda::Function").values()
    asset = outdir / f"asset.{function['Properties']['Code']['S3Key'].split('.')[0]}"
    windows = handler.load_windows(
        {
            **function["Properties"]["Environment"]["Variables"],  # the deployed policy and limits
            ENV_POLICY_PATH: str(asset / "gpu_governance_runtime" / "policy.json"),
        }
    )
    handler._emit_metrics(
        controller.RunReport(
            plan=None,
            uncovered=(("w@t", "budget"),),
            failed=(("i", "throttled"),),
            found_late=("intent",),
            deferred=("intent",),
            errors=(("window w", "boom"),),
        ),
        windows,
        dict.fromkeys(windows, Decimal(1)),
    )
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "capacity")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(
        handler, "REQUIRED_OPERATIONS", {**handler.REQUIRED_OPERATIONS, "ec2": ("PurchaseCapacityBlockFromTheFuture",)}
    )
    with pytest.raises(RuntimeError, match="PurchaseCapacityBlockFromTheFuture"):
        handler._clients()
    emitted = {
        (m["Namespace"], metric["Name"], tuple(sorted((name, record[name]) for name in names)))
        for record in (json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line)
        for m in record["_aws"]["CloudWatchMetrics"]
        for names in m["Dimensions"]
        for metric in m["Metrics"]
    }
    # ConsumerErrors is written by process() itself; tests/capacity/test_handler.py reads it there.
    alarmed = {key for key in custom_alarms(template) if key[1] != "ConsumerErrors"}
    assert {"RunErrors", "PurchasesFoundLate", "PurchasesDeferred", "MissingApiOperations"} <= {
        name for _, name, _ in alarmed
    }
    assert alarmed <= emitted, alarmed - emitted


def test_asset_carries_the_runtime_and_the_compiled_windows(synthesized):
    template, controller, outdir = synthesized
    code = template.find_resources("AWS::Lambda::Function")
    asset_hash = next(iter(code.values()))["Properties"]["Code"]["S3Key"].split(".")[0]
    policy = json.loads((outdir / f"asset.{asset_hash}" / "gpu_governance_runtime" / "policy.json").read_text())
    assert [w["name"] for w in policy["capacity_windows"]] == [w["name"] for w in WINDOWS]
    assert (
        policy["capacity_windows"][3]["consumer"]["cluster_arn"]
        == "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"
    )
    assert (outdir / f"asset.{asset_hash}" / "gpu_governance_runtime" / "capacity" / "handler.py").exists()


def test_no_windows_is_a_clear_error():
    with pytest.raises(GovernanceError, match="capacity_windows: no capacity windows declared"):
        CapacityController(Stack(App(), "S"), "C", model=model([]))


def test_controller_role_has_the_name_the_guardrails_exempt(synthesized):
    from constructs_lib.controllers.capacity import capacity_controller_role_name

    template, _, _ = synthesized
    template.has_resource_properties(
        "AWS::IAM::Role", {"RoleName": capacity_controller_role_name(model(WINDOWS).organisation)}
    )


def test_docs_list_every_acknowledgement_reason_of_every_feed_kind(synthesized):
    from constructs_lib.cli.report import summarise

    _, _, outdir = synthesized
    docs = "\n".join(path.read_text() for path in sorted((Path(__file__).parents[2] / "docs").glob("*.md")))
    reasons = set(summarise(outdir).acknowledged.values())
    assert any("requeues whichever team's job" in r for r in reasons)
    assert not {r for r in reasons if r not in docs}


def test_the_owners_quotas_are_the_only_quotas_it_may_raise(synthesized):
    # finetune-eval raises research's Batch quota share, hyperpod-burst research's HyperPod compute
    # quota. Compute quota ARNs end in an id SageMaker generates: the cluster's account and region
    # are as tight as IAM allows; the controller finds the team's quota by cluster and name.
    template, _, _ = synthesized
    found = {json.dumps(s["Action"]): s["Resource"] for s in statements(template)}
    assert json.dumps(found['["batch:DescribeQuotaShare", "batch:UpdateQuotaShare"]']).endswith(
        ':batch:us-east-1:111122223333:job-queue/sagemaker-training/quota-share/research"]]}'
    )
    assert (
        found['["sagemaker:DescribeComputeQuota", "sagemaker:UpdateComputeQuota"]']
        == "arn:aws:sagemaker:us-east-1:111122223333:compute-quota/*"
    )
    assert found['"sagemaker:ListComputeQuotas"'] == "*"
    assert json.dumps(found['"batch:UpdateServiceEnvironment"']).endswith(
        ':batch:us-east-1:111122223333:service-environment/sagemaker-training"]]}'
    )
    without = CapacityController(
        Stack(App(), "NoHyperPod"), "C", model=model([w for w in WINDOWS if w["name"] != "hyperpod-burst"])
    )
    actions = json.dumps(Stack.of(without).resolve(without.role.node.find_child("DefaultPolicy").document.to_json()))
    assert "ComputeQuota" not in actions
