"""The contract between constructs and controllers, tested from both sides: what
``constructs_lib.model.policy`` (with ``capacity_model``) compiles is exactly what both controllers read
through the one reader, a document the reader does not understand is refused with every bad field
named, and the synthesized functions carry the contract's environment variables and alarm metrics."""

from __future__ import annotations

import ast
import copy
import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients at import
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from constructs_lib.model import UNLIMITED, AnyPool, GovernanceModel  # noqa: E402
from constructs_lib.model.capacity import Feed  # noqa: E402
from constructs_lib.model.loader import default_config_text, load_model  # noqa: E402
from constructs_lib.model.policy import compile_policy, policy_json  # noqa: E402
from constructs_lib.model.quota import borrow_instances, instance_quota  # noqa: E402
from gpu_governance_runtime import contract  # noqa: E402
from gpu_governance_runtime.capacity import handler as capacity_handler  # noqa: E402
from gpu_governance_runtime.policy import PolicyError, parse_policy, policy_path, read_policy  # noqa: E402
from gpu_governance_runtime.reclaim import handler as reclaim_handler  # noqa: E402
from tests.capacity.test_handler import env  # noqa: E402,F401  (the capacity handler's fixture)
from tests.eks_kueue.org import with_eks_kueue  # noqa: E402

RUNTIME = Path(contract.__file__).resolve().parent
CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5"
SLURM_ARN = "arn:aws:sagemaker:us-east-1:111122223333:cluster/slurm1234abc"


def windows_of_every_feed() -> list[dict]:
    """One window per consumer kind, each bought in its own market."""
    base = {
        "team": "research",
        "instance_count": 2,
        "start": "2026-12-10T14:00:00Z",
        "duration_hours": 6,
        "max_price_per_instance_hour": "40.5",
        "budget": {"amount": 20000, "period": "week"},
    }
    return [
        {
            **base,
            "name": "batch-ce",
            "instance_type": "p5.48xlarge",
            "availability_zones": ["us-east-1a"],
            "mode": "auto",
            "feeds": {
                "kind": "batch_compute_environment",
                "launch_template_name": "gpu-p5",
                "compute_environment": CE,
                "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
                "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
            },
        },
        {
            **base,
            "name": "eks-nodes",
            "instance_type": "p5.48xlarge",
            "repeat_every_days": 7,
            "fallback": "none",
            "feeds": {
                "kind": "eks_node_group",
                "launch_template_name": "gpu-p5",
                "cluster_name": "ml",
                "nodegroup_name": "p5",
            },
        },
        {
            **base,
            "name": "karpenter-blocks",
            "team": "inference",  # the team of the eks_kueue pool (with_eks_kueue)
            "instance_type": "p5.48xlarge",
            "availability_zones": ["us-east-1b"],
            "feeds": {
                "kind": "karpenter_node_pool",
                "pool": "eks-kueue",
                "node_role": "KarpenterNodeRole-acme-gpu",
                "ami_alias": "al2023@v20251117",
            },
        },
        {
            **base,
            "name": "slurm-group",
            "instance_type": "ml.p5.48xlarge",
            "mode": "approval",
            "prefer_extension": False,
            "min_yield": "0.25",
            "feeds": {"kind": "hyperpod_instance_group", "pool": "hyperpod-slurm", "instance_group": "workers"},
        },
        {
            **base,
            "name": "training-jobs",
            "instance_type": "ml.p5.48xlarge",
            "buy_ahead_days": 30,
            "feeds": {"kind": "sagemaker_training_jobs", "pool": "sagemaker-training"},
        },
    ]


@pytest.fixture(scope="module")
def model() -> GovernanceModel:
    """The reference organisation, with a capacity window for every kind of consumer (and an
    eks_kueue pool, which the reference leaves to examples/org-eks-kueue.yaml)."""
    data = with_eks_kueue(yaml.safe_load(default_config_text()))
    next(p for p in data["pools"] if p["name"] == "hyperpod-slurm")["cluster_arn"] = SLURM_ARN
    data["capacity_windows"] = windows_of_every_feed()
    return GovernanceModel.from_dict(data)


