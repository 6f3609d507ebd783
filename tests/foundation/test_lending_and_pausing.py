"""Lending limits, paused teams and the settings a backend ignores (issue 28): the model, the
compiled policy, `validate` and `explain`."""

from __future__ import annotations

import pytest
import yaml

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats, deals
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime.policy import PolicyError, parse_policy

from .org import default_data


def model_with(**team_changes) -> GovernanceModel:
    data = default_data()
    for index, changes in team_changes.items():
        data["teams"][int(index.removeprefix("t"))].update(changes)
    return GovernanceModel.from_dict(data)


def test_a_lending_limit_reaches_the_controllers_policy_and_the_planner():
    model = model_with(t1={"sharing": {"lending_limit": 25}}, t0={"paused": True})
    policy = parse_policy(compile_policy(model))
    shares = {s.name: s for s in policy.pool("ec2-gpu").shares}
    assert (shares["training"].lending_limit, shares["training"].paused) == (25, False)
    assert (shares["research"].lending_limit, shares["research"].paused) == (None, True)


@pytest.mark.parametrize(
    "sharing, expected",
    [
        (
            {"strategy": "reserve", "lending_limit": 50},
            "lending_limit is only allowed with strategy lend or lend_and_borrow",
        ),
        ({"lending_limit": 101}, "teams[1].sharing.lending_limit: invalid (101)"),
        ({"lending_limit": -1}, "teams[1].sharing.lending_limit: invalid (-1)"),
    ],
)
def test_a_bad_lending_limit_is_refused_naming_the_field(sharing, expected):
    data = default_data()
    data["teams"][1]["sharing"] = sharing
    data["teams"][1].pop("preset")
    sharing.setdefault("strategy", "lend")
    with pytest.raises(GovernanceError) as error:
        GovernanceModel.from_dict(data)
    assert expected in str(error.value)


def test_paused_must_be_true_or_false():
    with pytest.raises(GovernanceError, match=r"teams\[0\].paused"):
        model_with(t0={"paused": "soon"})


def test_the_policy_reader_refuses_a_bad_lending_limit_or_paused_flag():
    document = compile_policy(model_with())
    share = document["pools"][0]["shares"][0]
    share.update(lending_limit=150, paused="yes")
    with pytest.raises(PolicyError) as error:
        parse_policy(document)
    assert "pools[0].shares[0].lending_limit: 150" in str(error.value)
    assert "pools[0].shares[0].paused: 'yes'" in str(error.value)


def test_each_backend_that_cannot_hold_back_lent_capacity_is_named_in_one_line():
    lines = caveats(model_with(t1={"sharing": {"lending_limit": 50}}))
    limited = [line for line in lines if ".lending_limit" in line]
    assert [line.split(" (")[0].rsplit(" ", 1)[-1] for line in limited] == [
        "sagemaker-training",
        "ec2-gpu",
        "hyperpod-eks",
    ]
    assert all(line.startswith("teams[1].sharing.lending_limit: ") for line in limited)
    assert not [line for line in limited if "hyperpod-slurm" in line]  # the reclaim controller holds it back there


def test_a_paused_team_on_a_fair_share_queue_is_named_and_explain_shows_the_state():
    model = model_with(t0={"paused": True})
    assert "teams[0].paused: not enforced on pool ec2-gpu (batch_fair_share)" in "\n".join(caveats(model))
    states = {(d.team, d.pool): d.state for d in deals(model)}
    assert states["research", "sagemaker-training"] == "paused" and states["training", "sagemaker-training"] == "active"


