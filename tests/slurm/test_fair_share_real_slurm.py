"""A pool ordered by decayed usage on a real Slurm (issue 43 item 2): the cluster's own fair share
decays usage with the pool's half-life (PriorityDecayHalfLife), idempotently, and back to Slurm's
own setting once the pool no longer orders by usage."""

from __future__ import annotations

import pytest

from constructs_lib.model import GovernanceModel

from .cluster import Cluster, governed_cluster, run
from .models import governance_model, model_data

pytestmark = pytest.mark.slurm


def by_usage(half_life_hours: int) -> GovernanceModel:
    data = model_data()
    data["pools"][0]["reclaim"] = {"fair_share": {"by": "usage", "half_life_hours": half_life_hours}}
    return GovernanceModel.from_dict(data)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = governed_cluster(tmp_path_factory.mktemp("fair_share"))
    yield cluster
    cluster.apply(governance_model())  # the other modules' organisation: the cluster's own half-life


def half_life() -> str:
    (line,) = [
        line for line in run("scontrol", "show", "config").stdout.splitlines() if "PriorityDecayHalfLife" in line
    ]
    return line.split("=", 1)[1].strip()


def test_slurm_decays_usage_with_the_pools_half_life_and_reapplying_changes_nothing(cluster: Cluster) -> None:
    before = half_life()  # the cluster's own slurm.conf's, which the governance leaves alone by default
    applied = cluster.apply(by_usage(36))
    assert "reconfigure slurmctld" in applied.output
    assert half_life() == "1-12:00:00"
    assert "changed:" not in cluster.apply(by_usage(36)).output
    cluster.apply(governance_model())
    assert half_life() == before
