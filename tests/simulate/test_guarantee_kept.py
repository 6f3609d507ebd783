"""Guarantees as a kept promise in the replay (issue 43 item 6): per team, the time it asked for
its guarantee and the time its guarantee was broken, by the planner's one definition
(``planner.asking_shares``, ``planner.breached_shares``) that the controller's metrics use too."""

from __future__ import annotations

import json

from constructs_lib.simulator import simulate
from constructs_lib.simulator.report import comparison_json, table
from constructs_lib.simulator.traces import TraceJob
from gpu_governance_runtime.planners.reclaim import Settings, Share, Strategy

G5 = "ml.g5.xlarge"
SHARES = (
    Share(name="serving", quota={G5: 4}, strategy=Strategy.LEND),
    Share(name="research", quota={G5: 0}, strategy=Strategy.LEND_AND_BORROW, borrow_limit=None),
)
HOUR = 3600.0


def job(job_id, team, submit, duration, priority=10):
    return TraceJob(
        job_id=job_id,
        team=team,
        submit_time=submit,
        duration=duration,
        instance_type=G5,
        count=4,
        priority=priority,
        checkpointable=False,
    )


# research borrows the whole pool from 0 to 7,320 s; serving's job comes at 60 s and nothing is
# reclaimed (no preemption allowed): serving waits inside its guarantee from 60 s, which is a
# breach once it waited a tick (from 120 s) until research ends at 7,320 s: 2 h. It then runs
# until 36,060 s, so it asked from 60 s to 36,060 s: 10 h, 8 of them kept.
STARVED = [job("borrowed", "research", 0, 7_320), job("lender", "serving", 60, 36_060 - 7_320, priority=90)]


def test_a_team_that_waited_below_its_guarantee_for_2_of_10_hours_kept_80_percent():
    result = simulate(
        STARVED, shares=SHARES, capacity={G5: 4}, tick_s=60, settings=Settings(max_preemptions_per_tick=0)
    )
    assert result.guarantee_asked_s == {"serving": 10 * HOUR}  # research has no guarantee: it never asks
    assert result.guarantee_breached_s == {"serving": 2 * HOUR}
    assert result.guarantee_kept() == {"serving": {"asked_h": 10.0, "breached_h": 2.0, "kept_percent": 80.0}}
    assert result.guarantee_breaches == 120  # the ticks 120, 180, ..., 7,260: the count the same definition gives


def test_a_reclaimed_guarantee_is_kept_and_the_report_says_so():
    # with reclaim, serving's job starts on its first tick (60 s) and ends at 28,800 s: 7.98 h asked, all kept
    results = {
        name: simulate(STARVED, shares=SHARES, capacity={G5: 4}, tick_s=60, settings=Settings())
        for name in ("policy", "static", "pooled")
    }
    kept = results["policy"].guarantee_kept()
    assert kept["serving"]["kept_percent"] == 100.0 and kept["serving"]["breached_h"] == 0.0
    assert json.loads(json.dumps(comparison_json(results)))["policy"]["guarantee_kept"] == kept
    assert "guarantee kept under the policy: serving 100.0 % of 7.98 h asked" in table(results)


def test_the_grace_is_allowed_before_a_breach():
    # a grace of 600 s: the lender's wait for its victims' grace is by design, not a breach
    result = simulate(
        STARVED, shares=SHARES, capacity={G5: 4}, tick_s=60, settings=Settings(max_preemptions_per_tick=0, grace_s=600)
    )
    assert result.guarantee_breached_s == {"serving": 2 * HOUR - 600}