@pytest.fixture(scope="module")
def policy_file(model, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("asset") / contract.POLICY_FILE_NAME
    path.write_text(policy_json(model))  # the text the runtime asset bundles
    return path


def capacity_settings(model, path: Path) -> dict[str, str]:
    """The capacity function's environment as the construct states it, pointing at ``path``."""
    return {
        contract.ENV_POLICY_PATH: str(path),
        contract.ENV_BUDGET: str(max(w.budget.amount for w in model.capacity_windows)),
        contract.ENV_PRICE_CAP: str(max(w.max_price_per_instance_hour for w in model.capacity_windows)),
    }


# --- round trips ------------------------------------------------------------------------------


def test_the_model_declares_exactly_the_contracts_backends():
    assert {pool.model_fields["backend"].default for pool in AnyPool.__args__} == set(contract.BACKENDS)


@pytest.mark.parametrize("backend", contract.BACKENDS)
def test_each_backend_reads_back_as_the_model_declares_it(backend, model, policy_file):
    policy = read_policy({contract.ENV_POLICY_PATH: str(policy_file)})
    pools = [p for p in model.pools if p.backend == backend]
    assert pools, f"the reference organisation has no {backend} pool"
    assert {c.name: c.weight for c in policy.priority_classes} == {c.name: c.weight for c in model.priority_classes}
    for declared in pools:
        read = policy.pool(declared.name)
        assert (read.backend, read.capacity) == (backend, dict(declared.capacity))
        teams = model.teams_in(declared.name)
        assert [s.name for s in read.shares] == [t.name for t in teams]
        for share, team in zip(read.shares, teams, strict=True):
            sharing = team.sharing
            assert share.strategy is sharing.strategy  # one enum on both sides, not two that agree
            assert share.quota == instance_quota(team, declared)  # the one translation into whole instances
            assert share.borrow_limit_instances == borrow_instances(team, declared)
            assert share.borrow_limit == (None if sharing.borrow_limit in (None, UNLIMITED) else sharing.borrow_limit)
            assert (share.in_share_preemption, share.fair_share_weight) == (
                sharing.in_share_preemption,
                team.fair_share_weight,
            )
            for instance_type, quota in share.quota.items():
                capacity = declared.capacity[instance_type]
                absolute = share.borrow_limit_instances.get(instance_type)
                ceiling = sharing.borrow_ceiling(quota) if absolute is None else quota + absolute
                expected = capacity if ceiling is None else min(capacity, ceiling) if sharing.borrows else quota
                assert share.ceiling(instance_type, capacity) == expected


def test_the_reference_organisation_shares_every_strategy(model):
    """Otherwise the per-backend round trip above would not exercise every strategy."""
    assert {t.sharing.strategy for t in model.teams} == set(contract.SharingStrategy)


def test_capacity_windows_read_back_as_the_model_declares_them(model, policy_file):
    windows = capacity_handler.load_windows(capacity_settings(model, policy_file))
    assert list(windows) == [w.name for w in model.capacity_windows]
    pools = {p.name: p for p in model.pools}
    for declared in model.capacity_windows:
        read = windows[declared.name]
        consumer = declared.feeds.model_dump()
        if declared.feeds.kind == "hyperpod_instance_group":
            consumer["cluster_arn"] = pools[declared.feeds.pool].cluster_arn
        assert read.consumer == consumer
        assert set(contract.CONSUMER_FIELDS[declared.feeds.kind]) <= set(read.consumer)
        assert read.start == declared.start and read.start.utcoffset().total_seconds() == 0
        assert (read.max_price_per_instance_hour, read.budget, read.budget_period) == (
            declared.max_price_per_instance_hour,
            declared.budget.amount,
            declared.budget.period,
        )
        assert read.availability_zones == declared.availability_zones
        for name in (
            "market",
            "instance_type",
            "instance_count",
            "duration_hours",
            "repeat_every_days",
            "buy_ahead_days",
            "prefer_extension",
            "mode",
            "min_yield",
            "fallback",
        ):
            assert getattr(read, name) == getattr(declared, name), name
    assert {w.feeds.kind for w in model.capacity_windows} == set(contract.CONSUMER_FIELDS)


def test_every_feed_kind_of_the_model_is_a_consumer_of_the_contract():
    kinds = {branch.model_fields["kind"].annotation.__args__[0] for branch in Feed.__origin__.__args__}
    assert kinds == set(contract.CONSUMER_FIELDS)


def test_both_controllers_read_the_same_document_through_the_one_reader(model, policy_file, monkeypatch):
    monkeypatch.setenv(contract.ENV_POLICY_PATH, str(policy_file))
    monkeypatch.setenv(contract.ENV_RECLAIM_TARGETS, "[]")  # no pool: the handler reads the policy, then does nothing
    monkeypatch.setenv(contract.ENV_LEDGER_TABLE, "ledger")
    assert reclaim_handler.handler({}, None) == {"dry_run": True, "pools": []}
    document = json.loads(policy_file.read_text())
    document["version"] = contract.POLICY_VERSION + 1
    policy_file.write_text(json.dumps(document))
    try:
        expected = f"version: {contract.POLICY_VERSION + 1} - this controller reads version {contract.POLICY_VERSION}"
        with pytest.raises(PolicyError, match=expected):
            reclaim_handler.handler({}, None)
        with pytest.raises(PolicyError, match=expected):
            capacity_handler.load_windows(capacity_settings(model, policy_file))
    finally:
        policy_file.write_text(policy_json(model))


def test_without_policy_path_both_read_the_document_bundled_next_to_the_runtime():
    assert policy_path({}) == RUNTIME / contract.POLICY_FILE_NAME


# --- refusals ---------------------------------------------------------------------------------


def problems_of(document) -> str:
    with pytest.raises(PolicyError) as caught:
        parse_policy(document)
    return str(caught.value)


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d.update(version=2), "version: 2 - this controller reads version 1"),
        (lambda d: d.pop("capacity_windows"), "capacity_windows: None - a list"),
        (lambda d: d.pop("pools"), "pools: None - a list"),
        (
            lambda d: d["capacity_windows"][0].pop("budget"),
            "capacity_windows[0].budget: missing - the compiled policy always sets it",
        ),
        (lambda d: d["capacity_windows"][1].update(spot=True), "capacity_windows[1].spot: True - not a window field"),
        (
            lambda d: d["capacity_windows"][0].update(max_price_per_instance_hour="NaN"),
            "capacity_windows[0].max_price_per_instance_hour: 'NaN' - a decimal string > 0",
        ),
        (
            lambda d: d["capacity_windows"][0].update(budget="-1"),
            "capacity_windows[0].budget: '-1' - a decimal string >= 0",
        ),
        (
            lambda d: d["capacity_windows"][0].update(min_yield="1.5"),
            "capacity_windows[0].min_yield: '1.5' - a decimal string >= 0 and <= 1",
        ),
        (
            lambda d: d["capacity_windows"][0].update(start="2026-12-10T14:00:00"),
            "capacity_windows[0].start: '2026-12-10T14:00:00' - an ISO 8601 time with a UTC offset",
        ),
        (
            lambda d: d["capacity_windows"][0].update(mode="yolo"),
            "capacity_windows[0].mode: 'yolo' - one of dry_run, approval, auto",
        ),
        (
            lambda d: d["capacity_windows"][0].update(instance_count=0),
            "capacity_windows[0].instance_count: 0 - a whole number >= 1",
        ),
        (
            lambda d: d["capacity_windows"][0]["consumer"].pop("compute_environment"),
            "capacity_windows[0].consumer.compute_environment: None - a string (a batch_compute_environment names it)",
        ),
        (
            lambda d: d["capacity_windows"][2]["consumer"].update(kind="ec2_fleet"),
            "capacity_windows[2].consumer.kind: 'ec2_fleet' - one of",
        ),
        (
            lambda d: d["pools"][0]["shares"][0].update(strategy="hoard"),
            "pools[0].shares[0].strategy: 'hoard' - one of reserve, lend, lend_and_borrow",
        ),
    ],
)
def test_a_document_the_reader_does_not_understand_is_refused_naming_the_field(model, change, expected):
    document = copy.deepcopy(compile_policy(model))
    change(document)
    assert expected in problems_of(document)


