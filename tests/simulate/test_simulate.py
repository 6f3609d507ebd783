"""The simulator, the trace format, the openb converter and the `simulate` CLI."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.simulator import compare, simulate, static_shares
from constructs_lib.simulator.report import table
from constructs_lib.simulator.traces import (
    TRACE_COLUMNS,
    OpenbMapping,
    TraceJob,
    convert_openb,
    read_trace,
    write_trace,
)
from gpu_governance_runtime.planners.reclaim import Settings, Share, Strategy

G5 = "ml.g5.xlarge"
SHARES = (
    Share(name="serving", quota={G5: 4}, strategy=Strategy.LEND),
    Share(name="research", quota={G5: 0}, strategy=Strategy.LEND_AND_BORROW, borrow_limit=None),
)
CAPACITY = {G5: 4}


def job(job_id, team, submit, duration, count, priority=10, checkpointable=False):
    return TraceJob(
        job_id=job_id,
        team=team,
        submit_time=submit,
        duration=duration,
        instance_type=G5,
        count=count,
        priority=priority,
        checkpointable=checkpointable,
    )


BACKOFF = Settings().reborrow_backoff_s


@pytest.mark.parametrize(
    "checkpointable, expected_finish, expected_lost",
    [(True, 660 + 880.0, 0.0), (False, 120 + BACKOFF + 1_000.0, 4 * 120.0)],
)
def test_a_borrower_is_reclaimed_and_resumes_or_restarts(checkpointable, expected_finish, expected_lost):
    jobs = [
        job("borrow", "research", 0, 1_000, 4, checkpointable=checkpointable),
        job("lender", "serving", 100, 500, 4, priority=90),
    ]
    result = simulate(jobs, shares=SHARES, capacity=CAPACITY, tick_s=60, settings=Settings())
    # The lender arrives at 100; the tick at 120 reclaims the pool; it runs 120..620. A
    # checkpointing borrower starts again at the 660 tick and resumes its 880 s of remaining work;
    # one that restarts from zero (all 1000 s) borrows again only after the backoff from 120.
    assert result.preemptions == 1
    assert result.lost_work_capacity_s == expected_lost
    assert result.jobs_completed == 2
    assert result.makespan_s == expected_finish
    assert result.teams["serving"].wait_p50_s == 20.0  # submitted at 100, started at the 120 tick
    assert result.guarantee_breaches == 0
    # The trace window is 0..100 (first to last submission): the borrower fills the pool, but
    # only a checkpointing borrower keeps that work; the other loses it and it is no goodput.
    assert result.window_utilization == 1.0
    assert result.goodput == (1.0 if checkpointable else 0.0)


def test_static_partitioning_never_lends_and_pooled_ignores_quotas():
    jobs = [job("borrow", "research", 0, 1_000, 2), job("lender", "serving", 100, 500, 4, priority=90)]
    results = compare(jobs, shares=SHARES, capacity=CAPACITY, tick_s=60, settings=Settings())
    assert results["static"].jobs_unfinished == 1  # research has no quota of its own
    assert results["policy"].jobs_completed == 2
    # pooled: the borrower is never preempted, the lender waits for it
    assert results["pooled"].preemptions == 0
    assert results["pooled"].teams["serving"].wait_p50_s == 1_000 - 100 + 20
    # utilization counts completed capacity-seconds over capacity x makespan
    pooled = results["pooled"]
    assert pooled.utilization == pytest.approx((2 * 1_000 + 4 * 500) / (4 * pooled.makespan_s))


def test_capped_reclaim_counts_guarantee_breaches():
    jobs = [job("borrow", "research", 0, 1_000, 4), job("lender", "serving", 100, 500, 4, priority=90)]
    result = simulate(jobs, shares=SHARES, capacity=CAPACITY, tick_s=60, settings=Settings(max_preemptions_per_tick=0))
    assert result.preemptions == 0
    # The lender waits inside its guarantee from its first tick (120) until the borrower ends at
    # 1000; a capped plan makes the controller look again every tick: 180, 240, ..., 960 breach.
    assert result.guarantee_breaches == 14


def test_a_capped_plan_that_moves_nothing_and_breaches_nothing_does_not_replay_for_ever():
    # Two teams' jobs that only in-share preemption could fit (the pool less the reserve is 2):
    # the first search finds no victim, the cap stops the second, and nothing ever changes. A
    # replay that looked again every tick because of the cap never ended.
    shares = (
        Share(name="reserve", quota={G5: 2}, strategy=Strategy.RESERVE),
        *(
            Share(name=team, quota={G5: 1}, strategy=Strategy.LEND_AND_BORROW, in_share_preemption=True)
            for team in ("b", "c")
        ),
    )
    jobs = [job("b-big", "b", 0, 600, 3), job("c-big", "c", 0, 600, 3), job("b-small", "b", 60, 600, 1)]
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the replay did not end"))
    signal.alarm(30)
    try:
        result = simulate(
            jobs, shares=shares, capacity=CAPACITY, tick_s=60, settings=Settings(max_preemption_searches_per_tick=1)
        )
    finally:
        signal.alarm(0)
    assert (result.jobs_completed, result.jobs_unfinished) == (1, 2)
    # they could only ever run on the reserve, which is never lent: named, not silently unfinished
    assert result.never_runnable == ("b-big", "c-big")


def test_jobs_that_can_never_run_are_counted_and_named(capsys):
    jobs = [job("big", "research", 0, 100, 2), job("small", "serving", 0, 100, 1)]
    results = compare(jobs, shares=SHARES, capacity=CAPACITY, tick_s=60, settings=Settings())
    assert results["static"].never_runnable == ("big",)  # research has no quota under static
    assert results["policy"].never_runnable == () and results["policy"].jobs_completed == 2
    assert results["static"].as_json(with_breaches=False)["jobs_never_runnable"] == 1
    assert "static: 1 jobs can never run (larger than their team may hold), e.g. big" in table(results)


def test_static_shares_reserve_exactly_the_quota():
    assert all(s.strategy is Strategy.RESERVE and not s.in_share_preemption for s in static_shares(SHARES))


def test_trace_round_trip_and_errors_name_the_line(tmp_path):
    path = tmp_path / "trace.csv"
    jobs = [job("a", "serving", 0.5, 10, 1, checkpointable=True), job("b", "research", 3, 7.25, 2)]
    write_trace(jobs, path)
    assert read_trace(path) == tuple(jobs)
    path.write_text(
        ",".join(TRACE_COLUMNS) + "\nx,serving,-1,0,ml.g5.xlarge,0,high,maybe\ny,research,1,1,ml.g5.xlarge,1,1\n"
    )
    with pytest.raises(GovernanceError) as error:
        read_trace(path)
    text = str(error.value)
    for expected in (
        ":2.submit_time: invalid ('-1')",
        ":2.duration: invalid ('0')",
        ":2.count: invalid",
        ":2.priority: invalid ('high')",
        ":2.checkpointable: invalid ('maybe') - true or false",
        ":3: wrong number of fields (7)",
    ):
        assert expected in text
    path.write_text("id,team\n")
    with pytest.raises(GovernanceError, match=":1: wrong header"):
        read_trace(path)


OPENB = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-ls,12000,16384,1,1000,,LS,Running,0,500,10
pod-frac,6000,12288,1,460,,BE,Failed,5,105,5
pod-eight,6000,12288,8,1000,,Burstable,Succeeded,7,1007,17
pod-cpu,6000,12288,0,0,,LS,Running,0,500,0
pod-never,6000,12288,1,1000,,BE,Pending,20,900,
"""


