"""Groups of teams on a real Slurm (issue 28, quotas above the team): a parent account per group
under the organisation's, its teams' accounts under it, and the group quota as GrpTRES on the
parent, which the teams' jobs count against together."""

from __future__ import annotations

import pytest

from constructs_lib.model import GovernanceModel

from .cluster import Cluster, governed_cluster, run
from .models import GPUS_PER_NODE, INSTANCE_TYPE, POOL, governance_model, model_data

pytestmark = pytest.mark.slurm

GROUP = "ops"


def grouped_model() -> GovernanceModel:
    # critical (1 node, reserved) and burst (1 node, borrows 1 more) share 2 nodes together.
    return GovernanceModel.from_dict(
        {
            **model_data(),
            "groups": [{"name": GROUP, "teams": ["critical", "burst"], "quotas": {POOL: {INSTANCE_TYPE: 2}}}],
        }
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = governed_cluster(tmp_path_factory.mktemp("groups"))
    cluster.apply(grouped_model())
    yield cluster
    cluster.cancel_all()
    cluster.apply(governance_model())  # the other modules' flat organisation


def associations() -> dict[str, tuple[str, str]]:
    """Account -> (parent, GrpTRES) of every account association."""
    rows = run("sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,parentname,grptres").stdout.split()
    return {account: (parent, tres) for account, user, parent, tres in (row.split("|") for row in rows) if not user}


def test_the_group_is_a_parent_account_holding_the_group_quota_and_reapplying_changes_nothing(cluster: Cluster) -> None:
    tree = associations()
    assert tree[GROUP] == ("acme-ml", f"gres/gpu={2 * GPUS_PER_NODE}")
    assert tree["critical"][0] == tree["burst"][0] == GROUP
    assert tree["steady"][0] == "acme-ml"  # outside the group
    # burst's borrow cap as a per-account QoS limit: a QoS GrpTRES on gres/gpu would override the group's.
    borrow = run("sacctmgr", "-n", "-P", "show", "qos", "burst.borrow", "format=grptres,maxtrespa").stdout.strip()
    assert borrow == f"|gres/gpu={GPUS_PER_NODE}"
    assert cluster.apply(grouped_model()).changed == 0


def test_the_groups_teams_together_cannot_exceed_the_group_quota(cluster: Cluster) -> None:
    cluster.cancel_all()
    cluster.wait_running(
        cluster.submit("alice", account="critical", partition="critical", qos="critical.low", gpus=GPUS_PER_NODE)
    )
    cluster.wait_running(
        cluster.submit("carol", account="burst", partition="burst", qos="burst.low", gpus=GPUS_PER_NODE)
    )
    # steady's node is idle and lent, and burst may borrow one node: only the group's cap stops it.
    borrower = cluster.submit("carol", account="burst", partition="borrow", qos="burst.borrow", gpus=GPUS_PER_NODE)
    cluster.wait_pending_for(borrower, "AssocGrpGRES")
    cluster.cancel_all()


def test_a_borrower_outside_the_group_still_takes_the_idle_node(cluster: Cluster) -> None:
    """The cap is the group's, not the pool's: with the group at its quota, a team outside it is not held back."""
    cluster.cancel_all()
    cluster.wait_running(
        cluster.submit("alice", account="critical", partition="critical", qos="critical.low", gpus=GPUS_PER_NODE)
    )
    cluster.wait_running(
        cluster.submit("carol", account="burst", partition="burst", qos="burst.low", gpus=GPUS_PER_NODE)
    )
    cluster.wait_running(
        cluster.submit("bob", account="steady", partition="steady", qos="steady.low", gpus=GPUS_PER_NODE)
    )
    cluster.cancel_all()


def test_removing_the_group_moves_its_teams_back_and_removes_its_account(cluster: Cluster) -> None:
    cluster.cancel_all()
    cluster.apply(governance_model())
    tree = associations()
    assert GROUP not in tree
    assert tree["critical"][0] == tree["burst"][0] == "acme-ml"
    cluster.apply(grouped_model())
    assert associations()[GROUP][0] == "acme-ml"
