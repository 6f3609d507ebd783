"""The generated 200-team organisation (examples/org-200-teams.yaml): synthesized by app.py with
every compliance pack, within every limit, cfn-lint clean on a sample, and a team added to it
changes nothing of the other teams."""

import json
from pathlib import Path

import pytest
import yaml

from constructs_lib.cli.report import summarise
from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.limits import check_assembly, estimate

from .generate import organisation, team
from .test_limits import ROOT, run_app

pytestmark = pytest.mark.slow  # two syntheses of 45 to 90 s each on the shared 2-core machine

TEAMS = 200


def templates(outdir: Path) -> dict[str, dict]:
    return {p.name.removesuffix(".template.json"): json.loads(p.read_text()) for p in outdir.glob("*.template.json")}


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("before")
    data = organisation(TEAMS)
    result = run_app(tmp, data)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, tmp / "out"


@pytest.fixture(scope="module")
def after(tmp_path_factory, before):
    """The same organisation with one more team, inserted in the middle of the list: stacks are
    keyed by team name, never by position."""
    tmp = tmp_path_factory.mktemp("after")
    data = yaml.safe_load(yaml.safe_dump(before[0]))
    newcomer = team(TEAMS)  # on a new quota-share pool: the existing ones hold 20 shares each
    newcomer["name"] = "team-newcomer"
    data["teams"].insert(TEAMS // 2, newcomer)
    data["pools"].insert(0, {"name": "training-10", "backend": "batch_quota_share", "capacity": {"ml.p5.48xlarge": 20}})
    for pool in data["pools"]:
        if pool["name"] in ("ec2-gpu", "hyperpod-eks", "hyperpod-slurm"):
            pool["capacity"] = {k: TEAMS + 1 for k in pool["capacity"]}
    result = run_app(tmp, data)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, tmp / "out"


def test_the_example_is_what_the_generator_makes():
    example = yaml.safe_load((ROOT / "examples" / "org-200-teams.yaml").read_text())
    assert example == organisation(TEAMS)


def test_synthesizes_clean_under_every_pack_and_within_every_limit(before):
    _, outdir = before
    summary = summarise(outdir)
    assert summary.open_findings == []
    assert len(templates(outdir)) == 1 + TEAMS + 5
    assert check_assembly(outdir) == []


def test_the_estimate_covers_every_stack(before):
    """What `validate` said before synthesis holds for each of the 201 capacity-account stacks."""
    data, outdir = before
    for stack in estimate(GovernanceModel.from_dict(data)):
        template = outdir / f"{stack.name}.template.json"
        assert len(json.loads(template.read_text())["Resources"]) <= stack.resources, stack
        assert template.stat().st_size <= stack.template_bytes, stack


def test_cfn_lint_is_clean_on_the_shared_stack_and_a_team_stack(before):
    """cfn-lint takes seconds per template: the shared stack and one team stack (all team
    stacks come from the same code) stand for the 206."""
    from cfnlint.api import lint

    _, outdir = before
    for name in ("scale-ml-capacity", "scale-ml-team-team-123"):
        matches = lint((outdir / f"{name}.template.json").read_text(), regions=["us-east-1"])
        assert [str(m) for m in matches if m.rule.id.startswith("E")] == [], name


def test_a_team_added_changes_only_its_own_resources(before, after):
    old, new = templates(before[1]), templates(after[1])
    assert set(new) - set(old) == {"scale-ml-team-team-newcomer"}
    team_stacks = [name for name in old if "-team-" in name]
    assert len(team_stacks) == TEAMS
    assert [name for name in team_stacks if new[name] != old[name]] == []
    # Consumer stacks: the newcomer's account gains its resources; nothing else moves.
    for name in (n for n in old if "-consumer-" in n):
        for logical_id, resource in old[name]["Resources"].items():
            assert new[name]["Resources"][logical_id] == resource, (name, logical_id)
        assert all("newcomer" in lid for lid in set(new[name]["Resources"]) - set(old[name]["Resources"]))
    # The shared stack holds no team's own resource, keeps every resource and every export the
    # team stacks import; only shared settings that list the teams change.
    shared_old, shared_new = old["scale-ml-capacity"], new["scale-ml-capacity"]
    assert set(shared_old["Resources"]) <= set(shared_new["Resources"])
    team_names = {t["name"].replace("-", "") for t in before[0]["teams"]}
    assert not [lid for lid in shared_new["Resources"] if any(name in lid.lower() for name in team_names)]
    exports = lambda t: {k: v for k, v in t.get("Outputs", {}).items() if "Export" in v}  # noqa: E731
    assert exports(shared_old).items() <= exports(shared_new).items()
