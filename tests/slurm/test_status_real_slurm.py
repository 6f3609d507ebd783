"""`gpu-governance status` on the real local Slurm (tests/slurm/slurm-up.sh) with the generated
governance applied: jobs submitted past a team's limits wait, and the command, running the real
`squeue` itself, explains why in plain words.

Nodes: gpu-1 is team critical's (reserve), gpu-2 team steady's (lend), gpu-3 team burst's (lend
and borrow, borrow limit 100% = 4 GPUs); partition `borrow` spans gpu-2 and gpu-3.
"""

from __future__ import annotations

import json

import pytest
import yaml

from constructs_lib import cli

from .cluster import Cluster
from .models import POOL, model_data

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("config") / "governance.yaml"
    path.write_text(yaml.safe_dump(model_data()))
    return str(path)


def status(capsys, config: str, team: str) -> tuple[str, dict]:
    """The command's text, and its JSON jobs by id (each run reads the real squeue)."""
    assert cli.main(["status", "--team", team, "--pool", POOL, "--config", config]) == 0
    text = capsys.readouterr().out
    assert cli.main(["status", "--team", team, "--pool", POOL, "--config", config, "--json"]) == 0
    (document,) = json.loads(capsys.readouterr().out)
    return text, {j["job_id"]: j for j in document["jobs"]}


def test_jobs_past_the_teams_limits_are_explained(cluster: Cluster, capsys, config: str) -> None:
    cluster.cancel_all()
    # steady (lend): its one node is busy, a second job waits - the share is at its limit
    mine = cluster.wait_running(
        cluster.submit("bob", account="steady", partition="steady", qos="steady.standard", gpus=4)
    ).id
    over = cluster.submit("bob", account="steady", partition="steady", qos="steady.standard", gpus=4)
    cluster.wait_pending_for(over, "Resources")
    text, jobs = status(capsys, config, "steady")
    assert jobs[mine]["state"] == "running"
    assert (jobs[over]["state"], jobs[over]["reason"], jobs[over]["position"]) == ("waiting", "share_at_limit", 1)
    assert (
        f"{over} (wrap): waiting #1 - your team uses 1 of its 1 guaranteed nodes and its sharing strategy (lend, preset steady) does not borrow"
        in text
    )
    assert "Resources" in jobs[over]["backend_reason"]

    # burst (lend and borrow): it borrows up to its limit, the next borrowing job waits on the borrow QoS
    cluster.wait_running(cluster.submit("carol", account="burst", partition="borrow", qos="burst.borrow", gpus=4))
    beyond = cluster.submit("carol", account="burst", partition="borrow", qos="burst.borrow", gpus=1)
    cluster.wait_pending_for(beyond, "QOSGrpGRES")
    text, jobs = status(capsys, config, "burst")
    assert jobs[beyond]["reason"] == "borrow_limit"
    assert "borrowing at its limit: the GPUs its borrow QoS burst.borrow allows (GrpTRES) are all in use" in text
    # steady's view does not show burst's jobs
    _, steady_jobs = status(capsys, config, "steady")
    assert beyond not in steady_jobs
    cluster.cancel_all()
