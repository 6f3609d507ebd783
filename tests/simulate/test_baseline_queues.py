"""The baselines' queues (engine._Queues) hand the planner only the jobs that could start: the
replays must be exactly those of planning over every waiting job (the general path)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from constructs_lib.cli.simulate import pool_shares
from constructs_lib.model.loader import load_model
from constructs_lib.simulator import engine
from constructs_lib.simulator.engine import pooled_share, simulate, static_shares
from constructs_lib.simulator.traces import TraceJob, convert_openb
from gpu_governance_runtime.reclaim.planner import Settings, Share, Strategy

ROOT = Path(__file__).resolve().parents[2]
# ../shared/traces next to the checkout (docs/performance.md), or next to the worktrees' folder
OPENB = next(
    (p for p in (base / "shared" / "traces" / "openb_pod_list_gpuspec33.csv" for base in (ROOT.parent, ROOT.parent.parent)) if p.exists()),
    ROOT.parent / "shared" / "traces" / "openb_pod_list_gpuspec33.csv",
)
TYPES = {"ml.g5.xlarge": 16, "ml.p4d.24xlarge": 6}


def replay(monkeypatch, jobs, *, shares, capacity, pooled, queues):
    """The metrics (timeline included) and each job's start times, with or without the queues."""
    starts: dict[str, list[float]] = {}
    plan_tick = engine.plan_tick

    def recording(state, settings):
        plan = plan_tick(state, settings)
        for start in plan.starts:
            starts.setdefault(start.job_id, []).append(state.now)
        return plan

    with monkeypatch.context() as patch:
        patch.setattr(engine, "plan_tick", recording)
        if not queues:
            patch.setattr(engine, "_independent_queues", lambda shares, capacity: False)
        metrics = simulate(jobs, shares=shares, capacity=capacity, tick_s=60, settings=Settings(), pooled=pooled, record_timeline=True)
    return metrics, starts


def assert_same_replays(monkeypatch, jobs, shares, capacity):
    for name, run_shares, pooled in (("static", static_shares(shares), False), ("pooled", pooled_share(capacity), True)):
        assert engine._independent_queues(run_shares, capacity), name
        fast, fast_starts = replay(monkeypatch, jobs, shares=run_shares, capacity=capacity, pooled=pooled, queues=True)
        general, general_starts = replay(monkeypatch, jobs, shares=run_shares, capacity=capacity, pooled=pooled, queues=False)
        assert fast.preemptions == 0, name  # so a job finishes at its one start + its duration
        assert fast_starts == general_starts, name
        assert all(len(times) == 1 for times in fast_starts.values()), name
        assert fast == general, name  # every metric, the per-team waits and the usage timeline
        assert fast.jobs_completed > 0 and (name == "pooled" or fast.teams), name


def random_trace(seed: int, jobs: int) -> list[TraceJob]:
    rng = random.Random(seed)
    clock, trace = 0.0, []
    for n in range(jobs):
        clock += rng.expovariate(1 / 40)
        instance_type = rng.choice(sorted(TYPES))
        trace.append(
            TraceJob(
                job_id=f"j{n}", team=rng.choice(("a", "b", "c")), submit_time=round(clock, 1), duration=round(rng.expovariate(1 / 900), 1) + 1,
                instance_type=instance_type, count=rng.randint(1, TYPES[instance_type]), priority=rng.choice((10, 50, 90)),
                checkpointable=rng.random() < 0.3,
            )
        )
    return trace


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_seeded_random_traces_replay_exactly_as_before(monkeypatch, seed):
    rng = random.Random(seed)
    # quotas that fit the pool, one team with none of a type, one far over its quota
    shares = (
        Share(name="a", quota={"ml.g5.xlarge": rng.randint(1, 8), "ml.p4d.24xlarge": 3}, strategy=Strategy.LEND),
        Share(name="b", quota={"ml.g5.xlarge": 6}, strategy=Strategy.LEND_AND_BORROW, in_share_preemption=True),
        Share(name="c", quota={"ml.g5.xlarge": 1, "ml.p4d.24xlarge": 2}, strategy=Strategy.RESERVE),
    )
    assert_same_replays(monkeypatch, random_trace(seed, 600), shares, TYPES)


@pytest.mark.skipif(not OPENB.exists(), reason="needs ../shared/traces (the openb trace)")
def test_an_openb_slice_replays_exactly_as_before(monkeypatch):
    shares, capacity = pool_shares(load_model("examples/openb-governance.yaml"), None)
    jobs = [j for j in itertools.islice(convert_openb(OPENB), 2_500) if all(j.count <= size for size in capacity.values())]
    assert_same_replays(monkeypatch, jobs, shares, capacity)


def test_shares_that_lend_or_overbook_the_pool_take_the_general_path():
    a = Share(name="a", quota={"t": 3}, strategy=Strategy.RESERVE)
    assert engine._independent_queues((a, Share(name="b", quota={"t": 1}, strategy=Strategy.RESERVE)), {"t": 4})
    assert not engine._independent_queues((a, Share(name="b", quota={"t": 2}, strategy=Strategy.RESERVE)), {"t": 4})
    assert not engine._independent_queues((a, Share(name="b", quota={"t": 1}, strategy=Strategy.LEND)), {"t": 4})
    assert not engine._independent_queues((a, Share(name="b", quota={"t": 1}, strategy=Strategy.RESERVE, in_share_preemption=True)), {"t": 4})