def test_every_problem_is_reported_at_once_one_line_each(model):
    document = copy.deepcopy(compile_policy(model))
    document["version"] = 0
    del document["capacity_windows"][0]["mode"]
    document["capacity_windows"][3]["fallback"] = "spot"
    lines = problems_of(document).splitlines()
    assert lines[0] == "invalid policy document:"
    assert lines[1:] == [
        "version: 0 - this controller reads version 1",
        "capacity_windows[0].mode: missing - the compiled policy always sets it",
        "capacity_windows[3].fallback: 'spot' - one of on_demand, none",
    ]


# --- the synthesized functions ----------------------------------------------------------------


@pytest.fixture(scope="module")
def functions(model):
    """Environment variables and alarms of the reference app's controllers, synthesized once."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from constructs_lib.deployment import build_reference_app

    app = App()
    templates = [Template.from_stack(s).to_json() for s in build_reference_app(app, load_model())]
    resources = [r for t in templates for r in t["Resources"].values()]
    handlers = {
        r["Properties"]["Handler"]: r["Properties"].get("Environment", {}).get("Variables", {})
        for r in resources
        if r["Type"] == "AWS::Lambda::Function" and "gpu_governance_runtime" in str(r["Properties"].get("Handler"))
    }
    alarms = [
        r["Properties"] for r in resources if r["Type"] == "AWS::CloudWatch::Alarm" and "Namespace" in r["Properties"]
    ]
    dashboards = [
        "".join(p for p in r["Properties"]["DashboardBody"]["Fn::Join"][1] if isinstance(p, str))
        for r in resources
        if r["Type"] == "AWS::CloudWatch::Dashboard"
    ]
    return handlers, alarms, dashboards


def test_the_functions_carry_exactly_the_contracts_environment_variables(functions):
    handlers, _, _ = functions
    assert (
        set(handlers["gpu_governance_runtime.capacity.handler.handle"])
        == {
            contract.ENV_CONTROLLER_ID,
            contract.ENV_LEDGER_TABLE,
            contract.ENV_TOPIC_ARN,
            contract.ENV_BUDGET,
            contract.ENV_PRICE_CAP,
            contract.ENV_TICK_SECONDS,
            contract.ENV_RAISED_GUARANTEES,
            contract.ENV_RAISED_GUARANTEES_KEY,  # the reference window raises a quota share of a pool the reclaim controller observes
            contract.ENV_TEAM_SPEND,
        }
    )  # its teams declare monthly budgets
    reclaim = handlers["gpu_governance_runtime.reclaim.handler.handler"]
    assert set(reclaim) == {
        contract.ENV_RECLAIM_TARGETS,
        contract.ENV_LEDGER_TABLE,
        contract.ENV_DRY_RUN,
        contract.ENV_METRICS_NAMESPACE,
        contract.ENV_MIN_RUN_TIME_S,
        contract.ENV_MAX_PREEMPTIONS_PER_TICK,
        contract.ENV_TICK_SECONDS,
        contract.ENV_RAISED_GUARANTEES,
    }
    assert reclaim[contract.ENV_METRICS_NAMESPACE] == contract.RECLAIM_NAMESPACE
    assert set(handlers["gpu_governance_runtime.guard.handler.handler"]) == {
        contract.ENV_GUARD_QUEUES,
        contract.ENV_GUARD_NAMES,
        contract.ENV_LEDGER_TABLE,
        contract.ENV_TOPIC_ARN,
        contract.ENV_DEAD_LETTERS_URL,
        contract.ENV_DRY_RUN,
    }


def test_alarms_watch_only_metrics_the_handlers_publish(functions):
    _, alarms, _ = functions
    published = {
        contract.CAPACITY_NAMESPACE: {*contract.CAPACITY_METRICS, contract.MISSING_API_OPERATIONS},
        contract.RECLAIM_NAMESPACE: set(contract.RECLAIM_METRICS),
        contract.GUARD_NAMESPACE: {contract.MISSING_API_OPERATIONS},
    }
    watched = {(a["Namespace"], a["MetricName"]) for a in alarms if a["Namespace"].startswith("GpuGovernance/")}
    assert {namespace for namespace, _ in watched} == set(published)
    assert all(name in published[namespace] for namespace, name in watched), watched


def test_the_capacity_handler_publishes_only_the_contracts_metric_names():
    tree = ast.parse(Path(capacity_handler.__file__).read_text())
    names = {
        k.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_metric"
        for k in node.keywords
        if k.arg
    }
    assert names == set(contract.CAPACITY_METRICS)


def _drawn(body: str) -> set[tuple[str, str, tuple[str, ...]]]:
    """(namespace, metric, dimension names) of every metric a dashboard body draws or searches."""
    drawn = {
        (ns, name, tuple(re.findall(r'"([^"]*)"', rest)[0::2]))
        for ns, name, rest in re.findall(r'\["(GpuGovernance/\w+)","(\w+)"((?:,"[^"]*")*)', body)
    }
    searched = {
        (ns, name, tuple(keys.split(",")))
        for ns, keys, name in re.findall(r"\{(GpuGovernance/\w+),([\w,]+)\} MetricName=\\\"(\w+)", body)
    }
    return drawn | searched


def _emitted_by_a_reclaim_tick() -> set[tuple[str, str, tuple[str, ...]]]:
    """What the reclaim handler writes for one pool in one tick (namespace, name, dimensions)."""
    from gpu_governance_runtime.planners.reclaim import PendingJob, PoolState, RunningJob, Settings, Share, Strategy
    from gpu_governance_runtime.reclaim import handler

    class Observed:  # an observe-only backend: the tick reads, plans nothing, publishes
        acts, reroutes_borrowers, usage_from_queue, action_seconds, preemptions_seen = False, False, True, 1.0, {}

        def read(self, now):
            return PoolState(
                capacity={"g": 4},
                shares=(
                    Share(name="a", quota={"g": 2}, strategy=Strategy.LEND_AND_BORROW),
                    Share(name="b", quota={"g": 2}, strategy=Strategy.LEND),
                ),
                running=(RunningJob(job_id="r", share="a", instance_type="g", count=3, priority=1, started_at=0),),
                pending=(PendingJob(job_id="p", share="b", instance_type="g", count=2, priority=1, submitted_at=0),),
                now=now,
            )

    records: list = []
    handler.run_tick(
        "pool",
        Observed(),
        ledger=None,
        settings=Settings(),
        dry_run=True,
        namespace=contract.RECLAIM_NAMESPACE,
        now=1e9,
        emit=records.append,
    )
    return {
        (d["Namespace"], m["Name"], tuple(dims))
        for r in records
        if "_aws" in r
        for d in r["_aws"]["CloudWatchMetrics"]
        for m in d["Metrics"]
        for dims in d["Dimensions"]
    }


def _emitted_by_a_capacity_run(env, tmp_path, capsys) -> set[tuple[str, str, tuple[str, ...]]]:  # noqa: F811
    """What one scheduled run of the capacity handler writes (namespace, name, dimensions) when it
    buys a block for a team and another block of the team is active, and reads the day's spend."""
    from dataclasses import replace

    import boto3
    from botocore.stub import Stubber

    from gpu_governance_runtime.capacity.handler import process
    from tests.capacity.builders import NOW, at, block
    from tests.capacity.test_handler import WINDOW, emf_records
    from tests.chargeback.test_purchased_capacity import active_block, expect_blocks, expect_purchase
    from tests.chargeback.test_team_spend import cost_page, cost_request

    stubbed, clients, settings, _ = env
    policy = tmp_path / "auto.json"
    policy.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme-ml",
                "priority_classes": [],
                "pools": [],
                "capacity_windows": [{**WINDOW, "mode": "auto"}],
            }
        )
    )
    offer = block("cbo-1", at(10), 1, per_hour="10")  # 960 within the window's 1000
    stubbed.owned()
    stubbed.offerings(offer)
    expect_purchase(stubbed, offer, "launch-load-test-202612101400-1", WINDOW["team"])
    expect_blocks(stubbed, active_block("cr-0aaaaaaaaaaaaaaa1", window_name=WINDOW["name"], total=4, available=1))
    ce = boto3.client("ce", region_name="us-east-1")
    capsys.readouterr()
    with Stubber(ce) as ce_stub:
        today, tomorrow = NOW.date(), NOW.date() + timedelta(days=1)
        ce_stub.add_response(
            "get_cost_and_usage",
            cost_page({WINDOW["team"]: "960", "": "12.5"}, start=f"{today:%Y-%m-01}", end=f"{tomorrow}"),
            cost_request(start=f"{today:%Y-%m-01}", end=f"{tomorrow}"),
        )
        result = process(
            {"source": "aws.events", "detail-type": "Scheduled Event"},
            clients=replace(clients, ce=ce),
            settings={**settings, contract.ENV_POLICY_PATH: str(policy), contract.ENV_TEAM_SPEND: "daily"},
            now=NOW,
        )
        ce_stub.assert_no_pending_responses()
    stubbed.done()
    assert [set(r["teams"]) for r in result["spend"]] == [{WINDOW["team"], contract.UNTAGGED_TEAM}]
    assert result["run"]["bought"] == ["launch-load-test-202612101400-1"]
    return {
        (d["Namespace"], m["Name"], tuple(dims))
        for r in emf_records(capsys.readouterr().out)
        for d in r["_aws"]["CloudWatchMetrics"]
        for m in d["Metrics"]
        for dims in d["Dimensions"]
    }


