"""Groups of teams (a quota above the team): how the governance file declares them, what it
refuses, and where `explain` and `audit` show a team's place in the hierarchy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import deals
from constructs_lib.model.loader import load_model
from constructs_lib.organisation.audit import audit
from tests.slurm.models import INSTANCE_TYPE, POOL, model_data

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "org-groups.yaml"


def data(groups: list[dict[str, Any]], capacity: int = 3) -> dict[str, Any]:
    return {**model_data(capacity=capacity), "groups": groups}


def problems(groups: list[dict[str, Any]], capacity: int = 3) -> list[str]:
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data(groups, capacity))
    return [str(p) for p in raised.value.problems]


def test_a_group_holds_its_teams_and_its_quota():
    model = GovernanceModel.from_dict(
        data([{"name": "vision", "teams": ["steady", "burst"], "quotas": {POOL: {INSTANCE_TYPE: 2}}}])
    )
    assert model.group_of("burst").name == "vision"
    assert model.group_of("critical") is None
    assert model.members_quota(model.groups[0], POOL) == {INSTANCE_TYPE: 2}


def test_undeclared_team_is_refused_naming_it():
    found = problems([{"name": "vision", "teams": ["steady", "ghost"]}])
    assert (
        len(found) == 1 and "groups[0].teams[1]" in found[0] and "ghost" in found[0] and "undeclared team" in found[0]
    )


def test_team_in_two_groups_is_refused():
    found = problems([{"name": "vision", "teams": ["steady"]}, {"name": "speech", "teams": ["burst", "steady"]}])
    assert len(found) == 1 and "groups[1].teams[1]" in found[0] and "already in group vision" in found[0]


def test_group_quota_below_its_teams_quotas_is_refused():
    found = problems([{"name": "vision", "teams": ["steady", "burst"], "quotas": {POOL: {INSTANCE_TYPE: 1}}}])
    assert len(found) == 1
    assert (
        f"groups[0].quotas.{POOL}.{INSTANCE_TYPE}" in found[0]
        and "less than its teams' and child groups' quotas together (2)" in found[0]
        and "at least 2" in found[0]
    )


def test_group_quota_must_fit_the_pool_with_the_teams_outside():
    # 3 for vision + 1 for critical on a pool of 3.
    found = problems([{"name": "vision", "teams": ["steady", "burst"], "quotas": {POOL: {INSTANCE_TYPE: 3}}}])
    assert len(found) == 1 and "pools[0].capacity" in found[0] and "guaranteed 4" in found[0]


def test_group_quota_on_unknown_pool_or_type_is_refused():
    found = problems(
        [
            {
                "name": "vision",
                "teams": ["steady"],
                "quotas": {"nowhere": {INSTANCE_TYPE: 1}, POOL: {"ml.p5.48xlarge": 1}},
            }
        ]
    )
    assert any("groups[0].quotas.nowhere" in p and "undeclared pool" in p for p in found)
    assert any(
        f"groups[0].quotas.{POOL}.ml.p5.48xlarge" in p and "no capacity of this instance type" in p for p in found
    )


def test_group_named_like_a_team_is_refused():
    found = problems([{"name": "Steady", "teams": ["burst"]}])
    assert len(found) == 1 and "groups[0].name" in found[0] and "also a team's name" in found[0]


def test_duplicate_group_names_are_refused():
    found = problems([{"name": "vision", "teams": ["burst"]}, {"name": "vision", "teams": ["steady"]}])
    assert any("groups[1].name" in p and "duplicate name" in p for p in found)


def test_explain_and_audit_show_the_place_in_the_hierarchy():
    model = GovernanceModel.from_dict(
        data([{"name": "vision", "teams": ["steady", "burst"], "quotas": {POOL: {INSTANCE_TYPE: 2}}}])
    )
    by_team = {d.team: d for d in deals(model)}
    assert by_team["burst"].group == f"vision: 2 x {INSTANCE_TYPE} shared with steady"
    assert by_team["critical"].group == "-"
    workload = [row.can for row in audit(model) if row.team == "burst" and row.layer == "workload"]
    assert workload and f"in group vision: 2 x {INSTANCE_TYPE} shared with steady" in workload[0]


def test_the_example_organisation_declares_a_group_quota(tmp_path: Path):
    model = load_model(EXAMPLE)
    vision = next(g for g in model.groups if g.name == "vision")
    assert any(vision.quotas.values())
    result = subprocess.run(
        [sys.executable, "-m", "constructs_lib.cli", "explain", "--config", str(EXAMPLE)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "vision:" in result.stdout


def test_validate_reports_a_bad_group_in_one_line_exit_2(tmp_path: Path):
    text = EXAMPLE.read_text().replace("teams: [perception, mapping]", "teams: [perception, nobody]")
    assert "nobody" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "constructs_lib.cli", "validate", "--config", str(bad)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "groups[0].teams[1]" in result.stderr + result.stdout and "nobody" in result.stderr + result.stdout


def test_a_group_quota_missing_a_type_its_teams_hold_is_refused():
    text = EXAMPLE.read_text().replace("      ec2-gpu: {g6e.12xlarge: 8}\n", "      ec2-gpu: {}\n")
    data = yaml.safe_load(text)
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    found = [str(p) for p in raised.value.problems]
    assert (
        len(found) == 1
        and "groups[0].quotas.ec2-gpu" in found[0]
        and "no quota of g6e.12xlarge, which its teams or child groups hold (6)" in found[0]
    )
