"""Where a group tree is held (issue 43, item 1): `validate` and `explain` say per pool who holds it
(Slurm's account tree, Kueue's cohorts, the reclaim controller) and warn, per field, where a
level's parent or limits are not held (Batch quota shares, HyperPod EKS; a lending limit on Slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from constructs_lib.cli.main import main
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats, deals, group_notes
from constructs_lib.model.loader import default_config_text, load_model

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "examples" / "org-tree.yaml"


def test_the_three_level_example_is_valid_and_validate_says_who_holds_each_pools_tree(capsys):
    assert main(["validate", "--config", str(TREE)]) == 0
    out = capsys.readouterr().out
    tree = "groups research-division, vision (in research-division), perception-group (in vision) are held by"
    assert f"note: pools[0] hyperpod-slurm (hyperpod_slurm): {tree} Slurm's account tree" in out
    assert f"note: pools[1] ec2-gpu (batch_fair_share): {tree} the reclaim controller's planner" in out
    # Slurm cannot lend less than all of an idle account's nodes: the one warning about the tree.
    warnings = [line for line in out.splitlines() if line.startswith("warning: groups[")]
    assert warnings == [
        "warning: groups[1].lending_limits.hyperpod-slurm: not held by Slurm on pool hyperpod-slurm (hyperpod_slurm): "
        "an account has no lending limit, and the group's idle nodes are in the borrow partition for every borrower; "
        "only the reclaim controller's planner holds it, where it governs the pool (head_node)"
    ]


def test_explain_json_carries_the_notes_too(capsys):
    assert main(["explain", "--config", str(TREE), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("pools[1] ec2-gpu (batch_fair_share): groups research-division") for n in notes)
    assert any(n.startswith("groups[1].lending_limits.hyperpod-slurm: not held by Slurm") for n in notes)


def test_explain_shows_each_teams_place_up_the_tree():
    places = {(d.team, d.pool): d.group for d in deals(load_model(TREE))}
    assert places["perception", "ec2-gpu"] == (
        "perception-group: 4 x g6e.12xlarge shared with no other team; "
        "within vision (7 x g6e.12xlarge) within research-division (12 x g6e.12xlarge)"
    )
    assert places["mapping", "ec2-gpu"] == (
        "vision: 7 x g6e.12xlarge shared with perception-group; within research-division (12 x g6e.12xlarge)"
    )
    assert places["speech", "ec2-gpu"] == "research-division: 12 x g6e.12xlarge shared with vision"


def test_where_no_level_above_the_team_exists_every_declared_part_of_the_tree_is_warned_about():
    data = yaml.safe_load(default_config_text())
    quotas = {"sagemaker-training": {"ml.p5.48xlarge": 6, "ml.g6e.12xlarge": 12}}
    data["groups"] = [
        {"name": "lab", "quotas": quotas, "lending_limits": {"sagemaker-training": {"ml.p5.48xlarge": 1}}},
        {
            "name": "vision",
            "parent": "lab",
            "teams": ["research", "training"],
            "quotas": quotas,
            "borrowing_limits": {"sagemaker-training": {"ml.p5.48xlarge": 1}},
        },
    ]
    model = GovernanceModel.from_dict(data)
    lines = [line.split(":")[0] for line in caveats(model) if line.startswith("groups[")]
    assert lines == [
        "groups[0].quotas.sagemaker-training",
        "groups[0].lending_limits.sagemaker-training",
        "groups[1].quotas.sagemaker-training",
        "groups[1].parent",
        "groups[1].borrowing_limits.sagemaker-training",
    ]
    assert all("quota share" in line for line in caveats(model) if line.startswith("groups["))
    assert group_notes(model) == [
        "pools[0] sagemaker-training (batch_quota_share): groups lab, vision (in lab) are held by nobody (see the warnings)"
    ]


def test_a_file_without_groups_has_no_group_note():
    assert group_notes(GovernanceModel.from_dict(yaml.safe_load(default_config_text()))) == []
