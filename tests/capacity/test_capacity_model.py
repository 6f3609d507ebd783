import copy
from decimal import Decimal

import pytest
import yaml

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.capacity import CapacityWindow
from constructs_lib.model.loader import default_config_text
from gpu_governance_runtime.planners.capacity import Window
from tests.foundation.org import with_raisable_compute_quota

BASE = yaml.safe_load(default_config_text())
CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5"


def window(**overrides):
    values = {
        "name": "launch-load-test",
        "team": "research",
        "instance_type": "p5.48xlarge",
        "instance_count": 4,
        "start": "2026-12-10T14:00:00Z",
        "duration_hours": 6,
        "feeds": {
            "kind": "batch_compute_environment",
            "launch_template_name": "gpu-p5",
            "compute_environment": CE,
            "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
            "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
        },
        "max_price_per_instance_hour": "40",
        "budget": {"amount": 20000},
    }
    values.update(overrides)
    return values


def model_with(*windows):
    data = copy.deepcopy(BASE)
    data["capacity_windows"] = list(windows)
    return GovernanceModel.from_dict(data)


def problems(*windows):
    with pytest.raises(GovernanceError) as caught:
        model_with(*windows)
    return {p.path: p for p in caught.value.problems}


def test_window_defaults_are_safe_and_compile_for_the_planner():
    model = model_with(window())
    declared = model.capacity_windows[0]
    assert (declared.mode, declared.prefer_extension, declared.buy_ahead_days) == ("dry_run", True, 14)
    runtime = Window.from_policy(declared.to_policy(model))
    assert runtime.market == "capacity_block"
    assert runtime.start.isoformat() == "2026-12-10T14:00:00+00:00"
    assert str(runtime.max_price_per_instance_hour) == "40"
    assert runtime.consumer["launch_template_name"] == "gpu-p5"


def test_every_field_problem_is_reported_at_once_with_its_path():
    found = problems(
        window(instance_count=65, duration_hours=0, start="2026-12-10T14:00:00", mode="yolo", buy_ahead_days=57)
    )
    assert set(found) >= {
        "capacity_windows[0].instance_count",
        "capacity_windows[0].duration_hours",
        "capacity_windows[0].start",
        "capacity_windows[0].mode",
        "capacity_windows[0].buy_ahead_days",
    }
    assert "at most 64" in found["capacity_windows[0].instance_count"].allowed
    assert found["capacity_windows[0].mode"].value == "yolo"


def test_training_plan_feeds_need_sagemaker_instance_types():
    found = problems(window(feeds={"kind": "sagemaker_training_jobs"}))
    assert "must be ml.*, not p5.48xlarge" in found["capacity_windows[0]"].allowed


def test_overlapping_recurrence_is_refused():
    found = problems(window(duration_hours=48, repeat_every_days=1))
    assert "occurrences would overlap" in found["capacity_windows[0]"].allowed


def test_cross_checks_against_the_organisation():
    found = problems(
        window(availability_zones=["us-west-2a"]),
        window(
            feeds={"kind": "hyperpod_instance_group", "pool": "ec2-gpu", "instance_group": "workers"},
            instance_type="ml.p5.48xlarge",
        ),
        window(
            name="launch-load-test",
            feeds={"kind": "sagemaker_training_jobs", "pool": "sagemaker-training"},
            instance_type="ml.p4d.24xlarge",
        ),
    )
    assert found["capacity_windows[0].availability_zones[0]"].allowed == "a zone of us-east-1"
    assert (
        found["capacity_windows[1].feeds.pool"].wrong == "a batch_fair_share pool cannot take a hyperpod_instance_group"
    )
    assert found["capacity_windows[2].name"].wrong == "duplicate name"
    assert found["capacity_windows[2].instance_type"].allowed.startswith("one of ['ml.")


def test_hyperpod_feed_compiles_with_its_pools_cluster_arn():
    feeds = {"kind": "hyperpod_instance_group", "pool": "hyperpod-eks", "instance_group": "workers"}
    data = with_raisable_compute_quota(copy.deepcopy(BASE))
    data["capacity_windows"] = [window(feeds=feeds, instance_type="ml.p5.48xlarge")]
    model = GovernanceModel.from_dict(data)
    consumer = Window.from_policy(model.capacity_windows[0].to_policy(model)).consumer
    assert consumer == {**feeds, "cluster_arn": "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh"}


