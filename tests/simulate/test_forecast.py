"""The start-time forecast (issue 43 item 5): the live pool replayed through the planner the
simulator runs, on small pools whose answer is computed by hand, and against full replays."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from constructs_lib.simulator.engine import simulate
from constructs_lib.simulator.forecast import (
    LiveJob,
    LivePool,
    RunTimes,
    duration_words,
    forecast,
    live_pool_at,
    next_start,
)
from constructs_lib.simulator.traces import TraceJob
from gpu_governance_runtime.planners.reclaim import Settings, Share, Strategy
from gpu_governance_runtime.policy import PoolPolicy

G5 = "ml.g5.xlarge"
NOW = 10_000.0  # not on a tick: the first tick after it is 10,020 (ticks of 60 s)
HOUR = 3_600.0


def pool(*shares: Share, size: int = 4, grace: float = 0.0) -> PoolPolicy:
    return PoolPolicy(name="gpu", backend="batch_quota_share", capacity={G5: size}, shares=shares, grace_s=grace)


def share(name, quota, strategy=Strategy.LEND_AND_BORROW, **extra) -> Share:
    return Share(name=name, quota={G5: quota}, strategy=strategy, **extra)


def running(job_id, team, count, *, started, run_time=None, priority=0):
    return LiveJob(
        job_id=job_id,
        team=team,
        instance_type=G5,
        count=count,
        priority=priority,
        submitted_at=started,
        running=True,
        started_at=started,
        run_time_s=run_time,
    )


def waiting(job_id, team, count, *, submitted=NOW - 100, run_time=HOUR, priority=0):
    return LiveJob(
        job_id=job_id,
        team=team,
        instance_type=G5,
        count=count,
        priority=priority,
        submitted_at=submitted,
        running=False,
        run_time_s=run_time,
    )


def likely(policy, *jobs, history=None, **options):
    targets = [j.job_id for j in jobs if not j.running]
    found = forecast(policy, LivePool(now=NOW, jobs=jobs), targets, history=history, **options)
    return {job_id: f.likely_s for job_id, f in found.items()}


def test_priority_orders_the_team_queue():
    # a's own job ends at 11,200 (tick 11,220); then the priority-9 job (submitted later) runs an
    # hour, and the older priority-5 job starts when it ends, at 14,820
    starts = likely(
        pool(share("a", 4, Strategy.LEND)),
        running("run", "a", 4, started=NOW - 600, run_time=1_800),
        waiting("old", "a", 4, submitted=NOW - 500, priority=5),
        waiting("urgent", "a", 4, submitted=NOW - 10, priority=9),
    )
    assert starts == {"urgent": 1_220.0, "old": 4_820.0}


def test_in_share_preemption_starts_a_higher_priority_job_at_the_next_tick():
    policy = pool(share("a", 4, Strategy.LEND, in_share_preemption=True))
    low = running("low", "a", 4, started=NOW - 600, run_time=7_200)
    assert likely(policy, low, waiting("high", "a", 4, priority=9)) == {"high": 20.0}
    # without in-share preemption it waits for the low-priority job to end (16,600: tick 16,620)
    policy = pool(share("a", 4, Strategy.LEND))
    assert likely(policy, low, waiting("high", "a", 4, priority=9)) == {"high": 6_620.0}


def test_borrowing_idle_capacity_and_the_borrow_limit():
    own = running("own", "b", 2, started=NOW - 60, run_time=HOUR)  # ends at 13,540: tick 13,560
    borrower = share("b", 2)
    assert likely(pool(share("a", 2, Strategy.LEND), borrower), own, waiting("more", "b", 2)) == {"more": 20.0}
    # a reserve share lends nothing: b waits for its own job
    assert likely(pool(share("a", 2, Strategy.RESERVE), borrower), own, waiting("more", "b", 2)) == {"more": 3_560.0}


@pytest.mark.parametrize("grace, start", [(0.0, 20.0), (300.0, 320.0)])
def test_a_lender_gets_its_guarantee_back_at_the_next_tick_plus_the_grace(grace, start):
    # b borrows the whole pool for 10 hours; a's guarantee job reclaims 2 of it, its victims
    # running on for the grace
    borrowed = [running(f"b{i}", "b", 1, started=NOW - 600, run_time=10 * HOUR) for i in range(4)]
    policy = pool(share("a", 2, Strategy.LEND), share("b", 2), grace=grace)
    assert likely(policy, *borrowed, waiting("mine", "a", 2)) == {"mine": start}


def test_a_borrower_waits_for_lent_capacity_nobody_reclaims_for_it():
    # a runs its whole quota; b's job beyond b's own quota waits for the borrowed... for a's job to end
    policy = pool(share("a", 2, Strategy.LEND), share("b", 2))
    jobs = (
        running("a1", "a", 2, started=NOW, run_time=2 * HOUR),
        running("b1", "b", 2, started=NOW - 60, run_time=HOUR),
        waiting("b2", "b", 4),
    )
    assert likely(policy, *jobs) == {"b2": 7_220.0}  # a's job ends at 17,200, b's before: tick 17,220


def test_an_unknown_run_time_is_said_and_history_gives_a_range():
    policy = pool(share("a", 4, Strategy.LEND))
    jobs = (running("run", "a", 4, started=NOW - 600), waiting("next", "a", 4))
    [unknown] = forecast(policy, LivePool(now=NOW, jobs=jobs), ["next"]).values()
    assert (unknown.earliest_s, unknown.likely_s, unknown.latest_s) == (None, None, None)
    assert unknown.words() == (
        "start unknown: it waits on running jobs (1) whose run time is neither declared nor in the history (--history)"
    )
    # past jobs of a ran 5, 10, ..., 50 minutes: of those longer than the 10 minutes this one has
    # run (15 ... 50), the 25th, 50th and 75th percentiles are 25, 35 and 45 minutes: 15, 25 and 35 left
    history = RunTimes({"a": [m * 60.0 for m in range(5, 55, 5)]})
    [ranged] = forecast(policy, LivePool(now=NOW, jobs=jobs), ["next"], history=history).values()
    assert (ranged.earliest_s, ranged.likely_s, ranged.latest_s) == (920.0, 1_520.0, 2_120.0)
    assert ranged.words() == "starts in about 25 min (15 min to 35 min)"


def test_a_smaller_job_that_starts_sooner_is_offered():
    policy = pool(share("a", 4, Strategy.LEND))
    jobs = (running("run", "a", 2, started=NOW, run_time=86_400), waiting("big", "a", 4))
    [found] = forecast(policy, LivePool(now=NOW, jobs=jobs), ["big"]).values()
    assert found.smaller == ((2, 20.0),)
    assert found.words() == "starts in about 24 h; 1 min with 2 instances"
    assert found.as_json()["smaller"] == [{"count": 2, "likely_s": 20.0}]


@pytest.mark.parametrize("seed", range(4))
def test_with_no_later_arrival_the_forecast_is_the_replay(seed):
    """From any moment after the last submission, with every run time declared, the forecast of
    every waiting job is exactly its start in the full replay (borrowing, reclaim and in-share
    preemption included): the forecast is the simulator's replay, started from the live pool."""
    rng = random.Random(seed)
    policy = pool(share("a", 4, in_share_preemption=True), share("b", 4), size=8)
    jobs = [
        TraceJob(
            job_id=f"j{n}",
            team=rng.choice("ab"),
            submit_time=rng.uniform(0, HOUR),
            duration=rng.uniform(300, 5_000),
            instance_type=G5,
            count=rng.choice((1, 2, 4)),
            priority=rng.choice((0, 5, 9)),
            checkpointable=rng.random() < 0.3,
        )
        for n in range(60)
    ]
    full = simulate(
        jobs, shares=policy.shares, capacity=policy.capacity, tick_s=60, settings=Settings(), record_runs=True
    )
    assert full.preemptions > 0
    moment = HOUR + 0.5
    live = live_pool_at(jobs, full, moment, declared=True)
    targets = [j.job_id for j in live.jobs if not j.running]
    assert len(targets) > 40
    found = forecast(policy, live, targets, alternatives=False)
    assert {t: found[t].likely_s for t in targets} == {t: next_start(full, t, moment) - moment for t in targets}


def test_duration_words():
    assert [duration_words(s) for s in (0, 20, 2_400, 10_800, 5_400, 90_000, 259_200)] == [
        "now",
        "1 min",
        "40 min",
        "3 h",
        "1.5 h",
        "25 h",
        "3 days",
    ]


def test_a_requeued_job_borrows_again_only_after_its_backoff():
    # b's job was preempted once and requeued 100 s ago: it cannot checkpoint, so it may borrow a's
    # idle quota only reborrow_backoff_s after its requeue (the planner's anti-thrash), as the
    # controller would let it: the first tick after 9,900 + the backoff
    policy = pool(share("a", 2, Strategy.LEND), share("b", 2))
    own = running("own", "b", 2, started=NOW - 60, run_time=10 * HOUR)
    again = replace(waiting("again", "b", 2, submitted=NOW - 100), times_preempted=1)
    backoff = policy.settings().reborrow_backoff_s
    first_tick_after = -(-(NOW - 100 + backoff) // 60) * 60
    assert likely(policy, own, again) == {"again": first_tick_after - NOW}
    assert likely(policy, own, replace(again, times_preempted=0)) == {"again": 20.0}
