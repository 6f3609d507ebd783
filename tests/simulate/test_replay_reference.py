"""The engine's replays decide exactly as the obvious reference (reference_replay.py: the whole
pool handed to the planner on every tick, as main did before the speed work of issue 16): every
job's runs (start and end of each, so its preemptions), every metric, the waits and the usage
timeline, for the policy and both baselines, on the openb trace and on synthetic traces."""

from __future__ import annotations

import importlib.util
import itertools
import random
from dataclasses import replace
from pathlib import Path

import pytest

from constructs_lib.cli.simulate import pool_shares
from constructs_lib.model.loader import load_model
from constructs_lib.simulator import deciders
from constructs_lib.simulator.engine import compare, pooled_share, simulate, static_shares
from constructs_lib.simulator.traces import TraceJob, convert_openb
from gpu_governance_runtime.planners.reclaim import Settings, Share, Strategy

from .reference_replay import reference_replay

ROOT = Path(__file__).resolve().parents[2]
# ../shared/traces next to the checkout (docs/performance.md), or next to the worktrees' folder
TRACES = next(
    (base / "shared" / "traces" for base in (ROOT.parent, ROOT.parent.parent) if (base / "shared" / "traces").exists()),
    ROOT.parent / "shared" / "traces",
)
needs_openb = pytest.mark.skipif(
    not (TRACES / "openb_pod_list_gpuspec33.csv").exists(), reason="needs ../shared/traces (the openb trace)"
)
TYPES = {"ml.g5.xlarge": 16, "ml.p4d.24xlarge": 6}


def assert_replays_as_reference(jobs, shares, capacity, settings=Settings(), tick_s=60.0):
    """All three runs; returns the policy's metrics so a test can check it exercised something."""
    runs = {
        "policy": (tuple(shares), False),
        "static": (static_shares(shares), False),
        "pooled": (pooled_share(capacity), True),
    }
    for name, (run_shares, pooled) in runs.items():
        fast = simulate(
            jobs,
            shares=run_shares,
            capacity=capacity,
            tick_s=tick_s,
            settings=settings,
            pooled=pooled,
            record_timeline=True,
            record_runs=True,
        )
        reference = reference_replay(
            jobs, shares=run_shares, capacity=capacity, tick_s=tick_s, settings=settings, pooled=pooled
        )
        assert fast.runs == reference.runs, name  # every job: when each run started and ended
        assert fast == reference, name  # every metric, the waits, the preemption times, the timeline
        assert fast.runs and fast.usage_timeline, name
    # compare() shares one checked, ordered trace among the three runs: the same results
    compared = compare(jobs, shares=shares, capacity=capacity, tick_s=tick_s, settings=settings)
    alone = simulate(jobs, shares=shares, capacity=capacity, tick_s=tick_s, settings=settings)
    assert compared["policy"] == alone
    return alone


@pytest.fixture(scope="module")
def openb115():
    """The trace of issue 16: the openb jobs submitted from day 115 on."""
    return [job for job in convert_openb(TRACES / "openb_pod_list_gpuspec33.csv") if job.submit_time >= 115 * 86_400]


@needs_openb
@pytest.mark.parametrize(
    "settings, declared",
    [
        (Settings(), False),
        (Settings(min_run_time_s=1), False),
        (Settings(min_run_time_s=1, borrow_horizon_s=86_400), True),
    ],
    ids=["defaults", "min-run-time-1", "borrow-horizon"],
)
def test_the_openb_trace_of_issue_16(openb115, settings, declared):
    jobs = [replace(job, max_run_time=job.duration) for job in openb115] if declared else openb115
    shares, capacity = pool_shares(load_model(ROOT / "benchmarks" / "openb-lend-and-borrow.yaml"), None)
    policy = assert_replays_as_reference(jobs, shares, capacity, settings)
    assert policy.preemptions > 0 and policy.jobs_completed == len(jobs)


@needs_openb
@pytest.mark.parametrize("preset", ["steady", "critical"])
def test_the_seed_presets_under_pressure(tmp_path, preset):
    """examples/openb-governance.yaml at 48 instances, serving 30, platform 10 (docs/performance.md)."""
    text = (ROOT / "examples" / "openb-governance.yaml").read_text()
    for old, new in (
        ("ml.g5.xlarge: 64", "ml.g5.xlarge: 48"),
        ("{ml.g5.xlarge: 36}", "{ml.g5.xlarge: 30}"),
        ("{ml.g5.xlarge: 12}", "{ml.g5.xlarge: 10}"),
        ("preset: steady", f"preset: {preset}"),
    ):
        assert old in text
        text = text.replace(old, new)
    config = tmp_path / "pressure.yaml"
    config.write_text(text)
    shares, capacity = pool_shares(load_model(config), None)
    jobs = list(itertools.islice(convert_openb(TRACES / "openb_pod_list_default.csv"), 3_000))
    assert assert_replays_as_reference(jobs, shares, capacity).preemptions > 0