def test_every_dashboard_draws_only_metrics_a_real_run_writes(functions, env, tmp_path, capsys):  # noqa: F811
    """The reclaim, organisation-usage and team dashboards: every metric drawn or searched, with
    its namespace and dimension names, is one that a reclaim tick or a capacity run (buying, and
    reading an active block, reading the day's spend) really writes."""
    _, _, dashboards = functions
    assert len(dashboards) >= 3  # reclaim, organisation usage, at least one team
    emitted = {
        (n, m, tuple(sorted(d)))
        for n, m, d in _emitted_by_a_reclaim_tick() | _emitted_by_a_capacity_run(env, tmp_path, capsys)
    }
    drawn = set()
    for body in dashboards:
        assert _drawn(body), body[:200]
        drawn |= {(n, m, tuple(sorted(d))) for n, m, d in _drawn(body)}
    assert drawn - emitted == set()
    assert {m for _, m, _ in drawn} >= {*contract.CAPACITY_CHARGEBACK_METRICS}  # fees, utilisation and spend are drawn
    usage = {(n, m, d) for body in dashboards for n, m, d in _drawn(body) if m in contract.USAGE_METRICS}
    assert {m for _, m, _ in usage} == set(contract.USAGE_METRICS)
    assert {(n, m, d) for n, m, d in emitted if m in contract.USAGE_METRICS} == {
        (contract.RECLAIM_NAMESPACE, m, contract.SHARE_DIMENSIONS) for m in contract.USAGE_METRICS
    }


