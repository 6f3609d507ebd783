"""``simulate --sweep`` (issue 28): the grid's parsing, bad input, the parallel run and that each
configuration's result is exactly a single replay of it."""

from __future__ import annotations

import json
import os
from typing import ClassVar

import pytest

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.simulator import sweep
from constructs_lib.simulator.engine import pooled_share, simulate
from constructs_lib.simulator.sweep import (
    Grid,
    Point,
    frontier,
    groups_at,
    parse_grid,
    run_sweep,
    shares_at,
    sweep_json,
)
from constructs_lib.simulator.traces import write_trace
from gpu_governance_runtime.planners.reclaim import Settings, Share, ShareGroup, Strategy

from .test_simulate import G5, job

TEAMS = ("serving", "platform", "research")
SHARES = (
    Share(name="serving", quota={G5: 4}, strategy=Strategy.LEND_AND_BORROW),
    Share(name="platform", quota={G5: 2}, strategy=Strategy.LEND_AND_BORROW),
    Share(name="research", quota={G5: 2}, strategy=Strategy.LEND_AND_BORROW),
)
CAPACITY = {G5: 8}
CONFIG = "benchmarks/openb-lend-and-borrow.yaml"


def test_the_grid_is_every_combination_and_keys_not_given_keep_the_files_values():
    base = Settings(reborrow_backoff_s=7_200)
    grid = parse_grid(
        ["size=32,48", "split=50/20/30,40/30/30", "grace=0,300", "min_run_time=60"], teams=TEAMS, size=40, base=base
    )
    assert grid.sizes == (32, 48) and grid.splits == ((50, 20, 30), (40, 30, 30))
    assert {(s.grace_s, s.min_run_time_s, s.reborrow_backoff_s) for s in grid.settings} == {
        (0, 60, 7_200),
        (300, 60, 7_200),
    }
    assert len(grid.points()) == 8
    alone = parse_grid([], teams=TEAMS, size=40, base=base)
    assert alone.points() == [Point(size=40, split=None, settings=base)]


def test_a_split_gives_each_team_its_percent_of_the_size_and_no_split_scales_the_files_quotas():
    (serving, platform, research), capacity = shares_at(
        Point(size=48, split=(50, 20, 30), settings=Settings()), SHARES, CAPACITY
    )
    assert (serving.quota, platform.quota, research.quota, capacity) == ({G5: 24}, {G5: 9}, {G5: 14}, {G5: 48})
    scaled, _ = shares_at(Point(size=16, split=None, settings=Settings()), SHARES, CAPACITY)
    assert [s.quota[G5] for s in scaled] == [8, 4, 4]
    same, _ = shares_at(Point(size=8, split=None, settings=Settings()), SHARES, CAPACITY)
    assert same == SHARES


@pytest.mark.parametrize(
    "entry, message",
    [
        ("size=0", "--grid size: not a valid value ('0') - whole numbers of instances >= 1"),
        ("size=forty", "--grid size: not a valid value ('forty')"),
        ("split=50/20", "--grid split: not a valid value ('50/20') - percent of the pool per team"),
        ("split=60/30/20", "--grid split: not a valid value ('60/30/20')"),
        ("grace=3601", "--grid grace: not a valid value ('3601') - seconds from 0 to 3600"),
        ("min_run_time=0", "--grid min_run_time: not a valid value ('0') - seconds > 0"),
        ("reborrow_backoff=-1", "--grid reborrow_backoff: not a valid value ('-1') - seconds >= 0"),
        (
            "usage_half_life=0",
            "--grid usage_half_life: not a valid value ('0') - seconds > 0 (fair share by decayed usage), or none",
        ),
        ("usage_half_life=inf", "--grid usage_half_life: not a valid value ('inf')"),
        ("tick=30", "--grid tick: not KEY=VALUES with a known key ('tick=30')"),
        ("size", "--grid: not KEY=VALUES with a known key ('size')"),
    ],
)
def test_a_bad_grid_entry_is_named_with_what_is_allowed(entry, message):
    with pytest.raises(GovernanceError) as error:
        parse_grid([entry], teams=TEAMS, size=40, base=Settings())
    assert message in str(error.value)


