"""The pool's grace before preemption on a real Slurm (issue 28): every QoS another may preempt
carries it as GraceTime, idempotently; and what this Slurm does with it when it requeues."""

from __future__ import annotations

from pathlib import Path

import pytest

from constructs_lib.model import GovernanceModel

from .cluster import Cluster, governed_cluster, run, wait_until
from .models import governance_model, model_data

pytestmark = pytest.mark.slurm

GRACE_S = 30


def graced_model(grace: int):
    data = model_data()
    data["pools"][0]["reclaim"] = {"grace_seconds": grace}
    return GovernanceModel.from_dict(data)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = governed_cluster(tmp_path_factory.mktemp("grace"))
    cluster.apply(graced_model(GRACE_S))
    yield cluster
    cluster.cancel_all()
    cluster.apply(governance_model())  # the other modules' organisation, without a grace


def grace_times() -> dict[str, str]:
    return dict(
        line.split("|") for line in run("sacctmgr", "-n", "-P", "show", "qos", "format=name,gracetime").stdout.split()
    )


def test_every_preemptible_qos_carries_the_grace_and_reapplying_changes_nothing(cluster: Cluster) -> None:
    times = grace_times()
    assert times["burst.borrow"] == "00:00:30"  # reclaimed by the lenders
    assert times["critical.low"] == times["critical.standard"] == "00:00:30"  # in-share victims
    assert times["steady.urgent"] == times["critical.urgent"] == "00:00:00"  # nobody preempts them
    assert cluster.apply(graced_model(GRACE_S)).changed == 0


def test_slurm_22_05_requeues_a_reclaimed_borrower_at_once_whatever_its_grace(cluster: Cluster, tmp_path: Path) -> None:
    """What this Slurm (22.05, PreemptMode=REQUEUE) does with the GraceTime it holds: the victim is
    signalled and requeued in the same step, without the grace. Pinned here so that a Slurm that
    honours it under REQUEUE shows up as a failing test, and docs/slurm.md says so."""
    cluster.cancel_all()
    cluster.wait_running(cluster.submit("carol", account="burst", partition="burst", qos="burst.low", gpus=4))
    log = Path("/tmp") / f"gg-grace-{tmp_path.name}.log"
    log.unlink(missing_ok=True)
    # a job that would checkpoint on SIGTERM and run on until Slurm stops it
    borrower = (
        run(
            "runuser",
            "-u",
            "carol",
            "--",
            "sbatch",
            "--parsable",
            "--account=burst",
            "--partition=borrow",
            "--qos=burst.borrow",
            "--gres=gpu:4",
            "--chdir=/tmp",
            f"--output={log}",
            "--wrap",
            "trap 'echo checkpoint' TERM; while true; do sleep 1; done",
        )
        .stdout.strip()
        .split(";")[0]
    )
    assert cluster.wait_running(borrower).nodes == "gpu-2"
    lender = cluster.submit("bob", account="steady", partition="steady", qos="steady.low", gpus=4)
    wait_until(
        "the borrower signalled", lambda: log.read_text() if log.exists() else "", lambda text: "checkpoint" in text
    )
    assert cluster.job(borrower).restarts == 1  # already requeued: no grace
    assert cluster.wait_running(lender).nodes == "gpu-2"
    log.unlink(missing_ok=True)
