"""`gpu-governance trace from-sacct` on the real local Slurm's accounting (make test-slurm):
finished jobs come back with their account, node count, QoS class, time limit and run time."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from constructs_lib.simulator.importers import SACCT_FIELDS, ImportOptions, from_sacct

from .cluster import Cluster, run

pytestmark = pytest.mark.slurm


def sacct(job_ids: list[str]) -> str:
    """What a platform team records: sacct with the documented fields, in UTC."""
    command = ["sacct", "--allusers", "--allocations", "--parsable2", "--format=" + ",".join(SACCT_FIELDS), "-j", ",".join(job_ids)]
    return subprocess.run(command, check=True, capture_output=True, text=True, env={**os.environ, "TZ": "UTC"}).stdout


def test_finished_slurm_jobs_import_with_their_account_size_class_and_limit(cluster: Cluster, tmp_path) -> None:
    short = run(
        "runuser", "-u", "carol", "--", "sbatch", "--parsable", "--account=burst", "--partition=burst", "--qos=burst.low",
        "--gres=gpu:1", "--nodes=1", "--time=5", "--chdir=/tmp", "--output=/dev/null", "--wrap", "sleep 3",
    ).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while "COMPLETED" not in sacct([short]):
        assert time.monotonic() < deadline, f"job {short} did not complete: {sacct([short])}"
        time.sleep(1)
    path = tmp_path / "sacct.txt"
    path.write_text(sacct([short]))
    imported = from_sacct(path, ImportOptions(instance_type="ml.g5.xlarge", priorities={"low": 10, "standard": 50, "urgent": 90, "borrow": 0}))
    (job,) = imported.jobs
    assert (job.job_id, job.team, job.count, job.priority, job.max_run_time, job.submit_time) == (short, "burst", 1, 10, 300.0, 0.0)
    assert 2 <= job.duration <= 30  # sleep 3, in whole seconds as sacct prints them