def test_the_usage_report_reads_exactly_what_a_tick_writes():
    from constructs_lib.cli.usage import READ_METRICS, read_usage

    class Recorder:
        def get_metric_data(self, **request):
            self.request = request
            return {"MetricDataResults": []}

    recorder = Recorder()
    read_usage(
        recorder, load_model(), ["research"], datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)
    )
    read = {
        (
            q["MetricStat"]["Metric"]["Namespace"],
            q["MetricStat"]["Metric"]["MetricName"],
            tuple(d["Name"] for d in q["MetricStat"]["Metric"]["Dimensions"]),
        )
        for q in recorder.request["MetricDataQueries"]
    }
    emitted = {e for e in _emitted_by_a_reclaim_tick() if e[1] in READ_METRICS}
    assert read == emitted
    assert {e[1] for e in emitted} == {*contract.USAGE_METRICS, *contract.PROMISE_METRICS} - {
        contract.GUARANTEE_KEPT_PERCENT  # the dashboards' Average; the report sums the hours
    }


# --- HyperPod EKS pools: everything drawn and alarmed for them, their own observer writes -----------


def _read_for_pool(alarms, dashboards, pool: str) -> set[tuple[str, str]]:
    """(namespace, metric) of every alarm, explicit dashboard metric and search that names ``pool``."""
    read = {
        (a["Namespace"], a["MetricName"]) for a in alarms if {"Name": "Pool", "Value": pool} in a.get("Dimensions", [])
    }
    for body in dashboards:
        for namespace, name, rest in re.findall(r'\["(GpuGovernance/\w+)","(\w+)"((?:,"[^"]*")*)', body):
            values = re.findall(r'"([^"]*)"', rest)
            if dict(zip(values[0::2], values[1::2], strict=False)).get("Pool") == pool:
                read.add((namespace, name))
        read |= {
            (namespace, name)
            for namespace, name, searched in re.findall(
                r'\{(GpuGovernance/\w+),[\w,]+\} MetricName=\\"(\w+)\\" Pool=\\"([\w-]+)\\"', body
            )
            if searched == pool
        }
    return read