def test_a_key_given_twice_is_refused():
    with pytest.raises(GovernanceError, match="given twice"):
        parse_grid(["size=32", "size=40"], teams=TEAMS, size=40, base=Settings())


@pytest.fixture
def trace(tmp_path):
    """Contention: research borrows most of the pool without checkpoints, then serving and
    platform come back for their quotas."""
    jobs = [job(f"r{i}", "research", i * 50, 3_000, 2) for i in range(4)]
    jobs += [job(f"s{i}", "serving", 400 + i * 300, 900, 2, priority=90) for i in range(4)]
    jobs += [job(f"p{i}", "platform", 700 + i * 200, 1_200, 1, priority=50) for i in range(3)]
    path = tmp_path / "trace.csv"
    write_trace(jobs, path)
    return path, jobs


class RecordingPool:
    """The real process pool, recording how many workers it was asked for."""

    asked: ClassVar[list[int]] = []

    def __init__(self, processes, trace, classes):
        RecordingPool.asked.append(processes)
        self.pool = sweep.process_pool(processes, trace, classes)

    def __enter__(self):
        self.pool.__enter__()
        return self

    def __exit__(self, *exc):
        return self.pool.__exit__(*exc)

    def map(self, function, tasks, chunksize):
        return self.pool.map(function, tasks, chunksize=chunksize)


def test_the_sweep_runs_in_worker_processes_and_each_result_is_the_single_replay(trace):
    path, jobs = trace
    grid = Grid(
        sizes=(6, 8),
        splits=((50, 25, 25), (25, 25, 25)),
        settings=(Settings(min_run_time_s=1), Settings(min_run_time_s=1, grace_s=300), Settings(reborrow_backoff_s=60)),
    )
    RecordingPool.asked.clear()
    outcomes = run_sweep(
        str(path), grid, shares=SHARES, capacity=CAPACITY, tick_s=60, processes=2, pool_factory=RecordingPool
    )
    assert RecordingPool.asked == [2]
    assert [o.point for o in outcomes] == grid.points()
    for outcome in outcomes:
        shares, capacity = shares_at(outcome.point, SHARES, CAPACITY)
        assert outcome.policy == simulate(
            jobs, shares=shares, capacity=capacity, tick_s=60, settings=outcome.point.settings
        )
        assert outcome.pooled == simulate(
            jobs, shares=pooled_share(capacity), capacity=capacity, tick_s=60, pooled=True
        )
    assert any(o.policy.preemptions for o in outcomes)  # the grid exercised reclaim
    assert any(o.policy.lost_work_capacity_s for o in outcomes)


def test_the_worker_processes_are_other_processes_each_holding_the_trace(trace):
    path, jobs = trace
    with sweep.process_pool(2, str(path)) as workers:
        seen = set(workers.map(_worker_view, range(8), chunksize=1))
    assert seen and all(pid != os.getpid() and count == len(jobs) for pid, count in seen)


def _worker_view(_):
    return os.getpid(), len(sweep._jobs)


def test_the_frontier_keeps_only_configurations_nothing_beats_on_both(trace):
    path, _ = trace
    grid = Grid(
        sizes=(6,),
        splits=((50, 25, 25),),
        settings=(Settings(min_run_time_s=1), Settings(reborrow_backoff_s=31_536_000)),
    )
    outcomes = run_sweep(str(path), grid, shares=SHARES, capacity=CAPACITY, tick_s=60, processes=1)
    best = frontier(outcomes)
    assert best
    for kept in best:
        assert not any(
            o.goodput_vs_pooled > kept.goodput_vs_pooled and o.lost_percent < kept.lost_percent for o in outcomes
        )


