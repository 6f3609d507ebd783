"""Ticks retried by Lambda respect the per-tick preemption cap (issue 23, outcome 8, first
half): Lambda retries a failed asynchronous invocation, so a retried tick can run in the same
minute as the next scheduled one; the ledger counts each pool's preemptions per minute. And the
function is deployed with no asynchronous retries at all."""

from __future__ import annotations

import os

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Settings  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from tests.aws_model.batch import Clock, FakeBatch  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402
from tests.reclaim.test_controller import POLICY  # noqa: E402

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"


def test_a_retried_tick_in_the_same_minute_does_not_exceed_the_cap():
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
    ]  # research holds all 8 instances on a quota of 2
    batch.advance(60)
    batch.advance(3600)
    settings = Settings(max_preemptions_per_tick=1)
    records = []
    with reclaim_ledger_table() as table:
        for retry in range(2):  # the scheduled tick, then Lambda's retry of an earlier one 20 s later: the same minute
            batch.add_job(
                jobName=f"owner{retry}",
                jobQueue=QUEUE,
                jobDefinition="train:1",
                shareIdentifier="training",
                schedulingPriorityOverride=50,
                nodeOverrides={"numNodes": 2},
            )  # each needs one borrower stopped
            adapter = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch)
            controller.run_tick(
                "ec2-gpu",
                adapter,
                Ledger(table),
                settings=settings,
                dry_run=False,
                namespace="Test",
                now=batch.clock.now + 20 * retry,
                emit=records.append,
            )
    assert [r["outcome"] for r in records if r.get("event") == "preemption"] == ["done", "capped"]
    assert sum(batch.jobs[j]["status"] == "FAILED" for j in borrowers) == 1