def test_a_fair_share_weight_on_a_quota_share_pool_is_said_to_do_nothing(capsys, tmp_path):
    data = default_data()
    path = tmp_path / "governance.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "fair_share_weight" not in out  # every team also has pools that weigh it
    data["teams"][0]["quotas"] = {"sagemaker-training": data["teams"][0]["quotas"]["sagemaker-training"]}
    data["teams"][0].pop("kubernetes", None)
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("valid: ") and err == ""
    assert (
        "warning: teams[0].fair_share_weight: does nothing: the team's pools (sagemaker-training) are quota-share queues"
        in out
    )
    for team in data["teams"]:
        team.pop("fair_share_weight")
    path.write_text(yaml.safe_dump(data))
    assert main(["explain", "--config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "note: teams[1].sharing.lending_limit" in err and "note:" not in out
    assert "fair_share_weight" not in err  # the default weight is not the team's choice


def test_explain_shows_what_a_lending_limit_lends():
    model = model_with(t1={"sharing": {"lending_limit": 50}})
    lent = {d.pool: d.lends_idle for d in deals(model) if d.team == "training"}
    assert lent["hyperpod-slurm"] == "at most 1 x ml.p5.48xlarge"
    assert lent["sagemaker-training"] == "yes, all (lending_limit not enforceable here)"


def test_the_discovery_document_says_the_team_is_paused_and_an_older_one_still_reads():
    from constructs_lib.member.discovery import describe
    from constructs_lib.member.setup import TeamSetup

    model = model_with(t0={"paused": True})
    document = describe(model, "research", "ec2-gpu")
    assert document["state"] == "paused" and describe(model, "training", "ec2-gpu")["state"] == "active"
    assert TeamSetup.from_document(document).state == "paused"
    older = {key: value for key, value in document.items() if key != "state"}  # published before issue 28
    assert TeamSetup.from_document(older).state is None


def test_the_preset_table_and_the_critical_reading_in_the_docs_match_the_code():
    from pathlib import Path

    from constructs_lib.model.teams import PRESET_SHARING

    root = Path(__file__).resolve().parents[2]
    rows = {
        cells[1].strip("` "): cells
        for line in (root / "README.md").read_text().splitlines()
        if line.startswith("| `") and len(cells := line.split("|")) > 5
    }
    for preset, sharing in PRESET_SHARING.items():
        assert rows[preset.value][2].strip() == sharing.strategy.value.replace("_", " "), preset
        assert rows[preset.value][4].strip() == ("on" if sharing.in_share_preemption else "off"), preset
    guide = (root / "docs" / "governance-file.md").read_text()
    assert "immediate start without interruption" in guide and "sharing: {in_share_preemption: false}" in guide


def test_a_critical_team_is_interrupted_only_by_its_own_strictly_more_urgent_job():
    from constructs_lib.model.teams import Preset
    from gpu_governance_runtime.planners.reclaim import PendingJob, PoolState, RunningJob, Share, Strategy, plan_tick

    critical = Preset.CRITICAL.sharing
    shares = (
        Share(
            name="prod", quota={"p5": 4}, strategy=critical.strategy, in_share_preemption=critical.in_share_preemption
        ),
        Share(name="lab", quota={"p5": 2}, strategy=Strategy.LEND_AND_BORROW),
    )
    running = (
        RunningJob(job_id="batch", share="prod", instance_type="p5", count=2, priority=10, started_at=0),
        RunningJob(job_id="urgent-1", share="prod", instance_type="p5", count=2, priority=90, started_at=0),
        RunningJob(job_id="lab-1", share="lab", instance_type="p5", count=2, priority=90, started_at=0),
    )
    pending = (
        PendingJob(job_id="urgent-2", share="prod", instance_type="p5", count=2, priority=90, submitted_at=1),
        PendingJob(job_id="lab-2", share="lab", instance_type="p5", count=2, priority=90, submitted_at=0),
    )
    plan = plan_tick(PoolState(capacity={"p5": 6}, shares=shares, running=running, pending=pending, now=100.0))
    # the urgent job starts at once by taking the team's own batch job; its equal-priority job and
    # everything of the critical team stay out of reach of the other team
    assert [(p.job_id, p.kind) for p in plan.preemptions] == [("batch", "in_share")]
    assert [s.job_id for s in plan.starts] == ["urgent-2"]
