"""Groups of groups (issue 43, item 1): a tree to any depth through `parent`, what validate
refuses about it (path, value, what is allowed), and the borrowing and lending limits of a level."""

from __future__ import annotations

from typing import Any

from constructs_lib.model import GovernanceModel
from constructs_lib.model.projects import group_in_pool, groups_in_pool
from tests.hierarchy.test_groups_model import data, problems
from tests.slurm.models import INSTANCE_TYPE, POOL

OTHER_TYPE = "ml.p5.48xlarge"


def quota(n: int) -> dict[str, dict[str, int]]:
    return {POOL: {INSTANCE_TYPE: n}}


def tree(**changes: dict[str, Any]) -> list[dict[str, Any]]:
    """Three levels on the pool of 3: lab (critical and the vision department) > vision (steady and
    the perception team group) > perception (burst); ``changes`` update a group by name."""
    groups = [
        {"name": "lab", "teams": ["critical"], "quotas": quota(3)},
        {"name": "vision", "parent": "lab", "teams": ["steady"], "quotas": quota(2), "borrowing_limits": quota(1)},
        {"name": "perception", "parent": "vision", "teams": ["burst"], "quotas": quota(1), "lending_limits": quota(0)},
    ]
    return [{**g, **changes.get(g["name"], {})} for g in groups]


def test_a_three_level_tree_is_accepted_and_read_parents_first():
    # Listed children first: the order the file gives does not matter.
    model = GovernanceModel.from_dict(data(list(reversed(tree()))))
    assert [(g.name, p and p.name) for g, p in groups_in_pool(model.groups, POOL)] == [
        ("lab", None),
        ("vision", "lab"),
        ("perception", "vision"),
    ]
    lab = next(g for g in model.groups if g.name == "lab")
    assert model.members_quota(lab, POOL) == {INSTANCE_TYPE: 3}  # critical 1 + vision 2
    assert group_in_pool(model.groups, "burst", POOL).name == "perception"


def test_a_group_without_a_quota_in_the_pool_passes_its_members_to_its_parent():
    # vision has no quota there: steady and perception count against lab directly.
    model = GovernanceModel.from_dict(data(tree(vision={"quotas": {}, "borrowing_limits": {}})))
    lab = next(g for g in model.groups if g.name == "lab")
    assert model.members_quota(lab, POOL) == {INSTANCE_TYPE: 3}  # critical 1 + steady 1 + perception 1
    assert [(g.name, p and p.name) for g, p in groups_in_pool(model.groups, POOL)][1] == ("perception", "lab")
    assert group_in_pool(model.groups, "steady", POOL).name == "lab"


def test_an_unknown_parent_is_refused_naming_it():
    found = problems(tree(perception={"parent": "ghost"}))
    assert found == [
        "groups[2].parent: undeclared group ('ghost') - one of ['lab', 'vision']",
    ]


def test_a_group_that_is_its_own_parent_is_refused():
    found = problems(tree(lab={"parent": "lab"}))
    assert found == ["groups[0].parent: the group itself ('lab') - another group"]


def test_a_cycle_is_refused_naming_it():
    found = problems(tree(lab={"parent": "perception"}))
    assert "groups[0].parent: makes a cycle (lab -> perception -> vision -> lab) ('perception')" in found[0]
    assert len(found) == 3  # each group of the cycle
    assert all("a group that is not one of its own descendants" in p for p in found)


def test_a_group_without_team_or_child_is_refused():
    found = problems([*tree(), {"name": "empty", "teams": []}])
    assert found == [
        "groups[3].teams: no team, and no group names it as parent ([]) - at least one team, or a child group "
        "(another group's parent)"
    ]


def test_a_group_of_groups_needs_no_team():
    # four levels: all (no team, no quota here) > lab > vision > perception
    model = GovernanceModel.from_dict(data([*tree(lab={"parent": "all"}), {"name": "all"}]))
    assert model.groups[-1].teams == ()
    assert [g.name for g, p in groups_in_pool(model.groups, POOL) if p is None] == ["lab"]


def test_a_quota_below_its_child_groups_quotas_is_refused():
    # lab: critical 1 + vision 2 = 3, declared 2.
    found = problems(tree(lab={"quotas": quota(2)}))
    assert found == [
        f"groups[0].quotas.{POOL}.{INSTANCE_TYPE}: less than its teams' and child groups' quotas together (3) (2) - "
        "at least 3, or smaller team or child group quotas"
    ]


def test_only_the_top_of_a_tree_counts_against_the_pool():
    # 3 on a pool of 3 fits (the children are inside lab's 3); a fourth instance does not.
    GovernanceModel.from_dict(data(tree(), capacity=3))
    found = problems(tree(lab={"quotas": quota(4)}), capacity=3)
    assert len(found) == 1 and "pools[0].capacity" in found[0] and "guaranteed 4" in found[0]


def test_limits_on_a_pool_without_a_group_quota_are_refused():
    found = problems(tree(vision={"borrowing_limits": {"nowhere": {INSTANCE_TYPE: 1}}}))
    assert found == [
        "groups[1].borrowing_limits.nowhere: a pool the group has no quota in ('nowhere') - "
        f"one of the group's quota pools ['{POOL}']"
    ]
    found = problems(tree(vision={"borrowing_limits": {}, "lending_limits": {POOL: {OTHER_TYPE: 1}}}))
    assert found == [
        f"groups[1].lending_limits.{POOL}.{OTHER_TYPE}: an instance type the group has no quota of ('{OTHER_TYPE}') - "
        f"one of ['{INSTANCE_TYPE}']"
    ]


def test_a_lending_limit_above_the_quota_is_refused():
    found = problems(tree(perception={"lending_limits": quota(2)}))
    assert found == [
        f"groups[2].lending_limits.{POOL}.{INSTANCE_TYPE}: more than the group's quota (1) (2) - 0 to 1: a group "
        "lends at most its own quota"
    ]


def test_a_negative_limit_is_refused():
    found = problems(tree(vision={"borrowing_limits": quota(-1)}))
    assert len(found) == 1 and f"groups[1].borrowing_limits.{POOL}.{INSTANCE_TYPE}" in found[0]