def test_the_benchmark_trace():
    """benchmarks/simulator.py's synthetic trace, a slice, under the seed's presets."""
    spec = importlib.util.spec_from_file_location("simulator_benchmark", ROOT / "benchmarks" / "simulator.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    shares, capacity = pool_shares(load_model(ROOT / "examples" / "openb-governance.yaml"), None)
    ((instance_type, size),) = capacity.items()
    policy = assert_replays_as_reference(benchmark.synthetic_trace(4_000, size, instance_type), shares, capacity)
    assert policy.preemptions > 0


def random_trace(seed: int, jobs: int, not_restartable: float = 0.0) -> list[TraceJob]:
    """``not_restartable``: the share of jobs the controller could not bring back (issue 38)."""
    rng = random.Random(seed)
    clock, trace = 0.0, []
    for n in range(jobs):
        clock += rng.expovariate(1 / 40)
        instance_type = rng.choice(sorted(TYPES))
        duration = round(rng.expovariate(1 / 900), 1) + 1
        trace.append(
            TraceJob(
                job_id=f"j{n}",
                team=rng.choice(("a", "b", "c")),
                submit_time=round(clock, 1),
                duration=duration,
                instance_type=instance_type,
                count=rng.randint(1, TYPES[instance_type] // 2),
                priority=rng.choice((10, 50, 90)),
                checkpointable=rng.random() < 0.3,
                max_run_time=rng.choice((None, duration, 4 * duration)),
                restartable=not (not_restartable and rng.random() < not_restartable),
            )
        )
    return trace


SETTINGS = [
    Settings(),
    Settings(min_run_time_s=1, max_preemptions_per_tick=2),  # the preemption cap cuts ticks short
    Settings(max_preemption_searches_per_tick=2, reborrow_backoff_s=300),  # the search cap
    Settings(min_run_time_s=1, borrow_horizon_s=1_200),
    Settings(max_preemptions_per_tick=0),  # no reclaim at all: guarantee breaches, whatever the rules
]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_seeded_random_traces_with_two_instance_types(seed):
    rng = random.Random(seed)
    # one team with none of a type, one far over its quota; seed 4 overbooks the pool, so its
    # static baseline goes through the planner too
    shares = (
        Share(
            name="a",
            quota={"ml.g5.xlarge": rng.randint(4, 7) if seed != 4 else 10, "ml.p4d.24xlarge": 3},
            strategy=Strategy.LEND,
        ),
        Share(
            name="b",
            quota={"ml.g5.xlarge": 6},
            strategy=Strategy.LEND_AND_BORROW,
            in_share_preemption=True,
            fair_share_weight=20,
        ),
        Share(name="c", quota={"ml.g5.xlarge": 3, "ml.p4d.24xlarge": 2}, strategy=Strategy.RESERVE),
    )
    assert deciders.independent_queues(static_shares(shares), TYPES) == (seed != 4)
    policy = assert_replays_as_reference(random_trace(seed, 600), shares, TYPES, SETTINGS[seed - 1])
    assert policy.preemptions > 0 if seed != 5 else policy.guarantee_breaches > 0  # breaches are compared too


@pytest.mark.parametrize("seed", [1, 2])
def test_jobs_stopped_for_good_replay_as_the_reference(seed):
    """Issue 38: jobs the controller cannot bring back are reclaimed beyond their team's quota and
    not requeued, in the engine as in the reference."""
    shares = (
        Share(name="a", quota={"ml.g5.xlarge": 8, "ml.p4d.24xlarge": 4}, strategy=Strategy.LEND),
        Share(name="b", quota={"ml.g5.xlarge": 4}, strategy=Strategy.LEND_AND_BORROW, in_share_preemption=True),
        Share(name="c", quota={"ml.g5.xlarge": 4, "ml.p4d.24xlarge": 2}, strategy=Strategy.LEND_AND_BORROW),
    )
    policy = assert_replays_as_reference(random_trace(seed, 400, not_restartable=0.3), shares, TYPES)
    assert policy.stopped_for_good > 0 and policy.not_restartable > 0


def test_shares_that_lend_or_overbook_the_pool_take_the_general_path():
    a = Share(name="a", quota={"t": 3}, strategy=Strategy.RESERVE)
    assert deciders.independent_queues((a, Share(name="b", quota={"t": 1}, strategy=Strategy.RESERVE)), {"t": 4})
    assert not deciders.independent_queues((a, Share(name="b", quota={"t": 2}, strategy=Strategy.RESERVE)), {"t": 4})
    assert not deciders.independent_queues((a, Share(name="b", quota={"t": 1}, strategy=Strategy.LEND)), {"t": 4})
    assert not deciders.independent_queues(
        (a, Share(name="b", quota={"t": 1}, strategy=Strategy.RESERVE, in_share_preemption=True)), {"t": 4}
    )
