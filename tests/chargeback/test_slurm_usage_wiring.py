"""Slurm usage wired into the reclaim controller and read by the chargeback side: every
hyperpod_slurm pool with a head node (reclaimed, or observed for usage only) is read from Slurm
accounting, with SSM scoped to the head nodes; the organisation and team dashboards and the usage
report read the very names the Slurm observer writes. Synthesized once, with every compliance pack."""

from __future__ import annotations

import copy
import json
from datetime import UTC

import pytest
import yaml
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from constructs_lib.controllers.reclaim import ReclaimController, ReclaimTarget
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.organisation.chargeback import Chargeback
from constructs_lib.organisation.compliance import apply_standard_packs
from gpu_governance_runtime import contract
from gpu_governance_runtime.backends.hyperpod_slurm.usage import SlurmUsageObserver

P5, G5 = "ml.p5.48xlarge", "ml.g5.12xlarge"
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-fair-share"
RECLAIMED = ReclaimTarget(pool="slurm-a", head_node_instance_id="i-0123456789abcdef0", instance_type=P5)
OBSERVED = ReclaimTarget(pool="slurm-b", head_node_instance_id="mi-0123456789abcdef0", instance_type=G5)


def model() -> GovernanceModel:
    data = copy.deepcopy(yaml.safe_load(default_config_text()))
    data["pools"] += [
        {
            "name": "slurm-a",
            "backend": "hyperpod_slurm",
            "capacity": {P5: 4},
            "cluster_name": "ml-slurm-a",
            "gpus_per_instance": {P5: 8},
        },
        {
            "name": "slurm-b",
            "backend": "hyperpod_slurm",
            "capacity": {G5: 4},
            "cluster_name": "ml-slurm-b",
            "gpus_per_instance": {G5: 4},
        },
    ]
    data["teams"][0]["quotas"]["slurm-a"] = {P5: 2}
    data["teams"][0]["quotas"]["slurm-b"] = {G5: 2}
    return GovernanceModel.from_dict(data)


MODEL = model()
TEAM = MODEL.teams_in("slurm-b")[0].name


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = Stack(app, "Capacity", env=Environment(account="111122223333", region="us-east-1"))
    reclaim = ReclaimController(
        stack,
        "ReclaimController",
        model=MODEL,
        usage_targets=[OBSERVED],
        targets=[ReclaimTarget(pool="ec2-gpu", job_queue_arn=QUEUE), RECLAIMED],
    )
    Chargeback(stack, "Chargeback", model=MODEL, reclaim=reclaim)
    apply_standard_packs(app)
    app.synth()  # raises on any unacknowledged finding
    return Template.from_stack(stack)


def environment(template: Template) -> dict[str, str]:
    (function,) = [
        f
        for f in template.find_resources("AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "gpu_governance_runtime.reclaim.handler.handler"
    ]
    return function["Properties"]["Environment"]["Variables"]


def test_every_slurm_pool_with_a_head_node_is_read_from_accounting_with_its_gpus_per_instance(template):
    env = environment(template)
    assert json.loads(env[contract.ENV_USAGE_TARGETS]) == [
        {"pool": "slurm-a", "instance_id": "i-0123456789abcdef0", "instance_type": P5, "gpus_per_instance": 8},
        {"pool": "slurm-b", "instance_id": "mi-0123456789abcdef0", "instance_type": G5, "gpus_per_instance": 4},
    ]
    assert [t["pool"] for t in json.loads(env[contract.ENV_RECLAIM_TARGETS])] == [
        "ec2-gpu",
        "slurm-a",
    ]  # slurm-b is not reclaimed


def test_commands_go_only_to_the_head_nodes(template):
    (send,) = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "ssm:SendCommand"
    ]
    text = json.dumps(send["Resource"])
    assert len(send["Resource"]) == 3 and "*" not in text
    assert all(
        part in text
        for part in (
            "document/AWS-RunShellScript",
            "instance/i-0123456789abcdef0",
            "managed-instance/mi-0123456789abcdef0",
        )
    )


