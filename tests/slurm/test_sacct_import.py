"""`gpu-governance trace from-sacct` on the real local Slurm's accounting (make test-slurm):
finished jobs come back with their account, node count, QoS class, time limit and run time."""

from __future__ import annotations

import pytest

from constructs_lib.simulator.importers import SACCT_FIELDS, ImportOptions, from_sacct

from .cluster import Cluster, accounting, run

pytestmark = pytest.mark.slurm


def test_finished_slurm_jobs_import_with_their_account_size_class_and_limit(cluster: Cluster, tmp_path) -> None:
    short = (
        run(
            "runuser",
            "-u",
            "carol",
            "--",
            "sbatch",
            "--parsable",
            "--account=burst",
            "--partition=burst",
            "--qos=burst.low",
            "--gres=gpu:1",
            "--nodes=1",
            "--time=5",
            "--chdir=/tmp",
            "--output=/dev/null",
            "--wrap",
            "sleep 3",
        )
        .stdout.strip()
        .split(";")[0]
    )
    # What a platform team records, once slurmdbd has the whole record: read at once, a finished
    # job can still show QoS Unknown or no end (issue 31).
    recorded = accounting([short], SACCT_FIELDS)
    assert recorded.rows[0]["State"] == "COMPLETED", recorded
    path = tmp_path / "sacct.txt"
    path.write_text(recorded.text)
    imported = from_sacct(
        path,
        ImportOptions(instance_type="ml.g5.xlarge", priorities={"low": 10, "standard": 50, "urgent": 90, "borrow": 0}),
    )
    assert (imported.skipped, imported.guessed) == ({}, {"instance type ml.g5.xlarge (--instance-type)": (short,)})
    (job,) = imported.jobs
    assert (job.job_id, job.team, job.count, job.priority, job.max_run_time, job.submit_time) == (
        short,
        "burst",
        1,
        10,
        300.0,
        0.0,
    )
    assert 2 <= job.duration <= 30  # sleep 3, in whole seconds as sacct prints them