def test_a_slurm_pool_must_name_its_cluster_arn_before_a_window_feeds_it():
    feeds = {"kind": "hyperpod_instance_group", "pool": "hyperpod-slurm", "instance_group": "workers"}
    found = problems(window(feeds=feeds, instance_type="ml.p5.48xlarge"))
    assert (
        found["capacity_windows[0].feeds.pool"].wrong
        == "the pool declares no cluster_arn, which re-pointing its instance group needs"
    )
    assert "on pool hyperpod-slurm" in found["capacity_windows[0].feeds.pool"].allowed
    data = copy.deepcopy(BASE)
    next(p for p in data["pools"] if p["name"] == "hyperpod-slurm")["cluster_arn"] = (
        "arn:aws:sagemaker:us-east-1:111122223333:cluster/slurm1234abc"
    )
    data["capacity_windows"] = [window(feeds=feeds, instance_type="ml.p5.48xlarge")]
    model = GovernanceModel.from_dict(data)
    assert model.capacity_windows[0].to_policy(model)["consumer"]["cluster_arn"].endswith("cluster/slurm1234abc")


@pytest.mark.parametrize(
    ("value", "allowed"), [("1.5", "at most 1"), ("-0.1", "at least 0"), ("0.555", "2 decimal places")]
)
def test_min_yield_is_a_share_from_0_to_1_defaulting_to_a_half(value, allowed):
    """issue 40, item 2: a window's threshold for buying for yield; a bad value is refused naming the field."""
    assert model_with(window()).capacity_windows[0].min_yield == Decimal("0.5")
    found = problems(window(min_yield=value))["capacity_windows[0].min_yield"]
    assert (found.value, allowed in found.allowed) == (value, True)
    model = model_with(window(min_yield="0.3"))
    assert Window.from_policy(model.capacity_windows[0].to_policy(model)).min_yield == Decimal("0.3")


def test_window_alone_raises_governance_error():
    with pytest.raises(GovernanceError, match="instance_count"):
        CapacityWindow(**window(instance_count=0))


def test_validate_warns_when_an_auto_window_buys_on_an_alarm_tenants_drive(tmp_path, capsys):
    from constructs_lib.cli import main

    alarms = [
        {"alarm_name": "research-pending-high", "count": 2, "hours": 4, "metric": "GpuGovernance/Reclaim/Pending"},
        {
            "alarm_name": "jobs-queue-deep",
            "count": 2,
            "hours": 4,
            "metric": "AWS/SQS/ApproximateNumberOfMessagesVisible",
        },
        {"alarm_name": "latency-high", "count": 2, "hours": 4, "metric": "AWS/ApplicationELB/TargetResponseTime"},
        {"alarm_name": "unsaid", "count": 2, "hours": 4},
    ]
    data = copy.deepcopy(BASE)
    data["capacity_windows"] = [
        window(mode="auto", alarm_requests=alarms),
        window(
            name="approved",
            mode="approval",
            alarm_requests=[
                {"alarm_name": "approved-pending", "count": 1, "hours": 1, "metric": "GpuGovernance/Reclaim/Pending"}
            ],
        ),
    ]
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["validate", "--config", str(config)]) == 0  # deployable: a warning, not a refusal
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert [w.split(" - ")[0] for w in warnings] == [
        "warning: capacity_windows[0].alarm_requests[0].metric: GpuGovernance/Reclaim/Pending",
        "warning: capacity_windows[0].alarm_requests[1].metric: AWS/SQS/ApproximateNumberOfMessagesVisible",
        "warning: capacity_windows[0].alarm_requests[3].metric: not given",
    ]
    assert "without approval" in warnings[0] and "2 x p5.48xlarge for 4 h" in warnings[0]
    # The metric is for validate only: the controller's policy holds what it reads.
    from constructs_lib.model.policy import compile_policy

    (compiled, _) = compile_policy(GovernanceModel.from_dict(data))["capacity_windows"]
    assert compiled["alarm_requests"][0] == {"alarm_name": "research-pending-high", "count": 2, "hours": 4}


def test_an_alarm_metric_must_name_a_namespace_and_a_metric():
    found = problems(window(alarm_requests=[{"alarm_name": "a", "count": 1, "hours": 1, "metric": "Pending"}]))
    assert "capacity_windows[0].alarm_requests[0].metric" in found


def alarm_on(metric: str) -> dict:
    return window(mode="auto", alarm_requests=[{"alarm_name": "a", "count": 1, "hours": 1, "metric": metric}])


# PutMetricData's Namespace: 1-255 ASCII characters but control characters, the first not ":".
@pytest.mark.parametrize(
    "metric",
    [
        "/aws/sagemaker/TrainingJobs/train:loss",
        "AWS/SQS/ApproximateNumberOfMessagesVisible",
        "//Latency",  # the namespace "/"
        "My Team #1: latency.p99_ms/Requests",
        "n" * 255 + "/Requests",
        "x/" + "m" * 255,
        "~/m",
    ],
)
def test_an_alarm_metric_takes_every_namespace_cloudwatch_takes(metric):
    assert model_with(alarm_on(metric)).capacity_windows[0].alarm_requests[0].metric == metric