def test_an_observed_pool_alarms_when_unread_and_its_teams_dashboard_draws_its_hours(template):
    alarms = [a["Properties"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()]
    assert any(
        a.get("MetricName") == contract.POOL_ERRORS and a.get("Dimensions") == [{"Name": "Pool", "Value": "slurm-b"}]
        for a in alarms
    )
    bodies = {
        json.dumps(d["Properties"]["DashboardBody"])
        for d in template.find_resources("AWS::CloudWatch::Dashboard").values()
    }
    team_body = next(b for b in bodies if f"Team {TEAM} in pool slurm-b" in b)
    assert all(
        f'\\"{contract.RECLAIM_NAMESPACE}\\",\\"{m}\\",\\"Pool\\",\\"slurm-b\\",\\"Share\\",\\"{TEAM}\\"' in team_body
        for m in contract.USAGE_METRICS
    )


@pytest.mark.parametrize(
    "targets, usage_targets, message",
    [
        (
            [],
            [ReclaimTarget(pool="ec2-gpu", job_queue_arn=QUEUE)],
            "usage_targets[0].pool: a batch_fair_share pool ('ec2-gpu') - a hyperpod_slurm pool",
        ),
        ([RECLAIMED], [RECLAIMED], "usage_targets[0].pool: pool governed twice ('slurm-a')"),
        (
            [],
            [ReclaimTarget(pool="slurm-b", instance_type=G5)],
            "usage_targets[0].head_node_instance_id: missing (None)",
        ),
        (
            [],
            [ReclaimTarget(pool="slurm-b", head_node_instance_id="i-1", instance_type=P5)],
            "usage_targets[0].instance_type: not in the pool",
        ),
        ([], [], "targets: no pool to govern"),
    ],
)
def test_bad_usage_targets_are_refused_with_their_path(targets, usage_targets, message):
    with pytest.raises(GovernanceError) as error:
        ReclaimController(Stack(App(), "Bad"), "R", model=MODEL, targets=targets, usage_targets=usage_targets)
    assert message in str(error.value)


def test_the_usage_report_reads_exactly_what_the_slurm_observer_writes():
    """One definition of the names: the report's queries against a published Slurm hour."""
    from datetime import datetime

    from constructs_lib.cli.usage import read_usage
    from constructs_lib.model.policy import compile_policy
    from gpu_governance_runtime.policy import parse_policy

    class Recorder:
        def get_metric_data(self, **request):
            self.request = request
            return {"MetricDataResults": []}

    class Claims:
        def claim(self, key, *, now, reason):
            return True

        def record(self, key, *, status, detail=""):
            pass

    hour = 1796097600
    output = f"partition|{TEAM}|gpu-1\ndbd-queue|0\ngpu-seconds|{hour}|{TEAM}|{TEAM}||7200\ngg-end-of-usage\n"
    records: list = []
    SlurmUsageObserver(
        lambda commands: output,
        pool=parse_policy(compile_policy(MODEL)).pool("slurm-b"),
        instance_type=G5,
        gpus_per_instance=4,
        ledger=Claims(),
        namespace=contract.RECLAIM_NAMESPACE,
        emit=records.append,
        published={("slurm-b", hour - i * 3600) for i in range(1, 24)},
    ).observe(hour + 3600 + 600)
    written = {
        (d["Namespace"], m["Name"], tuple(dims))
        for r in records
        for d in r["_aws"]["CloudWatchMetrics"]
        for m in d["Metrics"]
        for dims in d["Dimensions"]
    }
    recorder = Recorder()
    read_usage(recorder, MODEL, [TEAM], datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))
    read = {
        (
            q["MetricStat"]["Metric"]["Namespace"],
            q["MetricStat"]["Metric"]["MetricName"],
            tuple(d["Name"] for d in q["MetricStat"]["Metric"]["Dimensions"]),
        )
        for q in recorder.request["MetricDataQueries"]
    }
    # the usage hours come from accounting, the guarantee's hours from the pool's tick (tests/contract)
    assert {q for q in read if q[1] in contract.USAGE_METRICS} == written
    assert {q[1] for q in read} - set(contract.USAGE_METRICS) == {
        contract.GUARANTEE_ASKED_HOURS,
        contract.GUARANTEE_BREACHED_HOURS,
    }
    assert any(r["Pool"] == "slurm-b" and r[contract.USED_HOURS] == 7200 / 4 / 3600 for r in records)
    queried = {
        tuple(d["Value"] for d in q["MetricStat"]["Metric"]["Dimensions"])
        for q in recorder.request["MetricDataQueries"]
    }
    assert ("slurm-b", TEAM) in queried
