"""The group tree in the policy document (SESSION wire format, issue 43 item 1): per pool, the
groups with a quota there, parents first, each naming its nearest ancestor in the list, its
direct member teams, and its limits; a borrowing limit for every type of the quota, 0 where the
file declares none (the reader takes an absent limit as none, the file's default is the quota as
the ceiling)."""

from __future__ import annotations

from pathlib import Path

from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import load_model
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime.planners.reclaim import ShareGroup
from gpu_governance_runtime.policy import parse_policy
from tests.hierarchy.test_group_tree_model import quota, tree
from tests.hierarchy.test_groups_model import data
from tests.slurm.models import INSTANCE_TYPE

NONE = {INSTANCE_TYPE: 0}  # the quota is the ceiling


def groups(model_groups) -> list[dict]:
    return compile_policy(GovernanceModel.from_dict(data(model_groups)))["pools"][0]["groups"]


def test_three_levels_parents_first_with_their_limits():
    # Listed children first: the document still lists each parent before its children.
    assert groups(list(reversed(tree()))) == [
        {"name": "lab", "shares": ["critical"], "quota": {INSTANCE_TYPE: 3}, "borrowing_limit": NONE},
        {
            "name": "vision",
            "shares": ["steady"],
            "quota": {INSTANCE_TYPE: 2},
            "parent": "lab",
            "borrowing_limit": {INSTANCE_TYPE: 1},
        },
        {
            "name": "perception",
            "shares": ["burst"],
            "quota": {INSTANCE_TYPE: 1},
            "parent": "vision",
            "borrowing_limit": NONE,
            "lending_limit": {INSTANCE_TYPE: 0},
        },
    ]


def test_a_level_without_a_quota_in_the_pool_is_skipped_and_its_teams_move_up():
    # vision has no quota here: perception's parent is lab, and steady is one of lab's shares.
    assert groups(tree(vision={"quotas": {}, "borrowing_limits": {}})) == [
        {"name": "lab", "shares": ["critical", "steady"], "quota": {INSTANCE_TYPE: 3}, "borrowing_limit": NONE},
        {
            "name": "perception",
            "shares": ["burst"],
            "quota": {INSTANCE_TYPE: 1},
            "parent": "lab",
            "borrowing_limit": NONE,
            "lending_limit": {INSTANCE_TYPE: 0},
        },
    ]


def test_a_group_of_groups_has_no_share_of_its_own():
    assert groups(tree(lab={"teams": []}, vision={"teams": ["steady", "critical"], "quotas": quota(3)}))[0] == {
        "name": "lab",
        "shares": [],
        "quota": {INSTANCE_TYPE: 3},
        "borrowing_limit": NONE,
    }


def test_a_declared_borrowing_limit_names_every_type_of_the_quota():
    two_types = {"ml.g5.12xlarge": 2, "ml.p5.48xlarge": 1}
    model = data(tree(vision={"quotas": {"research-slurm": two_types}, "borrowing_limits": quota(1)}))
    model["pools"][0]["capacity"]["ml.p5.48xlarge"] = 1
    model["pools"][0]["gpus_per_instance"]["ml.p5.48xlarge"] = 8
    model["groups"][0]["quotas"]["research-slurm"]["ml.p5.48xlarge"] = 1
    vision = compile_policy(GovernanceModel.from_dict(model))["pools"][0]["groups"][1]
    assert vision["borrowing_limit"] == {INSTANCE_TYPE: 1, "ml.p5.48xlarge": 0}


def test_a_one_level_group_says_its_quota_is_its_ceiling():
    """A file written before trees: its group keeps the quota as its ceiling, now said explicitly."""
    one = groups([{"name": "vision", "teams": ["steady", "burst"], "quotas": quota(2)}])
    assert one == [
        {"name": "vision", "shares": ["steady", "burst"], "quota": {INSTANCE_TYPE: 2}, "borrowing_limit": NONE}
    ]


def test_the_controller_reads_back_the_tree_the_library_writes():
    """The wire between the two sides (SESSION's format): examples/org-tree.yaml compiled by the
    library and parsed by the runtime gives the file's three levels on the pool the controller plans,
    each under its parent, with its declared limits and a ceiling of its quota where none is declared."""
    model = load_model(Path(__file__).resolve().parents[2] / "examples" / "org-tree.yaml")
    g6e = "g6e.12xlarge"
    assert parse_policy(compile_policy(model)).pool("ec2-gpu").groups == (
        ShareGroup(name="research-division", shares=("speech",), quota={g6e: 12}, borrowing_limit={g6e: 0}),
        ShareGroup(
            name="vision", shares=("mapping",), quota={g6e: 7}, parent="research-division", borrowing_limit={g6e: 0}
        ),
        ShareGroup(
            name="perception-group",
            shares=("perception",),
            quota={g6e: 4},
            parent="vision",
            borrowing_limit={g6e: 2},
        ),
    )
