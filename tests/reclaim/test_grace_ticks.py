"""A victim's grace on the reclaim controller (issue 28): the first tick that chooses it records a
notice in the ledger and leaves it running; it is stopped by the first tick at least the grace
later. A duplicate or retried tick neither restarts nor skips the grace; a dry run records nothing."""

from __future__ import annotations

import os

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.common.action_ledger import NOTICE_VALID_SECONDS, Ledger  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Settings  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from tests.aws_model.batch import Clock, FakeBatch  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402
from tests.reclaim.test_controller import POLICY  # noqa: E402

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
GRACE = Settings(grace_s=300)


def contended():
    """research holds all 8 instances on a quota of 2; training's job needs 2 of them back."""
    batch = FakeBatch(Clock(1_800_000_000.0), capacity={QUEUE: 8})
    borrowers = [
        batch.add_job(
            jobName=f"b{i}",
            jobQueue=QUEUE,
            jobDefinition="train:1",
            shareIdentifier="research",
            nodeOverrides={"numNodes": 2},
        )
        for i in range(4)
    ]
    batch.advance(60)
    batch.advance(3600)
    batch.add_job(
        jobName="owner",
        jobQueue=QUEUE,
        jobDefinition="train:1",
        shareIdentifier="training",
        schedulingPriorityOverride=50,
        nodeOverrides={"numNodes": 2},
    )
    return batch, borrowers


def tick(batch, table, at, *, dry_run=False, settings=GRACE):
    records = []
    adapter = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch)
    controller.run_tick(
        "ec2-gpu",
        adapter,
        Ledger(table),
        settings=settings,
        dry_run=dry_run,
        namespace="Test",
        now=at,
        emit=records.append,
    )
    return [r for r in records if r.get("event") == "preemption"]


def running(batch, jobs):
    return sum(batch.jobs[j]["status"] == "RUNNING" for j in jobs)


def test_the_victim_runs_on_for_the_grace_then_is_stopped_once():
    batch, borrowers = contended()
    start = batch.clock.now
    with reclaim_ledger_table() as table:
        first = tick(batch, table, start)
        assert [(r["outcome"], r["stop_after"], r["grace_s"]) for r in first] == [("in_grace", int(start) + 300, 300)]
        victim = first[0]["job_id"]
        notice = table.get_item(Key={"action_id": f"ec2-gpu#{victim}#0#notice"})["Item"]
        assert (notice["status"], notice["stop_after"]) == ("notice", int(start) + 300)
        # a duplicate tick 20 s later and the next ones: still in its grace, the grace not restarted
        for later in (20, 60, 240):
            again = tick(batch, table, start + later)
            assert [(r["job_id"], r["outcome"], r["stop_after"]) for r in again] == [
                (victim, "in_grace", int(start) + 300)
            ]
        assert running(batch, borrowers) == 4
        stopped = tick(batch, table, start + 300)
        assert [(r["job_id"], r["outcome"]) for r in stopped] == [(victim, "done")]
        assert batch.jobs[victim]["status"] == "FAILED" and running(batch, borrowers) == 3
        # a retried tick of the same minute stops nothing more and submits no second copy
        jobs = len(batch.jobs)
        tick(batch, table, start + 310)
        assert (running(batch, borrowers), len(batch.jobs)) == (3, jobs)


def test_a_notice_the_plan_left_for_longer_than_it_is_valid_starts_a_new_grace():
    batch, _ = contended()
    start = batch.clock.now
    with reclaim_ledger_table() as table:
        victim = tick(batch, table, start)[0]["job_id"]
        later = start + 300 + NOTICE_VALID_SECONDS + 60
        again = tick(batch, table, later)
        assert [(r["job_id"], r["outcome"], r["stop_after"]) for r in again] == [(victim, "in_grace", int(later) + 300)]


def test_a_dry_run_records_no_notice_and_stops_nothing():
    batch, borrowers = contended()
    with reclaim_ledger_table() as table:
        planned = tick(batch, table, batch.clock.now, dry_run=True)
        assert [(r["outcome"], r["grace_s"]) for r in planned] == [("planned", 300)]
        assert table.scan()["Items"] == []
    assert running(batch, borrowers) == 4


def test_without_a_grace_the_victim_is_stopped_on_the_first_tick():
    batch, borrowers = contended()
    with reclaim_ledger_table() as table:
        assert [r["outcome"] for r in tick(batch, table, batch.clock.now, settings=Settings())] == ["done"]
    assert running(batch, borrowers) == 3