def test_openb_mapping_is_the_documented_one(tmp_path):
    source = tmp_path / "openb.csv"
    source.write_text(OPENB)
    jobs = {j.job_id: j for j in convert_openb(source)}
    assert set(jobs) == {"pod-ls", "pod-frac", "pod-eight"}  # CPU-only and never-scheduled dropped
    assert jobs["pod-ls"] == TraceJob(
        job_id="pod-ls",
        team="serving",
        submit_time=0,
        duration=490,
        instance_type=G5,
        count=1,
        priority=90,
        checkpointable=False,
    )
    assert (
        jobs["pod-frac"].team,
        jobs["pod-frac"].count,
        jobs["pod-frac"].checkpointable,
        jobs["pod-frac"].priority,
    ) == ("research", 1, True, 10)
    assert (jobs["pod-eight"].team, jobs["pod-eight"].count, jobs["pod-eight"].duration) == ("platform", 8, 990)
    assert {j.instance_type for j in convert_openb(source, OpenbMapping(instance_type="ml.g6.xlarge"))} == {
        "ml.g6.xlarge"
    }


CONFIG = "examples/openb-governance.yaml"


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    """A slice of the openb mapping's shape, generated here so the test needs no ../shared."""
    path = tmp_path_factory.mktemp("trace") / "trace.csv"
    jobs = [job(f"r{i}", "research", i * 30, 900, 4, checkpointable=True) for i in range(30)]
    jobs += [job(f"s{i}", "serving", 200 + i * 20, 300, 6, priority=90) for i in range(8)]
    jobs += [job(f"p{i}", "platform", 100 + i * 50, 400, 4, priority=50) for i in range(6)]
    write_trace(jobs, path)
    return path


