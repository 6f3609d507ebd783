"""The simulator plans a pool's groups as the controller does: a team's job within its group's
guarantee reclaims the headroom an outside team borrowed, where the flat plan makes it wait."""

from __future__ import annotations

import json
import subprocess
import sys

from constructs_lib.simulator.engine import compare, simulate
from constructs_lib.simulator.traces import TraceJob
from gpu_governance_runtime.planners.reclaim import Settings, Share, ShareGroup, Strategy
from tests.hierarchy.test_groups_model import EXAMPLE

T = "ml.p5.48xlarge"
SHARES = (
    Share(name="alpha", quota={T: 1}, strategy=Strategy.LEND_AND_BORROW),
    Share(name="zeta", quota={T: 1}, strategy=Strategy.LEND_AND_BORROW),
    Share(name="beta", quota={T: 1}, strategy=Strategy.LEND),
)
GROUPS = (ShareGroup(name="vision", shares=("zeta", "beta"), quota={T: 2}),)
# alpha borrows vision's idle instance for an hour; ten minutes in, zeta wants both of vision's.
TRACE = (
    TraceJob(
        job_id="alpha-long",
        team="alpha",
        submit_time=0,
        duration=3_600,
        instance_type=T,
        count=2,
        priority=1,
        checkpointable=True,
    ),
    TraceJob(
        job_id="zeta-pair",
        team="zeta",
        submit_time=600,
        duration=600,
        instance_type=T,
        count=2,
        priority=1,
        checkpointable=True,
    ),
)


def test_a_groups_guarantee_reclaims_in_the_replay_and_the_flat_pool_makes_it_wait():
    grouped = simulate(TRACE, shares=SHARES, capacity={T: 3}, settings=Settings(), groups=GROUPS)
    flat = simulate(TRACE, shares=SHARES, capacity={T: 3}, settings=Settings())
    assert grouped.preemptions == 1 and grouped.waits["zeta"][0] <= 60
    assert flat.preemptions == 0 and flat.waits["zeta"][0] >= 3_000


def test_compare_plans_the_policy_run_with_the_groups():
    results = compare(TRACE, shares=SHARES, capacity={T: 3}, tick_s=60, settings=Settings(), groups=GROUPS)
    assert results["policy"].preemptions == 1


def test_simulate_replays_the_governance_files_groups(tmp_path):
    trace = tmp_path / "trace.csv"
    # speech (outside vision) borrows vision's idle instance; perception then wants 3 of vision's 4.
    trace.write_text(
        "job_id,team,submit_time,duration,instance_type,count,priority,checkpointable\n"
        f"speech-wide,speech,0,3600,{T},4,1,true\nperception-three,perception,600,600,{T},3,1,true\n"
    )
    flat = tmp_path / "flat.yaml"
    flat.write_text(EXAMPLE.read_text().split("\ngroups:")[0] + "\n")
    runs = {}
    for name, config in (("grouped", EXAMPLE), ("flat", flat)):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "constructs_lib.cli",
                "simulate",
                "--config",
                str(config),
                "--pool",
                "hyperpod-slurm",
                "--trace",
                str(trace),
                "--json",
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
        runs[name] = json.loads(result.stdout)["policy"]
    assert (runs["grouped"]["preemptions"], runs["flat"]["preemptions"]) == (1, 0)
