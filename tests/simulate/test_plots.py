"""The charts people read (issue 26, item 5): the replay chart has a panel per run and instance
type (a p5 is not a g6e), units on both axes, the pool's capacity drawn, one y scale down each
instance type's column, run colours no team uses; `simulate` names the pool it chose; the usage
chart draws every pool of a team on its own, on one scale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from matplotlib.colors import to_hex

from constructs_lib.cli import main
from constructs_lib.cli.simulate import pool_policy
from constructs_lib.cli.usage import usage_figure
from constructs_lib.model.loader import load_model
from constructs_lib.simulator import compare
from constructs_lib.simulator.report import RUN_COLOURS, RUNS_EXPLAINED, figure, load_pyplot, run_shares, table
from constructs_lib.simulator.traces import TraceJob, write_trace
from gpu_governance_runtime.contract import USAGE_METRICS
from gpu_governance_runtime.planners.reclaim import Settings

CONFIG = "constructs_lib/data/default-governance.yaml"
P5, G6E = "ml.p5.48xlarge", "ml.g6e.12xlarge"


def mixed_jobs() -> list[TraceJob]:
    """research on both types of pool sagemaker-training, training on p5 only."""
    jobs = [
        TraceJob(
            job_id=f"r{i}",
            team="research",
            submit_time=i * 60,
            duration=3600,
            instance_type=G6E if i % 2 else P5,
            count=4 if i % 2 else 2,
            priority=10,
            checkpointable=True,
        )
        for i in range(12)
    ]
    jobs += [
        TraceJob(
            job_id=f"t{i}",
            team="training",
            submit_time=300 + i * 60,
            duration=1800,
            instance_type=P5,
            count=2,
            priority=50,
            checkpointable=False,
        )
        for i in range(6)
    ]
    return jobs


def drawn_chart(jobs: list[TraceJob]):
    """The chart of ``jobs`` replayed on pool sagemaker-training, its results and the pool."""
    pool = pool_policy(load_model(CONFIG), "sagemaker-training")
    results = compare(
        jobs, shares=pool.shares, capacity=pool.capacity, tick_s=60, settings=Settings(), record_timeline=True
    )
    pyplot = load_pyplot()
    drawn = figure(pyplot, results, pool=pool.name, capacity=pool.capacity, shares=run_shares(pool.shares))
    yield drawn, results, pool
    pyplot.close(drawn)


@pytest.fixture(scope="module")
def chart():
    yield from drawn_chart(mixed_jobs())


def panels(drawn):
    return {axis.get_title().split(" in use")[0]: axis for axis in drawn.axes if " in use" in axis.get_title()}


def test_a_panel_per_run_and_instance_type_with_units_and_the_pool_capacity(chart):
    drawn, results, pool = chart
    by_title = panels(drawn)
    assert set(by_title) == {f"{run}: {kind}" for run in results for kind in (G6E, P5)}
    for title, axis in by_title.items():
        kind = title.split(": ")[1]
        assert axis.get_ylabel() == f"{kind} instances" and axis.get_xlabel() == "hours since the first submission"
        capacity_lines = [line for line in axis.get_lines() if line.get_linestyle() == "--"]
        assert [line.get_ydata()[0] for line in capacity_lines] == [pool.capacity[kind]]


def test_one_y_scale_down_each_instance_types_column_and_never_a_sum_of_types(chart):
    drawn, results, _ = chart
    by_title = panels(drawn)
    for kind in (G6E, P5):
        assert len({by_title[f"{run}: {kind}"].get_ylim() for run in results}) == 1
    # the p5 panel stacks p5 instances only: its top never passes the p5 capacity (8) although 16 g6e are in the pool
    p5_top = max(
        max(top for _, top in collection.get_paths()[0].vertices)
        for collection in by_title[f"policy: {P5}"].collections
    )
    assert p5_top <= 8


def test_run_colours_are_never_team_colours(chart):
    drawn, _, _ = chart
    team_colours = {
        to_hex(c.get_facecolor()[0])
        for axis in panels(drawn).values()
        for c in axis.collections
        if not (c.get_gid() or "").endswith("held-idle")  # hatched, no face
    }
    assert team_colours and not team_colours & {to_hex(c) for c in RUN_COLOURS}


def tail_jobs() -> list[TraceJob]:
    """research asks for 3 p5 at a time in every third job: more than its quota of 2, so under
    `static` those never run (the policy lets research borrow); a queue long enough for a tail."""
    jobs = [
        TraceJob(
            job_id=f"r{i}",
            team="research",
            submit_time=i * 600,
            duration=3 * 3600,
            instance_type=P5,
            count=3 if i % 3 == 0 else 1,
            priority=10,
            checkpointable=True,
        )
        for i in range(20)
    ]
    jobs += [
        TraceJob(
            job_id=f"t{i}",
            team="training",
            submit_time=i * 300,
            duration=7200,
            instance_type=P5,
            count=2,
            priority=50,
            checkpointable=False,
        )
        for i in range(12)
    ]
    return jobs


@pytest.fixture(scope="module")
def tail_chart():
    yield from drawn_chart(tail_jobs())


def by_gid(drawn) -> dict[str, object]:
    return {artist.get_gid(): artist for axis in drawn.axes for artist in axis.get_children() if artist.get_gid()}


def test_the_wait_chart_plots_the_jobs_that_never_ran_and_the_tables_percentiles(tail_chart):
    """Issue 41 item 2: under `static` 7 of research's 20 jobs never run. The chart used to draw
    its waits as 0 (a team's empty list became [0.0]) and boxes whose whiskers stopped far below
    the p95 the table printed."""
    drawn, results, _ = tail_chart
    artists = by_gid(drawn)
    (waits,) = [axis for axis in drawn.axes if axis.get_ylabel() == "wait (hours)"]
    labels = {tick.get_text(): tick.get_position()[1] for tick in waits.get_yticklabels()}
    never = labels["never ran"]
    static = results["static"].teams["research"]
    assert (static.jobs, static.jobs_unfinished, static.wait_p95_s) == (20, 7, None)
    assert artists["static/research/never"].get_offsets()[0][1] == never
    assert artists["static/research/never-count"].get_text() == "7/20"
    assert artists["static/research/p95"].get_ydata()[0] == never  # p95 is "never": 7 of 20 never ran
    assert "policy/research/never" not in artists and results["policy"].teams["research"].jobs_unfinished == 0
    for run, metrics in results.items():
        for team, stats in metrics.teams.items():
            plotted = sorted(y for _, y in artists[f"{run}/{team}/waits"].get_offsets())
            assert plotted == sorted(w / 3600 for w in metrics.waits[team])  # every finished job, the tail included
            for mark, value in (("p50", stats.wait_p50_s), ("p95", stats.wait_p95_s)):
                drawn_at = artists[f"{run}/{team}/{mark}"].get_ydata()[0]
                assert drawn_at == (never if value is None else value / 3600)
            assert max(plotted) < never
    assert "7/20 never ran" in table(results)


def test_usage_panels_draw_each_guarantee_the_idle_reservation_and_say_what_each_run_is(tail_chart):
    """Issue 41 item 3: production reserves 2 p5 and submits nothing: its idle quota is drawn
    (hatched) above what runs, and every team's guarantee is a line at its quota."""
    drawn, results, pool = tail_chart
    artists = by_gid(drawn)
    quotas = {share.name: share.quota[P5] for share in pool.shares}
    assert quotas == {"research": 2, "training": 4, "production": 2}
    for run in ("policy", "static"):
        for team, quota in quotas.items():
            assert list(artists[f"{run}/{P5}/guarantee/{team}"].get_ydata()) == [quota, quota]
        assert f"{run}/{P5}/held-idle" in artists
    assert not any(gid.startswith(f"pooled/{P5}/guarantee") for gid in artists)  # one queue: no guarantees
    held = artists[f"policy/{P5}/held-idle"].get_paths()[0].vertices
    first = results["policy"].usage_timeline[0]
    used = sum(first[1].get((team, P5), 0) for team in quotas)
    assert max(y for x, y in held if x == first[0] / 3600) == used + 2  # production's 2 reserved, idle
    for axis in panels(drawn).values():
        run = axis.get_title().split(":")[0]
        assert axis.get_title().endswith(RUNS_EXPLAINED[run])


def test_simulate_says_which_pool_it_chose(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    write_trace(mixed_jobs(), trace)
    assert main(["simulate", "--config", CONFIG, "--trace", str(trace), "--json"]) == 0
    assert capsys.readouterr().err == (
        "gpu-governance simulate: pool sagemaker-training (the first of sagemaker-training, ec2-gpu, "
        "hyperpod-eks, hyperpod-slurm; choose with --pool)\n"
    )
    assert main(["simulate", "--config", CONFIG, "--trace", str(trace), "--pool", "sagemaker-training", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_the_usage_chart_draws_each_pool_of_a_team_alone_on_one_scale():
    days = [datetime(2026, 11, 1, tzinfo=UTC) + timedelta(days=i) for i in range(3)]
    series = {
        (pool, "research", metric): {day: value for day in days}
        for pool, value in (("sagemaker-training", 4.0), ("ec2-gpu", 100.0))
        for metric in USAGE_METRICS
    }
    series |= {("sagemaker-training", "training", metric): {day: 2.0 for day in days} for metric in USAGE_METRICS}
    pyplot = load_pyplot()
    drawn = usage_figure(pyplot, series)
    try:
        by_title = {axis.get_title(): axis for axis in drawn.axes}
        assert set(by_title) == {
            f"team {t}, pool {p}" for t in ("research", "training") for p in ("ec2-gpu", "sagemaker-training")
        }
        research_training = by_title["team research, pool sagemaker-training"]
        assert len(research_training.get_lines()) == len(USAGE_METRICS)
        assert {tuple(line.get_ydata()) for line in research_training.get_lines()} == {
            (4.0, 4.0, 4.0)
        }  # not 104: pools are not summed
        assert len({axis.get_ylim() for axis in drawn.axes}) == 1
        assert all(
            axis.get_ylabel() == "instance-hours per day" and axis.get_xlabel() == "UTC day" for axis in drawn.axes
        )
    finally:
        pyplot.close(drawn)
