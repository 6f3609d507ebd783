"""The controller's record of a kept guarantee (issue 43 item 6): on every tick, per team that asks
for its guarantee, ``GuaranteeAskedHours`` and ``GuaranteeBreachedHours`` by the planner's one
definition (``asking_shares``, ``breached_shares``), which the simulator's breach count uses too."""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.contract import (  # noqa: E402
    GUARANTEE_ASKED_HOURS,
    GUARANTEE_BREACHED_HOURS,
    GUARANTEE_KEPT_PERCENT,
)
from gpu_governance_runtime.planners.reclaim import (  # noqa: E402
    ANY_TYPE,
    PendingJob,
    PoolState,
    RunningJob,
    Settings,
    Share,
    Strategy,
    asking_shares,
    breached_shares,
    in_use_by_share,
)
from gpu_governance_runtime.reclaim import handler as controller, reports  # noqa: E402
from gpu_governance_runtime.usage import kept_percent  # noqa: E402
from tests.hierarchy.test_planner_trees import parent_guarantee  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402
from tests.reclaim.test_controller import POLICY  # noqa: E402
from tests.reclaim.test_grace_ticks import QUEUE, contended  # noqa: E402

G5, P5 = "ml.g5.xlarge", "ml.p5.48xlarge"
HOUR = 3600.0
SHARES = (
    Share(name="a", quota={G5: 4}, strategy=Strategy.LEND, in_share_preemption=True),
    Share(name="b", quota={G5: 0}, strategy=Strategy.LEND_AND_BORROW),
)


def running(job_id, share, count, priority=0, instance_type=G5):
    return RunningJob(
        job_id=job_id, share=share, instance_type=instance_type, count=count, priority=priority, started_at=0
    )


def waiting(job_id, share, count, submitted_at, priority=0):
    return PendingJob(
        job_id=job_id, share=share, instance_type=G5, count=count, priority=priority, submitted_at=submitted_at
    )


def state(at, running_jobs, pending_jobs):
    return PoolState(capacity={G5: 4}, shares=SHARES, running=running_jobs, pending=pending_jobs, now=at)


def hourly_states():
    """Team a asks for 10 hours: its job waits behind b's borrowed one from hour 0 (a breach from
    hour 1, once it waited a tick) until it runs from hour 3 to hour 10."""
    borrowed, mine = running("b1", "b", 4), waiting("a1", "a", 4, submitted_at=0)
    return [
        state(h * HOUR, (borrowed,), (mine,)) if h < 3 else state(h * HOUR, (running("a1", "a", 4),), ())
        for h in range(10)
    ]


def test_a_team_that_waited_below_its_guarantee_for_2_of_10_hours_is_recorded_as_80_percent_kept():
    totals = {GUARANTEE_ASKED_HOURS: 0.0, GUARANTEE_BREACHED_HOURS: 0.0}
    kept_per_tick = []
    for observed in hourly_states():
        records = reports.promise_records("gpu", observed, Settings(), tick_seconds=HOUR, namespace="Test")
        assert [r["Share"] for r in records] == ["a"]  # b has no guarantee: it never asks
        for metric in totals:
            totals[metric] += records[0][metric]
        kept_per_tick.append(records[0][GUARANTEE_KEPT_PERCENT])
    assert totals == {GUARANTEE_ASKED_HOURS: 10.0, GUARANTEE_BREACHED_HOURS: 2.0}
    assert kept_percent(totals[GUARANTEE_ASKED_HOURS], totals[GUARANTEE_BREACHED_HOURS]) == 80.0
    # what the dashboards draw: the Average of the per-tick percent over the period, the same 80
    assert sum(kept_per_tick) / len(kept_per_tick) == 80.0