@pytest.mark.parametrize(
    "metric",
    [":Leading/colon", "/Requests", "n" * 256 + "/Requests", "tab\there/m", "del\x7f/m", "café/m", "ns/"],
)
def test_an_alarm_metric_refuses_a_namespace_cloudwatch_refuses(metric):
    assert "capacity_windows[0].alarm_requests[0].metric" in problems(alarm_on(metric))


def test_validate_warns_of_an_alarm_on_a_namespace_every_team_may_publish_into(tmp_path, capsys):
    """Issue 38 row 6: a training job's execution role may PutMetricData into
    /aws/sagemaker/TrainingJobs, so any team can set such a metric and trip the alarm."""
    from constructs_lib.cli import main
    from constructs_lib.core.vocabulary import TENANT_METRIC_NAMESPACES

    data = copy.deepcopy(BASE)
    data["capacity_windows"] = [alarm_on(f"{namespace}/train:loss") for namespace in TENANT_METRIC_NAMESPACES]
    for index, declared in enumerate(data["capacity_windows"]):
        declared["name"] = f"window-{index}"
        declared["alarm_requests"][0]["alarm_name"] = f"alarm-{index}"
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["validate", "--config", str(config)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: capacity_windows")]
    assert warnings == [
        f"warning: capacity_windows[{index}].alarm_requests[0].metric: {namespace}/train:loss - every team may publish "
        f"into {namespace} (its training jobs' execution role may PutMetricData there): a team can make window "
        f"window-{index} buy up to 1 x p5.48xlarge for 1 h without approval; use mode approval, or an alarm on a "
        "metric only the platform moves"
        for index, namespace in enumerate(TENANT_METRIC_NAMESPACES)
    ]


def test_a_batch_feed_needs_a_block_compute_environment_of_its_own_and_its_queue():
    feeds = window()["feeds"]
    found = problems(
        window(feeds={k: v for k, v in feeds.items() if k not in ("block_compute_environment", "job_queue")}),
        window(name="same", feeds={**feeds, "block_compute_environment": CE}),
        window(name="elsewhere", feeds={**feeds, "job_queue": "arn:aws:batch:eu-west-1:111122223333:job-queue/gpu-p5"}),
        window(name="not-a-queue", feeds={**feeds, "job_queue": CE}),
    )
    assert {
        "capacity_windows[0].feeds.block_compute_environment",
        "capacity_windows[0].feeds.job_queue",
        "capacity_windows[3].feeds.job_queue",
    } <= set(found)
    assert "is the on-demand compute_environment" in str(found["capacity_windows[1].feeds"])
    assert "must be in the same region and account" in str(found["capacity_windows[2].feeds"])
    runtime = Window.from_policy(model_with(window()).capacity_windows[0].to_policy(model_with(window())))
    assert (runtime.consumer["block_compute_environment"], runtime.consumer["job_queue"]) == (
        feeds["block_compute_environment"],
        feeds["job_queue"],
    )


def test_an_eks_window_cannot_fall_back_to_an_on_demand_template():
    """[aws: eks.capacity-block-template-required] (issue 37 row 11): a CAPACITY_BLOCK node group's launch template
    must carry the capacity-block options, so ``fallback: on_demand`` (moving it to an on-demand template between
    blocks) is refused by name; left out, the window compiles with ``none``, which the rotation keeps."""
    eks = {"kind": "eks_node_group", "launch_template_name": "gpu-p5", "cluster_name": "ml", "nodegroup_name": "p5"}
    found = problems(window(feeds=eks, fallback="on_demand"))
    assert (
        "fallback: an EKS CAPACITY_BLOCK node group cannot be moved to an on-demand launch template (on_demand) - none"
        in (str(found["capacity_windows[0]"]))
    )
    model = model_with(window(feeds=eks))
    assert model.capacity_windows[0].to_policy(model)["fallback"] == "none"
    assert model_with(window(feeds=eks, fallback="none")).capacity_windows[0].fallback == "none"


def test_a_training_plan_window_asks_for_a_size_plans_are_sold_in():
    """[aws: sm-plan.instance-counts]: 1, 2, 4, 8, 16, 32 or 64 instances; a window of 3 would always pay for 4."""
    feeds = {"kind": "sagemaker_training_jobs"}
    found = problems(window(feeds=feeds, instance_type="ml.p5.48xlarge", instance_count=3))
    assert "instance_count: a training plan holds 1, 2, 4, 8, 16, 32 or 64 instances (3) - one of those" in (
        found["capacity_windows[0]"].allowed
    )
    assert model_with(window(feeds=feeds, instance_type="ml.p5.48xlarge", instance_count=4)).capacity_windows
