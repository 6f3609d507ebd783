"""A group tree's Slurm plan without a cluster (issue 43, item 1): nested parent accounts, parents
first, each capped at its quota plus its borrowing limit, shares summed up the tree, the teams under
their nearest group; a plan without a tree keeps its digest (tests/slurm/test_tree_real_slurm.py
proves the tree on Slurm)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace

import pytest

from constructs_lib.backends.hyperpod_slurm.plan import slurm_plan
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime.slurm import SlurmGroupAccount, SlurmPlan, render_apply_script
from gpu_governance_runtime.slurm.render import plan_digest
from tests.hierarchy.test_group_tree_model import tree
from tests.hierarchy.test_groups_model import data
from tests.hierarchy.test_groups_slurm_plan import grouped
from tests.slurm.models import GPUS_PER_NODE, POOL

# lab (critical) > vision (steady; borrowing 1) > perception (burst); weights critical 50, steady 30, burst 20.
TREE = GovernanceModel.from_dict(data(list(reversed(tree()))))


def test_nested_parent_accounts_parents_first_each_capped_at_quota_plus_borrowing():
    assert slurm_plan(TREE, POOL).group_accounts == (
        SlurmGroupAccount(name="lab", fairshare=50 + 30 + 20, grp_gpus=3 * GPUS_PER_NODE),
        SlurmGroupAccount(name="vision", fairshare=30 + 20, grp_gpus=(2 + 1) * GPUS_PER_NODE, parent="lab"),
        SlurmGroupAccount(name="perception", fairshare=20, grp_gpus=1 * GPUS_PER_NODE, parent="vision"),
    )
    assert {a.name: a.parent for a in slurm_plan(TREE, POOL).accounts} == {
        "critical": "lab",
        "steady": "vision",
        "burst": "perception",
    }


def test_the_script_creates_each_level_under_its_parent_before_its_children():
    lines = render_apply_script(slurm_plan(TREE, POOL)).splitlines()
    accounts = [line for line in lines if line.startswith("gg_account ")]
    assert accounts[:4] == [
        "gg_account acme-ml root 1",
        "gg_account lab acme-ml 100",
        "gg_account vision lab 50",
        "gg_account perception vision 20",
    ]


def test_a_level_without_a_quota_in_the_pool_is_skipped():
    model = GovernanceModel.from_dict(data(tree(vision={"quotas": {}, "borrowing_limits": {}})))
    plan = slurm_plan(model, POOL)
    assert [(g.name, g.parent) for g in plan.group_accounts] == [("lab", None), ("perception", "lab")]
    assert {a.name: a.parent for a in plan.accounts}["steady"] == "lab"


def test_a_parent_group_account_must_be_in_the_plan():
    plan = slurm_plan(TREE, POOL)
    with pytest.raises(ValueError, match="account ghost"):
        SlurmPlan(
            **{
                **plan.__dict__,
                "group_accounts": (SlurmGroupAccount(name="x", fairshare=1, grp_gpus=1, parent="ghost"),),
            }
        )


def test_a_plan_without_a_tree_keeps_the_digest_it_had():
    """The digest before group trees: every field of the plan as dataclasses.asdict gives it."""
    plan = slurm_plan(grouped(), POOL)
    before = asdict(plan)
    for group in before["group_accounts"]:
        del group["parent"]
    canonical = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert plan_digest(plan) == hashlib.sha256(canonical.encode()).hexdigest()[:12]
    # a parent set is in the digest: moving a level moves the digest
    nested = slurm_plan(TREE, POOL)
    flat = replace(nested, group_accounts=tuple(replace(g, parent=None) for g in nested.group_accounts))
    assert plan_digest(nested) != plan_digest(flat)