def test_what_asks_and_what_breaches():
    shares, at = SHARES, 1_000.0
    # nothing running within a's quota, and a job too large for it: a does not ask
    assert asking_shares(shares, {}, [("a", G5, 5)]) == set()
    assert asking_shares(shares, {}, [("a", G5, 5), ("a", G5, 4)]) == {"a"}
    assert asking_shares(shares, {("a", G5): 1}, []) == {"a"}
    assert asking_shares(shares, {("b", G5): 4}, [("b", G5, 1)]) == set()  # all borrowed: b asks for nothing
    assert asking_shares(shares, {("a", ANY_TYPE): 1}, []) == {"a"}  # of unknown type: counts on every type
    # a guarantee job that waited longer than the tolerance while b borrows: a breach, not before
    borrowed, mine = (running("b1", "b", 2),), (waiting("a1", "a", 4, submitted_at=at - 60),)
    assert breached_shares(shares, borrowed, mine, waited_before=at - 60) == {"a"}
    assert breached_shares(shares, borrowed, mine, waited_before=at - 61) == set()
    # nobody borrows (the pool is short): not a breach of the promise, which is that lent capacity comes back
    assert breached_shares(shares, (running("a0", "a", 1),), mine, waited_before=at) == set()
    # in-share preemption counts: a's priority-5 job fits its quota once a's own priority-0 job is set aside
    own = (running("a0", "a", 2), running("b1", "b", 2))
    urgent = (waiting("a2", "a", 4, submitted_at=0, priority=5),)
    assert breached_shares(shares, own, urgent, waited_before=at) == {"a"}
    assert breached_shares(shares, own, urgent, waited_before=at, usage=in_use_by_share(own)) == {"a"}
    # a job of unknown type borrows on every type
    assert breached_shares(shares, (running("x", "b", 1, instance_type=ANY_TYPE),), mine, waited_before=at) == {"a"}


def test_every_tick_publishes_the_promise_of_each_team_that_asks():
    batch, _ = contended()  # research borrows all 8 instances; training's job waits for 2 of them
    start = batch.clock.now
    with reclaim_ledger_table() as table:
        records = []
        for at in (start, start + 120):  # a dry run: nothing is reclaimed, the owner keeps waiting
            adapter = BatchFairShareAdapter(
                batch,
                job_queue=QUEUE,
                pool=POLICY.pool("ec2-gpu"),
                submit=batch,
            )
            emitted = []
            controller.run_tick(
                "ec2-gpu",
                adapter,
                Ledger(table),
                settings=Settings(),
                dry_run=True,
                namespace="Test",
                now=at,
                emit=emitted.append,
                tick_seconds=60,
            )
            records.append([r for r in emitted if GUARANTEE_ASKED_HOURS in r])
    first, later = records
    # research runs within its quota of 2 (it asks, and has it); training's job is a guarantee job
    assert [(r["Share"], r[GUARANTEE_ASKED_HOURS], r[GUARANTEE_BREACHED_HOURS]) for r in first] == [
        ("research", 1 / 60, 0.0),
        ("training", 1 / 60, 0.0),  # it has waited less than a tick: not yet a breach
    ]
    assert [(r["Share"], r[GUARANTEE_BREACHED_HOURS]) for r in later] == [("research", 0.0), ("training", 1 / 60)]
    assert later[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Pool", "Share"]]


def test_a_job_within_a_parent_groups_guarantee_waiting_while_an_outsider_borrows_is_recorded_breached():
    # a two-level tree (issue 43): zeta's job, within ai's quota, has waited an hour while omega borrows
    state = parent_guarantee()
    later = replace(state, now=state.now + HOUR)
    breached = {
        r["Share"]: r[GUARANTEE_BREACHED_HOURS]
        for r in controller.promise_records("gpu", later, Settings(), tick_seconds=60, namespace="Test")
    }
    assert breached.get("zeta") == 60 / 3600
    flat = replace(later, groups=())
    assert not any(
        r[GUARANTEE_BREACHED_HOURS]
        for r in controller.promise_records("gpu", flat, Settings(), tick_seconds=60, namespace="Test")
    )
