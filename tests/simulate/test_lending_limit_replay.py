"""A lending limit in a replay (issue 28): the part of a lender's quota it does not lend waits for
it, so its job starts there without reclaiming anyone's work."""

from __future__ import annotations

from dataclasses import replace

from constructs_lib.simulator.engine import simulate
from constructs_lib.simulator.traces import TraceJob
from gpu_governance_runtime.planners.reclaim import Share, Strategy

P5 = "ml.p5.48xlarge"
LENDER = Share(name="vision", quota={P5: 4}, strategy=Strategy.LEND)
BORROWER = Share(name="research", quota={}, strategy=Strategy.LEND_AND_BORROW)
JOBS = (
    TraceJob(
        job_id="r1",
        team="research",
        submit_time=0,
        duration=3_600,
        instance_type=P5,
        count=2,
        priority=1,
        checkpointable=False,
    ),
    TraceJob(
        job_id="r2",
        team="research",
        submit_time=0,
        duration=3_600,
        instance_type=P5,
        count=2,
        priority=1,
        checkpointable=False,
    ),
    TraceJob(
        job_id="v1",
        team="vision",
        submit_time=600,
        duration=600,
        instance_type=P5,
        count=2,
        priority=1,
        checkpointable=False,
    ),
)


def test_a_lender_with_a_lending_limit_starts_on_its_held_part_and_nobody_loses_work():
    lends_all = simulate(JOBS, shares=(LENDER, BORROWER), capacity={P5: 4}, record_runs=True)
    lends_half = simulate(
        JOBS, shares=(replace(LENDER, lending_limit=50), BORROWER), capacity={P5: 4}, record_runs=True
    )
    assert (lends_all.preemptions, lends_half.preemptions) == (1, 0)
    assert lends_all.lost_work_capacity_s > 0 and lends_half.lost_work_capacity_s == 0
    # with half held back only one research job borrows at first; vision starts on arrival either way
    assert lends_half.runs["v1"][0][0] == lends_all.runs["v1"][0][0] == 600
    assert lends_half.runs["r2"][0][0] > 0