def test_cli_json_has_the_documented_shape(small_trace, capsys):
    assert main(["simulate", "--config", CONFIG, "--trace", str(small_trace), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"policy", "baselines"} and set(result["baselines"]) == {"static", "pooled"}
    for metrics in (result["policy"], *result["baselines"].values()):
        assert {"utilization", "makespan_s", "jobs_completed", "preemptions", "lost_work_capacity_s", "teams"} <= set(
            metrics
        )
        assert metrics["jobs_completed"] == 44
        assert set(metrics["teams"]) == {"research", "serving", "platform"}
        assert set(metrics["teams"]["serving"]) == {"jobs", "jobs_unfinished", "wait_p50_s", "wait_p95_s"}
    assert "guarantee_breaches" in result["policy"]
    assert "guarantee_breaches" not in result["baselines"]["static"]
    # the policy lends research idle capacity the static split would leave unused
    assert result["policy"]["utilization"] > 5 * result["baselines"]["static"]["utilization"]
    assert result["policy"]["preemptions"] > 0 and result["policy"]["guarantee_breaches"] == 0


def test_cli_compare_replays_the_policy_under_the_old_configuration(small_trace, tmp_path, capsys):
    old = tmp_path / "old.yaml"
    # the old configuration: platform could not borrow (steady), research had a smaller quota
    text = (
        Path(CONFIG)
        .read_text()
        .replace("strategy: lend_and_borrow\n      borrow_limit: 150", "strategy: lend")
        .replace("openb: {ml.g5.xlarge: 4}", "openb: {ml.g5.xlarge: 2}")
    )
    old.write_text(text)
    assert main(["simulate", "--config", CONFIG, "--trace", str(small_trace), "--compare", str(old), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["compared"] != result["policy"] and result["compared"]["jobs_completed"] == 44
    assert main(["simulate", "--config", CONFIG, "--trace", str(small_trace), "--compare", CONFIG, "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["compared"] == same["policy"]  # the same file replays the same
    assert (
        main(["simulate", "--config", CONFIG, "--trace", str(small_trace), "--compare", str(tmp_path / "missing.yaml")])
        == 2
    )


def test_cli_plot_writes_a_png(small_trace, tmp_path, capsys):
    png = tmp_path / "out.png"
    assert main(["simulate", "--config", CONFIG, "--trace", str(small_trace), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "guarantee breaches under the policy" in capsys.readouterr().out


def test_cli_bad_input_exits_2_with_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        ",".join(TRACE_COLUMNS) + "\nx,nobody,0,10,ml.g5.xlarge,1,1,false\ny,serving,0,10,ml.g5.xlarge,one,1,false\n"
    )
    assert main(["simulate", "--config", CONFIG, "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.csv:3.count: invalid ('one')" in err and "Traceback" not in err
    bad.write_text(",".join(TRACE_COLUMNS) + "\nx,nobody,0,10,ml.g5.xlarge,1,1,false\n")
    assert main(["simulate", "--config", CONFIG, "--trace", str(bad)]) == 2
    assert "job x.team: team has no quota in the pool ('nobody')" in capsys.readouterr().err
    assert main(["simulate", "--config", CONFIG, "--trace", str(bad), "--pool", "nope"]) == 2
    assert "--pool: no such pool ('nope')" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--config", CONFIG, "--trace", str(bad), "--tick", "-5"])
    assert exit_.value.code == 2


def test_openb_cli_converts(tmp_path, capsys):
    source, output = tmp_path / "openb.csv", tmp_path / "trace.csv"
    source.write_text(OPENB)
    assert main(["openb-trace", str(source), str(output)]) == 0
    assert len(read_trace(output)) == 3
    assert "wrote 3 jobs" in capsys.readouterr().err


@settings(
    max_examples=int(os.environ.get("PLANNER_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    borrowers=st.lists(
        st.tuples(st.integers(0, 3_000), st.integers(600, 20_000), st.integers(1, 4)), min_size=1, max_size=4
    ),
    lenders=st.lists(
        st.tuples(st.integers(0, 40_000), st.integers(60, 3_000), st.integers(1, 4)), min_size=1, max_size=25
    ),
    backoff=st.sampled_from([300.0, 1_800.0]),
)
def test_a_job_that_cannot_checkpoint_is_preempted_at_most_logarithmically_often(borrowers, lenders, backoff):
    """Each preemption of a job that restarts from zero at least doubles the time before it may
    borrow again, so its n-th preemption comes backoff x (2^(n-1) - 1) after its first at the
    earliest: n <= 1 + log2(1 + span / backoff), however often the lender comes back."""
    jobs = [job(f"b{i}", "research", at, duration, count) for i, (at, duration, count) in enumerate(borrowers)]
    jobs += [
        job(f"l{i}", "serving", at, duration, count, priority=90) for i, (at, duration, count) in enumerate(lenders)
    ]
    result = simulate(
        jobs,
        shares=SHARES,
        capacity=CAPACITY,
        tick_s=60,
        settings=Settings(reborrow_backoff_s=backoff, min_run_time_s=1),
    )
    assert result.jobs_completed == len(jobs)
    for job_id, times in result.preempted_at.items():
        span = times[-1] - times[0]
        assert len(times) <= 1 + math.log2(1 + span / backoff), f"{job_id} preempted at {times}"


def test_simulate_replays_with_the_pools_reclaim_settings_and_options_override_them(tmp_path, capsys):
    config = tmp_path / "governance.yaml"
    config.write_text(
        Path("benchmarks/openb-lend-and-borrow.yaml")
        .read_text()
        .replace(
            "      ml.g5.xlarge: 40\n", "      ml.g5.xlarge: 40\n    reclaim: {reborrow_backoff_seconds: 7200}\n", 1
        )
    )
    trace = tmp_path / "trace.csv"
    # platform borrows 24 of 40 without checkpoints; serving takes its 20 back at the 120 tick
    write_trace([job("borrow", "platform", 0, 1_000, 32), job("lender", "serving", 100, 500, 20, priority=90)], trace)

    def makespan(*options):
        assert main(["simulate", "--config", str(config), "--trace", str(trace), "--json", *options]) == 0
        return json.loads(capsys.readouterr().out)["policy"]["makespan_s"]

    assert makespan() == 120 + 7_200 + 1_000  # the file's backoff, as the controller would plan
    assert makespan("--reborrow-backoff", "60") == 660 + 1_000  # restarts once serving's 500 s end


def test_a_lender_kept_below_its_guarantee_behind_its_own_low_priority_job_counts_as_a_breach():
    # Issue 29: team a's priority-5 job of 2 fits a's quota only once a's own priority-0 job is
    # set aside (in-share preemption), and the pool only once b's borrowed job is reclaimed.
    shares = (
        Share(name="a", quota={G5: 2}, strategy=Strategy.LEND, in_share_preemption=True),
        Share(name="b", quota={G5: 0}, strategy=Strategy.LEND_AND_BORROW, borrow_limit=None),
    )
    jobs = [
        job("a-low", "a", 0, 1_000, 1, priority=0),
        job("b-borrowed", "b", 0, 1_000, 1, priority=0),
        job("a-high", "a", 100, 500, 2, priority=5),
    ]
    served = simulate(jobs, shares=shares, capacity={G5: 2}, tick_s=60, settings=Settings())
    assert (served.preemptions, served.guarantee_breaches, served.teams["a"].wait_p50_s) == (2, 0, 20.0)
    # Without preemption a-high waits from its first tick (120) until both end at 1000: the
    # ticks 180, 240, ..., 960 each breach, as for a lender behind a borrower alone.
    starved = simulate(jobs, shares=shares, capacity={G5: 2}, tick_s=60, settings=Settings(max_preemptions_per_tick=0))
    assert (starved.preemptions, starved.guarantee_breaches) == (0, 14)


def test_a_job_the_controller_cannot_bring_back_is_reclaimed_all_the_same_stopped_for_good_and_counted(tmp_path):
    """Issue 38: a job the controller could not bring back as it was (an array job, a multi-container
    job, a job others depend on: RunningJob.restartable) no longer keeps lent capacity for ever. The
    replay runs the same planner: the borrowed sweep is reclaimed when the lender comes, not
    requeued (its work is lost, it stays unfinished), and the report says so. Until issue 38 the
    lender waited the sweep out (920 s). The trace says so in its optional last column."""
    jobs = [
        TraceJob(
            job_id="sweep",
            team="research",
            submit_time=0,
            duration=1_000,
            instance_type=G5,
            count=4,
            priority=10,
            checkpointable=True,  # its checkpoints do not bring it back: nothing requeues it
            restartable=False,
        ),
        job("lender", "serving", 100, 500, 4, priority=90),
    ]
    stopped = simulate(jobs, shares=SHARES, capacity=CAPACITY, tick_s=60, settings=Settings())
    assert (stopped.preemptions, stopped.not_restartable, stopped.stopped_for_good) == (1, 1, 1)
    assert stopped.teams["serving"].wait_p50_s == 120.0 - 100  # the first tick after it arrives
    assert (stopped.jobs_completed, stopped.jobs_unfinished, stopped.lost_work_capacity_s) == (1, 1, 120.0 * 4)
    restartable = simulate(
        [job("sweep", "research", 0, 1_000, 4), jobs[1]],
        shares=SHARES,
        capacity=CAPACITY,
        tick_s=60,
        settings=Settings(),
    )
    assert (restartable.preemptions, restartable.stopped_for_good, restartable.jobs_completed) == (1, 0, 2)
    results = compare(jobs, shares=SHARES, capacity=CAPACITY, tick_s=60, settings=Settings())
    assert "1 jobs cannot be brought back once stopped" in table(results)
    assert "1 ran beyond it and were stopped for good" in table(results)
    summary = results["policy"].as_json(with_breaches=True)
    assert (summary["jobs_not_restartable"], summary["jobs_stopped_for_good"], summary["guarantee_breaches"]) == (
        1,
        1,
        0,
    )
    path = tmp_path / "trace.csv"
    write_trace(jobs, path)
    assert path.read_text().splitlines()[0].endswith(",max_run_time,restartable")
    assert [j.restartable for j in read_trace(path)] == [False, True]


def test_the_restartable_column_is_optional_and_checked(tmp_path):
    path = tmp_path / "trace.csv"
    header = ",".join(TRACE_COLUMNS) + ",max_run_time,restartable\n"
    path.write_text(header + "a,serving,0,10,ml.g5.xlarge,1,1,false,,\nb,serving,0,10,ml.g5.xlarge,1,1,false,,FALSE\n")
    assert [j.restartable for j in read_trace(path)] == [True, False]  # empty: true
    path.write_text(header + "a,serving,0,10,ml.g5.xlarge,1,1,false,,maybe\n")
    with pytest.raises(GovernanceError, match=r"trace.csv:2.restartable.*maybe.*true, false or empty"):
        read_trace(path)


def test_a_trace_may_name_the_files_priority_classes_and_leave_out_other_instance_types(tmp_path, capsys):
    """Issue 41 item 12: priority had to be a number, not one of the file's class names; a trace
    with other instance types gave 20 error lines and no way to skip them."""
    trace = tmp_path / "trace.csv"
    trace.write_text(
        ",".join(TRACE_COLUMNS)
        + "\nr1,research,0,600,ml.p5.48xlarge,1,urgent,true\n"
        + "r2,research,60,600,ml.p5.48xlarge,1,10,true\n"
        + "x1,research,0,600,ml.p4d.24xlarge,1,10,true\n"
    )
    argv = ["simulate", "--example", "--trace", str(trace), "--pool", "sagemaker-training", "--json"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "job x1.instance_type: not in the pool ('ml.p4d.24xlarge')" in err and "--skip-other-types" in err
    assert main([*argv, "--skip-other-types"]) == 0
    out, err = capsys.readouterr()
    assert err == (
        "gpu-governance simulate: left out 1 job of instance types pool sagemaker-training does not have: "
        "ml.p4d.24xlarge\n"
    )
    assert json.loads(out)["policy"]["jobs_completed"] == 2
    from constructs_lib.model.loader import load_model

    weights = {c.name: c.weight for c in load_model(None).priority_classes}
    assert read_trace(trace, weights)[0].priority == weights["urgent"]
    trace.write_text(",".join(TRACE_COLUMNS) + "\nr1,research,0,600,ml.p5.48xlarge,1,asap,true\n")
    assert main(argv) == 2
    assert (
        f"priority: invalid ('asap') - an integer (higher is more urgent), or a priority class: one of {sorted(weights)}"
        in (capsys.readouterr().err)
    )
