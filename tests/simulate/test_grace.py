"""Grace before preemption in the replay (issue 28): a victim runs on for the pool's grace, the job
that preempts it gets its instances when it stops, and a lender's wait up to a tick plus the grace
is not a breach."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

from hypothesis import given, settings as hypothesis_settings, strategies as st

from constructs_lib.cli import main
from constructs_lib.simulator import simulate
from constructs_lib.simulator.traces import write_trace
from gpu_governance_runtime.planners.reclaim import Settings, Share, Strategy

from .test_simulate import CAPACITY, G5, SHARES, job


def replay(jobs, grace, **settings):
    return simulate(
        jobs,
        shares=SHARES,
        capacity=CAPACITY,
        tick_s=60,
        settings=Settings(grace_s=grace, **settings),
        record_runs=True,
        record_timeline=True,
    )


def test_a_checkpointing_victim_runs_on_for_the_grace_and_keeps_that_work():
    # research borrows the whole pool at 0; serving's job arrives at 100 and reclaims at the 120 tick
    jobs = [
        job("borrow", "research", 0, 1_000, 4, checkpointable=True),
        job("lender", "serving", 100, 500, 4, priority=90),
    ]
    result = replay(jobs, 300)
    assert result.runs["borrow"][0] == (0, 420)  # stopped at 120 + 300, not at the tick
    assert result.runs["lender"] == ((420, 920),)
    assert result.reclaim_waits == (320,)  # from its arrival to the victim's stop
    # it kept 420 s of its 1,000: it resumes after the lender and needs 580 more
    ((restart, end),) = result.runs["borrow"][1:]
    assert end - restart == 580
    assert (result.preemptions, result.lost_work_capacity_s, result.guarantee_breaches) == (1, 0, 0)


def test_a_victim_that_finishes_during_its_grace_loses_nothing():
    jobs = [job("borrow", "research", 0, 300, 4), job("lender", "serving", 100, 500, 4, priority=90)]
    immediate = replay(jobs, 0)
    assert (immediate.preemptions, immediate.lost_work_capacity_s) == (1, 4 * 120.0)
    graced = replay(jobs, 600)
    assert (graced.preemptions, graced.lost_work_capacity_s) == (0, 0)
    assert graced.runs["borrow"] == ((0, 300),)
    assert graced.runs["lender"] == ((300, 800),)  # as soon as the victim is done, not after the whole grace
    assert graced.jobs_completed == 2 and graced.guarantee_breaches == 0


def test_a_lender_waiting_no_longer_than_a_tick_plus_the_grace_is_no_breach():
    # As in test_simulate: a's job waits from its first tick (120) until 1,000 with preemption
    # capped at 0, breaching on the ticks 180 ... 960; with a 300 s grace the first five are a wait.
    shares = (
        Share(name="a", quota={G5: 2}, strategy=Strategy.LEND, in_share_preemption=True),
        Share(name="b", quota={G5: 0}, strategy=Strategy.LEND_AND_BORROW, borrow_limit=None),
    )
    jobs = [
        job("a-low", "a", 0, 1_000, 1, priority=0),
        job("b-borrowed", "b", 0, 1_000, 1, priority=0),
        job("a-high", "a", 100, 500, 2, priority=5),
    ]

    def breaches(grace):
        return simulate(
            jobs,
            shares=shares,
            capacity={G5: 2},
            tick_s=60,
            settings=Settings(max_preemptions_per_tick=0, grace_s=grace),
        ).guarantee_breaches

    assert (breaches(0), breaches(300)) == (14, 9)


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    borrowers=st.lists(
        st.tuples(st.integers(0, 3_000), st.integers(60, 20_000), st.integers(1, 4), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    lenders=st.lists(
        st.tuples(st.integers(0, 40_000), st.integers(60, 3_000), st.integers(1, 4)), min_size=1, max_size=12
    ),
    grace=st.sampled_from([0.0, 45.0, 300.0, 600.0]),
)
def test_with_a_grace_the_pool_is_never_overbooked_and_every_job_ends(borrowers, lenders, grace):
    """Victims in their grace and the jobs waiting for them never hold more than the pool, and no
    lender waits past a tick plus the grace for what it is owed."""
    jobs = [
        job(f"b{i}", "research", at, duration, count, checkpointable=cp)
        for i, (at, duration, count, cp) in enumerate(borrowers)
    ]
    jobs += [
        job(f"l{i}", "serving", at, duration, count, priority=90) for i, (at, duration, count) in enumerate(lenders)
    ]
    result = replay(jobs, grace, min_run_time_s=1)
    assert result.jobs_completed == len(jobs)
    assert all(sum(used.values()) <= CAPACITY[G5] for _, used in result.usage_timeline)
    for runs in result.runs.values():  # a job never runs twice at once
        assert all(end <= next_start for (_, end), (next_start, _) in pairwise(runs))
    assert result.guarantee_breaches == 0


def test_simulate_takes_the_pools_grace_and_the_option_overrides_it(tmp_path, capsys):
    config = tmp_path / "governance.yaml"
    config.write_text(
        Path("benchmarks/openb-lend-and-borrow.yaml")
        .read_text()
        .replace("      ml.g5.xlarge: 40\n", "      ml.g5.xlarge: 40\n    reclaim: {grace_seconds: 600}\n", 1)
    )
    trace = tmp_path / "trace.csv"
    # platform borrows 24 of 40 and would end at 300; serving takes its 20 back at the 120 tick
    write_trace([job("borrow", "platform", 0, 300, 32), job("lender", "serving", 100, 500, 20, priority=90)], trace)

    def policy(*options):
        assert main(["simulate", "--config", str(config), "--trace", str(trace), "--json", *options]) == 0
        return json.loads(capsys.readouterr().out)["policy"]

    assert (policy()["lost_work_capacity_s"], policy()["reclaim_wait_max_s"]) == (
        0,
        200,
    )  # the file's grace: it ends first
    assert (policy("--grace", "0")["lost_work_capacity_s"], policy("--grace", "0")["reclaim_wait_max_s"]) == (
        32 * 120,
        20,
    )
