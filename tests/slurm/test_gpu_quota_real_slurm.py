"""A quota declared in GPUs and an absolute borrow limit on a real Slurm (issue 28): the quota
becomes the team's whole nodes, the limit its borrow QoS's GrpTRES=gres/gpu, and Slurm holds it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from constructs_lib.model import GovernanceModel

from .cluster import Cluster, governed_cluster, run
from .models import GPUS_PER_NODE, INSTANCE_TYPE, POOL, governance_model, model_data

pytestmark = pytest.mark.slurm


def gpu_quota_model() -> GovernanceModel:
    """Team burst's quota as one node's GPUs, and an absolute borrow limit of two nodes' GPUs,
    where its percent (100) alone would allow one."""
    data = model_data()
    burst = next(t for t in data["teams"] if t["name"] == "burst")
    burst["quotas"][POOL][INSTANCE_TYPE] = {"accelerators": GPUS_PER_NODE, "borrow_accelerators": 2 * GPUS_PER_NODE}
    return GovernanceModel.from_dict(data)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = governed_cluster(tmp_path_factory.mktemp("gpu-quota"))
    cluster.apply(gpu_quota_model())
    yield cluster
    cluster.cancel_all()
    cluster.apply(governance_model())  # the other modules' organisation


def test_the_absolute_borrow_limit_is_the_borrow_qos_gpu_cap_and_reapplying_changes_nothing(cluster: Cluster) -> None:
    caps = dict(
        line.split("|") for line in run("sacctmgr", "-n", "-P", "show", "qos", "format=name,grptres").stdout.split()
    )
    assert caps["burst.borrow"] == f"gres/gpu={2 * GPUS_PER_NODE}"
    partitions = {
        line.split()[0].split("=")[1]: line for line in run("scontrol", "-o", "show", "partition").stdout.splitlines()
    }
    assert "Nodes=gpu-3 " in partitions["burst"]  # the 4 GPUs are the team's one whole node
    assert cluster.apply(gpu_quota_model()).changed == 0


def test_slurm_lets_the_team_borrow_up_to_the_absolute_limit(cluster: Cluster) -> None:
    cluster.cancel_all()
    borrowers = [
        cluster.submit("carol", account="burst", partition="borrow", qos="burst.borrow", gpus=GPUS_PER_NODE)
        for _ in range(2)
    ]
    # Both run, on gpu-2 and gpu-3: 8 GPUs borrowed; the percent limit would hold the second at 4.
    assert sorted(cluster.wait_running(job).nodes for job in borrowers) == ["gpu-2", "gpu-3"]
    cluster.cancel_all()
