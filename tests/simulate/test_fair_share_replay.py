"""The replay orders borrowers by decayed usage as the controller does (reclaim/fair_share.py):
each team's usage is advanced by the same computation at every moment its use changes."""

from __future__ import annotations

from constructs_lib.simulator.engine import Resume, simulate
from constructs_lib.simulator.traces import TraceJob
from gpu_governance_runtime.planners.reclaim import Settings, Share, Strategy

G5 = "ml.g5.xlarge"
HOUR = 3600.0


def job(job_id, team, submit_time, duration, count):
    return TraceJob(
        job_id=job_id,
        team=team,
        submit_time=submit_time,
        duration=duration,
        instance_type=G5,
        count=count,
        priority=1,
        checkpointable=False,
    )


SHARES = [
    Share(name=name, quota={G5: 1}, strategy=Strategy.LEND_AND_BORROW, borrow_limit=None) for name in ("early", "late")
]
# early borrows the whole pool for two hours; an hour later both teams ask for all of it at once
TRACE = [
    job("e1", "early", 0, 2 * HOUR, 2),
    job("e2", "early", 3 * HOUR, 600, 2),
    job("l2", "late", 3 * HOUR, 600, 2),
]


def first_starts(settings):
    run = simulate(TRACE, shares=SHARES, capacity={G5: 2}, settings=settings, record_runs=True)
    return run.started


def test_the_team_that_used_less_borrows_first_in_the_replay():
    by_borrowed = first_starts(Settings())
    assert by_borrowed["e2"] == 3 * HOUR and by_borrowed["l2"] == 3 * HOUR + 600  # a tie, broken by name
    by_usage = first_starts(Settings(usage_half_life_s=24 * HOUR))
    assert by_usage["l2"] == 3 * HOUR and by_usage["e2"] == 3 * HOUR + 600


def test_of_two_teams_that_used_as_much_the_one_that_used_it_longer_ago_borrows_first():
    """late used the pool first, early after it, as many instance-hours each: decayed, early's
    are worth more, so late borrows first; by what they borrow now it is a tie, broken by name."""
    trace = [
        job("l1", "late", 0, 2 * HOUR, 2),
        job("e1", "early", 2 * HOUR, 2 * HOUR, 2),
        job("e2", "early", 5 * HOUR, 600, 2),
        job("l2", "late", 5 * HOUR, 600, 2),
    ]
    for settings, first in ((Settings(), "e2"), (Settings(usage_half_life_s=24 * HOUR), "l2")):
        started = simulate(trace, shares=SHARES, capacity={G5: 2}, settings=settings, record_runs=True).started
        assert started[first] == 5 * HOUR and max(started["e2"], started["l2"]) == 5 * HOUR + 600


def test_each_teams_capacity_held_and_work_lost_add_up_to_its_runs():
    """benchmarks/fair_share.py's per-team figures: what each team's runs held, and lost."""
    shares = [
        Share(name="owner", quota={G5: 2}, strategy=Strategy.LEND),
        Share(name="borrower", quota={}, strategy=Strategy.LEND_AND_BORROW, borrow_limit=None),
    ]
    trace = [job("b1", "borrower", 0, 10 * HOUR, 2), job("o1", "owner", HOUR, HOUR, 1)]
    run = simulate(trace, shares=shares, capacity={G5: 2}, settings=Settings(), record_runs=True)
    assert run.preemptions == 1 and run.lost_work_capacity_s == 2 * HOUR
    assert run.team_lost_capacity_s == {"borrower": 2 * HOUR}
    held = {
        team: sum((end - start) * j.count for j in trace if j.team == team for start, end in run.runs[j.job_id])
        for team in ("owner", "borrower")
    }
    assert run.team_used_capacity_s == held and held["borrower"] == 2 * HOUR + 2 * 10 * HOUR


def test_a_forecast_counts_usage_from_the_live_pool_on_not_from_its_jobs_starts():
    """Opened on a live pool (engine.Resume) the replay knows no usage before it opens: early's job
    that started ten hours before counts from the opening, as late's does, so they tie."""
    running = [(job("e0", "early", -10 * HOUR, 11 * HOUR, 1), -10 * HOUR), (job("l0", "late", -60, HOUR + 60, 1), -60)]
    trace = [job("e2", "early", 2 * HOUR, 600, 2), job("l2", "late", 2 * HOUR, 600, 2)]
    started = simulate(
        trace,
        shares=SHARES,
        capacity={G5: 2},
        settings=Settings(usage_half_life_s=24 * HOUR),
        record_runs=True,
        resume=Resume(at=0.0, running=running),
    ).started
    assert started["e2"] == 2 * HOUR and started["l2"] == 2 * HOUR + 600  # the tie, broken by name
