"""The reference organisation (dedicated instance groups, capacity windows, every backend) in
both stack layouts: the same resources with the same logical ids, only the stacks differ."""

import json

import pytest
import yaml

from constructs_lib.cli.report import summarise
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.organisation.limits import estimate

from .test_limits import resources_by_stack, run_app


def synthesize(tmp_path_factory, layout: str):
    data = yaml.safe_load(default_config_text())
    data["stack_layout"] = layout
    tmp = tmp_path_factory.mktemp(layout)
    result = run_app(tmp, data)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, tmp / "out"


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return synthesize(tmp_path_factory, "single")


@pytest.fixture(scope="module")
def per_team(tmp_path_factory):
    return synthesize(tmp_path_factory, "per_team")


def resource_ids(outdir, pattern: str) -> set[str]:
    return {lid for path in outdir.glob(pattern) for lid in json.loads(path.read_text())["Resources"]}


def test_single_is_the_default_and_keeps_one_capacity_stack(single):
    data, outdir = single
    assert GovernanceModel.from_dict({k: v for k, v in data.items() if k != "stack_layout"}).stack_layout == "single"
    assert sorted(p.name for p in outdir.glob("*.template.json")) == [
        "acme-ml-capacity.template.json",
        "acme-ml-consumer-product.template.json",
        "acme-ml-consumer-research.template.json",
    ]
    (stack,) = estimate(GovernanceModel.from_dict(data))
    assert resources_by_stack(outdir)[stack.name] <= stack.resources


def test_per_team_holds_the_same_resources_under_the_same_logical_ids(single, per_team):
    """What moves is the stack, not the logical id: CloudFormation stack refactoring can move an
    existing organisation's resources from one layout to the other by these ids."""
    teams = [t["name"] for t in per_team[0]["teams"]]
    assert sorted(p.name for p in per_team[1].glob("acme-ml-team-*.template.json")) == sorted(
        f"acme-ml-team-{t}.template.json" for t in teams
    )
    capacity_ids = resource_ids(single[1], "acme-ml-capacity.template.json")
    assert (
        resource_ids(per_team[1], "acme-ml-capacity.template.json")
        | resource_ids(per_team[1], "acme-ml-team-*.template.json")
        == capacity_ids
    )


def test_per_team_is_clean_under_every_pack(per_team):
    assert summarise(per_team[1]).open_findings == []


def test_the_submission_guard_is_deployed_in_both_layouts_without_a_cycle(single, per_team):
    """The guard's owner topics go with the team's resources; the capacity stack names them by ARN,
    so no capacity stack output or reference points at a team stack (which depends on it)."""
    teams = [
        t
        for t in per_team[0]["teams"]
        if t.get("owner")
        and any(p["backend"] == "batch_quota_share" for p in per_team[0]["pools"] if p["name"] in t["quotas"])
    ]
    assert teams  # the reference has a quota-share team with an owner
    for data, outdir in (single, per_team):
        capacity = json.loads((outdir / "acme-ml-capacity.template.json").read_text())
        assert any(
            r["Type"] == "AWS::Lambda::Function"
            and r["Properties"]["Handler"] == "gpu_governance_runtime.guard.handler.handler"
            for r in capacity["Resources"].values()
        ), data["stack_layout"]
    manifest = json.loads((per_team[1] / "manifest.json").read_text())["artifacts"]
    assert not [d for d in manifest["acme-ml-capacity"].get("dependencies", []) if d.startswith("acme-ml-team-")]
    capacity_text = (per_team[1] / "acme-ml-capacity.template.json").read_text()
    assert "Fn::ImportValue" not in capacity_text and "Fn::GetStackOutput" not in capacity_text
    for team in teams:
        template = json.loads((per_team[1] / f"acme-ml-team-{team['name']}.template.json").read_text())
        names = {
            r["Properties"].get("TopicName") for r in template["Resources"].values() if r["Type"] == "AWS::SNS::Topic"
        }
        assert f"acme-ml-gpu-guard-{team['name']}" in names


def test_team_scope_answers_an_owner_again_without_a_round_trip_through_jsii(monkeypatch):
    """The same few owners ask team_scope for every team, and each question used to read paths
    across jsii (about 80 round trips per team at 1,000 teams, docs/performance.md)."""
    from aws_cdk import App
    from jsii._kernel.providers import process

    from constructs_lib.core.placement import team_scope
    from constructs_lib.deployment.reference import build_capacity_account

    data = yaml.safe_load(default_config_text())
    data["stack_layout"] = "per_team"
    model = GovernanceModel.from_dict(data)
    capacity, *team_stacks = build_capacity_account(App(), model)
    owner, team_stack = capacity.reclaim_controller, team_stacks[-1]
    first = team_scope(owner, team_stack.team_name)  # as every pool construct asks

    sent = []
    send = process._NodeProcess.send
    monkeypatch.setattr(process._NodeProcess, "send", lambda self, *args: sent.append(args[0]) or send(self, *args))
    again = team_scope(owner, team_stack.team_name)
    monkeypatch.undo()

    assert sent == [] and again is first
    assert first.node.path == f"{team_stack.node.path}/ReclaimController"  # the owner's path, in the team's stack
