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
from constructs_lib.simulator.report import RUN_COLOURS, figure, load_pyplot
from constructs_lib.simulator.traces import TraceJob, write_trace
from gpu_governance_runtime.contract import USAGE_METRICS
from gpu_governance_runtime.reclaim.planner import Settings

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


@pytest.fixture(scope="module")
def chart():
    pool = pool_policy(load_model(CONFIG), "sagemaker-training")
    results = compare(
        mixed_jobs(), shares=pool.shares, capacity=pool.capacity, tick_s=60, settings=Settings(), record_timeline=True
    )
    pyplot = load_pyplot()
    drawn = figure(pyplot, results, pool=pool.name, capacity=pool.capacity)
    yield drawn, results, pool
    pyplot.close(drawn)


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
    team_colours = {to_hex(c.get_facecolor()[0]) for axis in panels(drawn).values() for c in axis.collections}
    assert team_colours and not team_colours & {to_hex(c) for c in RUN_COLOURS}


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