def test_simulate_sweep_prints_each_configuration_and_the_settings_frontier(trace, capsys):
    path, _ = trace
    assert (
        main(
            [
                "simulate",
                "--config",
                CONFIG,
                "--trace",
                str(path),
                "--sweep",
                "--grid",
                "size=8,10",
                "--grid",
                "grace=0,120",
                "--processes",
                "2",
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert [(c["size"], c["grace_s"]) for c in result["configurations"]] == [(8, 0), (8, 120), (10, 0), (10, 120)]
    assert {s["grace_s"] for s in result["settings"]} == {0, 120}
    assert main(["simulate", "--config", CONFIG, "--trace", str(path), "--sweep", "--grid", "size=8"]) == 0
    assert "frontier" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sweep", "--grid", "size=x"], "--grid size: not a valid value ('x')"),
        (["--grid", "size=32"], "--grid: only with --sweep"),
        (["--processes", "2"], "--processes: only with --sweep"),
        (["--sweep", "--processes", "0"], "--processes: not a number of processes (0) - 1 or more"),
        (["--sweep", "--compare", CONFIG], "--compare: not with --sweep"),
    ],
)
def test_bad_sweep_options_exit_2_with_the_reason(trace, capsys, argv, message):
    path, _ = trace
    assert main(["simulate", "--config", CONFIG, "--trace", str(path), *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err


def test_a_sweep_reads_a_trace_that_names_the_files_priority_classes(trace, capsys):
    """simulate took class names since issue 41; --sweep read the trace without the file's classes
    and refused them (in the parent and in every worker)."""
    path, _ = trace
    by_name = path.with_name("by-name.csv")
    rows = path.read_text().splitlines()
    column = rows[0].split(",").index("priority")
    names = {"90": "critical", "50": "standard"}
    renamed = [rows[0]] + [
        ",".join(names.get(c, c) if i == column else c for i, c in enumerate(row.split(","))) for row in rows[1:]
    ]
    assert sum(name in "".join(renamed) for name in names.values()) == 2  # both classes are named
    by_name.write_text("\n".join(renamed) + "\n")
    results = []
    for each in (path, by_name):
        argv = ["simulate", "--config", CONFIG, "--trace", str(each), "--sweep", "--grid", "size=8", "--json"]
        assert main([*argv, "--processes", "2"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    assert results[0] == results[1]


def test_the_usage_half_life_is_a_grid_key_and_none_orders_by_what_is_borrowed_now():
    grid = parse_grid(["usage_half_life=none,86400"], teams=TEAMS, size=8, base=Settings(usage_half_life_s=3_600))
    assert [s.usage_half_life_s for s in grid.settings] == [None, 86_400]
    assert (
        parse_grid([], teams=TEAMS, size=8, base=Settings(usage_half_life_s=3_600)).settings[0].usage_half_life_s
        == 3_600
    )


# platform and research in a group of 5 inside a group of 6 (the file's 8-instance pool)
TREE = (
    ShareGroup(name="org", shares=(), quota={G5: 6}, borrowing_limit={}),
    ShareGroup(name="lab", shares=("platform", "research"), quota={G5: 5}, parent="org", lending_limit={G5: 2}),
)


def test_the_tree_is_scaled_to_each_point_and_covers_its_teams_there():
    point = Point(size=16, split=None, settings=Settings())
    org, lab = groups_at(point, TREE, shares_at(point, SHARES, CAPACITY)[0], CAPACITY)
    assert (org.quota, lab.quota, lab.lending_limit, lab.borrowing_limit) == ({G5: 12}, {G5: 10}, {G5: 4}, None)
    # a split that gives the group's teams more than the scaled quota: the quota covers them
    split = Point(size=8, split=(10, 45, 45), settings=Settings())
    org, lab = groups_at(split, TREE, shares_at(split, SHARES, CAPACITY)[0], CAPACITY)
    assert (lab.quota, org.quota) == ({G5: 6}, {G5: 6})


def test_the_sweep_replays_the_pools_tree_and_its_half_lives(trace):
    path, jobs = trace
    grid = parse_grid(["usage_half_life=none,3600"], teams=TEAMS, size=8, base=Settings(min_run_time_s=1))
    outcomes = run_sweep(str(path), grid, shares=SHARES, capacity=CAPACITY, tick_s=60, groups=TREE, processes=1)
    for outcome in outcomes:
        assert outcome.policy == simulate(
            jobs, shares=SHARES, capacity=CAPACITY, tick_s=60, settings=outcome.point.settings, groups=TREE
        )
    flat = run_sweep(str(path), grid, shares=SHARES, capacity=CAPACITY, tick_s=60, processes=1)
    assert [o.policy for o in outcomes] != [o.policy for o in flat]  # the tree changes the replay
    assert [c["usage_half_life_s"] for c in sweep_json(outcomes)["configurations"]] == [None, 3_600]
