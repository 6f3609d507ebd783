"""A group tree three levels deep on a real Slurm (issue 43, item 1): a parent account per group
under its parent group's, the teams under their nearest group, each level capped at its quota
plus its borrowing limit (GrpTRES), and a team's job held by a limit two levels above it."""

from __future__ import annotations

import pytest

from constructs_lib.model import GovernanceModel

from .cluster import Cluster, governed_cluster, run
from .models import GPUS_PER_NODE, INSTANCE_TYPE, POOL, governance_model, model_data
from .test_groups_real_slurm import associations

pytestmark = pytest.mark.slurm


def one(n: int) -> dict[str, dict[str, int]]:
    return {POOL: {INSTANCE_TYPE: n}}


def tree_model() -> GovernanceModel:
    """lab > vision (critical) > perception (burst); steady outside. perception may hold 2 nodes
    (quota 1, borrowing 1) and lab 3, but vision only its quota of 2: burst's grandparent account."""
    return GovernanceModel.from_dict(
        {
            **model_data(),
            "groups": [
                {
                    "name": "perception",
                    "parent": "vision",
                    "teams": ["burst"],
                    "quotas": one(1),
                    "borrowing_limits": one(1),
                },
                {"name": "vision", "parent": "lab", "teams": ["critical"], "quotas": one(2)},
                {"name": "lab", "quotas": one(2), "borrowing_limits": one(1)},
            ],
        }
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = governed_cluster(tmp_path_factory.mktemp("tree"))
    cluster.apply(tree_model())
    yield cluster
    cluster.cancel_all()
    cluster.apply(governance_model())  # the other modules' flat organisation


def test_the_tree_is_nested_parent_accounts_each_capped_and_reapplying_changes_nothing(cluster: Cluster) -> None:
    tree = associations()
    assert tree["lab"] == ("acme-ml", f"gres/gpu={3 * GPUS_PER_NODE}")
    assert tree["vision"] == ("lab", f"gres/gpu={2 * GPUS_PER_NODE}")
    assert tree["perception"] == ("vision", f"gres/gpu={2 * GPUS_PER_NODE}")
    assert tree["burst"][0] == "perception" and tree["critical"][0] == "vision" and tree["steady"][0] == "acme-ml"
    assert cluster.apply(tree_model()).changed == 0


def test_a_job_beyond_the_grandparents_limit_waits(cluster: Cluster) -> None:
    cluster.cancel_all()
    cluster.wait_running(
        cluster.submit("carol", account="burst", partition="burst", qos="burst.low", gpus=GPUS_PER_NODE)
    )
    # With vision's other member idle, burst borrows steady's idle node: 2 nodes, within every level.
    borrower = cluster.submit("carol", account="burst", partition="borrow", qos="burst.borrow", gpus=GPUS_PER_NODE)
    cluster.wait_running(borrower)
    run("scancel", borrower)
    cluster.wait_running(
        cluster.submit("alice", account="critical", partition="critical", qos="critical.low", gpus=GPUS_PER_NODE)
    )
    # The same borrow again: perception (2 nodes) and lab (3) would admit it, vision (2) holds it.
    again = cluster.submit("carol", account="burst", partition="borrow", qos="burst.borrow", gpus=GPUS_PER_NODE)
    cluster.wait_pending_for(again, "AssocGrpGRES")
    cluster.cancel_all()


def test_flattening_the_tree_moves_the_teams_back_and_removes_every_level(cluster: Cluster) -> None:
    cluster.cancel_all()
    cluster.apply(governance_model())
    tree = associations()
    assert not {"lab", "vision", "perception"} & set(tree)
    assert tree["critical"][0] == tree["burst"][0] == "acme-ml"
    cluster.apply(tree_model())
    assert associations()["perception"][0] == "vision"