def _emitted_by_eks_ticks(pool, directory: Path) -> set[tuple[str, str]]:
    """What HyperPod EKS ticks write (namespace, metric) against the local Kubernetes API server:
    one that reads every team's ClusterQueue, and one the server refuses."""
    from gpu_governance_runtime.backends import kueue_usage
    from tests.hyperpod_eks.kube_api import Reply, cluster_queue, pages, serve, status_object
    from tests.hyperpod_eks.test_usage_observer import CREDENTIALS, eks_client

    api, stop = serve(directory)
    records: list = []
    target = {"pool": pool.name, "eks_cluster": "acme-hyperpod", "gpus_per_instance": dict.fromkeys(pool.capacity, 8)}
    try:
        for respond, succeeds in (
            (
                pages(
                    [
                        cluster_queue(
                            contract.hyperpod_cluster_queue(share.name),
                            cohort="c",
                            flavors={t: {"nominal": n * 8, "total": 0, "borrowed": 0} for t, n in share.quota.items()},
                        )
                        for share in pool.shares
                    ],
                    size=10,
                ),
                True,
            ),
            (lambda path, query, headers: Reply(401, status_object(401, "Unauthorized", "Unauthorized")), False),
        ):
            api.respond = respond
            eks, _ = eks_client(api)
            assert (
                kueue_usage.tick(
                    target,
                    pool,
                    eks=eks,
                    namespace=contract.RECLAIM_NAMESPACE,
                    now=1e9,
                    tick_seconds=60,
                    emit=records.append,
                    credentials=CREDENTIALS,
                )
                is succeeds
            )
    finally:
        stop()
    return {
        (d["Namespace"], m["Name"])
        for r in records
        if "_aws" in r
        for d in r["_aws"]["CloudWatchMetrics"]
        for m in d["Metrics"]
    }


def test_every_metric_read_for_a_hyperpod_eks_pool_is_one_its_observer_writes(functions, tmp_path):
    """Alarms and dashboards of the reference app's HyperPod EKS pool read only what an EKS tick
    (reading the cluster, or failing to) writes, and its waiting work and starvation are among them."""
    _, alarms, dashboards = functions
    reference = load_model()
    (eks_pool,) = [p.name for p in reference.pools if p.backend == contract.HYPERPOD_EKS]
    pool = parse_policy(json.loads(policy_json(reference))).pool(eks_pool)
    read = _read_for_pool(alarms, dashboards, eks_pool)
    written = _emitted_by_eks_ticks(pool, tmp_path)
    assert read - written == set()
    assert {(contract.RECLAIM_NAMESPACE, m) for m in ("Pending", "StarvedBelowGuarantee", contract.POOL_ERRORS)} <= read
