"""The sbatch line `gpu-governance team submit-example --backend slurm` prints, run as a team
member on the real local Slurm: the job lands in the team's account, partition and class QoS,
and another team's line is refused."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from .cluster import Cluster, run
from .models import POOL, model_data

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workdir() -> Path:
    """A folder every tenant can reach (beside the cluster's state, like the tenant data root),
    with the governance file and a job script."""
    folder = Path(tempfile.mkdtemp(prefix="member-submit-", dir="/var/lib/gpu-governance-slurm"))
    folder.chmod(0o755)
    (folder / "governance.yaml").write_text(yaml.safe_dump(model_data()))
    script = folder / "train.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    script.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def printed_line(workdir: Path, team: str, priority_class: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "constructs_lib.cli",
            "team",
            "submit-example",
            team,
            "--backend",
            "slurm",
            "--pool",
            POOL,
            "--config",
            str(workdir / "governance.yaml"),
            "--priority-class",
            priority_class,
            "--gpus",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout.strip()


def run_as(user: str, line: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    # --parsable prints the job id; the output goes nowhere (the tenant cannot write /tmp/pytest-*).
    line = line.replace("sbatch ", "sbatch --parsable --output=/dev/null ", 1)
    return subprocess.run(
        ["runuser", "-u", user, "--", "bash", "-c", f"cd {workdir} && {line}"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_printed_line_runs_in_the_teams_account_partition_and_qos(cluster: Cluster, workdir: Path) -> None:
    line = printed_line(workdir, "burst", "urgent")
    assert line == "sbatch --account=burst --partition=burst --qos=burst.urgent --gres=gpu:2 train.sh"
    submitted = run_as("carol", line, workdir)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    shown = run("squeue", "-h", "-j", job_id, "-o", "%a|%P|%q|%u").stdout.strip()
    assert shown == "burst|burst|burst.urgent|carol"
    cluster.wait_running(job_id)


def test_another_teams_line_is_refused_for_a_member(cluster: Cluster, workdir: Path) -> None:
    refused = run_as("carol", printed_line(workdir, "critical", "urgent"), workdir)
    assert refused.returncode != 0
    assert "Invalid account or account/partition combination" in refused.stderr
