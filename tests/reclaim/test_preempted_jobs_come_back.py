"""A job the reclaim controller stops on a Batch fair-share queue comes back, exactly once, with
everything that defined it (issue 23, outcome 1). Batch does not retry a terminated job
(tests/aws_model/batch.py plays that rule), so before this the victims were simply lost. Driven
through the real tick (handler.run_tick) on the stateful Batch model, with faults at the call
boundaries: a crash between TerminateJob and SubmitJob, a SubmitJob answer lost after Batch
accepted it, a throttled SubmitJob."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the handler builds its clients on import

from gpu_governance_runtime.common.batch_copy import LISTING_GRACE_SECONDS  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from gpu_governance_runtime.reclaim.adapters import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.reclaim.ledger import Ledger  # noqa: E402
from gpu_governance_runtime.reclaim.planner import Settings, reborrow_at  # noqa: E402
from tests.aws_model.batch import Clock, Crash, FakeBatch, Faults  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402
from tests.reclaim.test_controller import POLICY  # noqa: E402

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
TAG_FROM = "gpu-governance:requeued-from"


@pytest.fixture
def table():
    with reclaim_ledger_table() as table:
        yield table


def world(plan=lambda operation, phase: None, listing_lag=0.0):
    faults = Faults(plan)
    batch = FakeBatch(Clock(), capacity={QUEUE: 8}, faults=faults, listing_lag=listing_lag)
    return batch, faults


def borrower(batch, **extra):
    """research runs 6 instances on a quota of 2: 4 are borrowed from training."""
    return batch.add_job(
        jobName="research-train",
        jobQueue=QUEUE,
        jobDefinition="arn:aws:batch:us-east-1:111122223333:job-definition/train:7",
        shareIdentifier="research",
        schedulingPriorityOverride=20,
        parameters={"work_seconds": "36000", "lr": "0.1"},
        nodeOverrides={
            "numNodes": 6,
            "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {"command": ["train", "--resume"]}}],
        },
        retryStrategy={"attempts": 3},
        timeout={"attemptDurationSeconds": 86400},
        propagateTags=True,
        tags={"gpu-governance:team": "research", "project": "llm"},
        **extra,
    )


def owner_claims_back(batch):
    return batch.add_job(
        jobName="training-run",
        jobQueue=QUEUE,
        jobDefinition="train:1",
        shareIdentifier="training",
        schedulingPriorityOverride=50,
        nodeOverrides={"numNodes": 6},
    )


def tick(batch, table, records):
    adapter = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch)
    return controller.run_tick(
        "ec2-gpu",
        adapter,
        Ledger(table),
        settings=Settings(),
        dry_run=False,
        namespace="Test",
        now=batch.clock.now,
        emit=records.append,
    )


def copies_of(batch, job_id):
    return [j for j in batch.jobs.values() if j["tags"].get(TAG_FROM) == job_id]


def test_a_preempted_job_comes_back_once_with_everything_that_defined_it(table):
    batch, _ = world()
    victim = borrower(batch)
    batch.advance(3600)
    owner_claims_back(batch)
    records = []
    tick(batch, table, records)
    assert batch.jobs[victim]["status"] == "FAILED"
    (copy,) = copies_of(batch, victim)
    original = batch.jobs[victim]
    for field in (
        "jobName",
        "jobQueue",
        "jobDefinition",
        "shareIdentifier",
        "schedulingPriority",
        "parameters",
        "retryStrategy",
        "timeout",
        "propagateTags",
        "nodeProperties",
        "dependsOn",
    ):
        assert copy[field] == original[field], field
    assert copy["tags"] == {**original["tags"], TAG_FROM: victim, "gpu-governance:times-preempted": "1"}
    item = next(i for i in table.scan()["Items"] if i.get("job_id") == victim)
    assert (item["status"], item["new_job"]) == ("done", copy["jobId"])
    # later ticks change nothing more: one copy, and the owner's job runs on the freed capacity
    for _ in range(3):
        batch.advance(60)
        tick(batch, table, records)
    assert len(copies_of(batch, victim)) == 1
    assert {j["jobName"]: j["status"] for j in batch.jobs.values() if j["status"] == "RUNNING"} == {
        "training-run": "RUNNING"
    }


def test_a_crash_between_terminate_and_submit_is_finished_by_the_next_tick(table):
    crashed = []

    def crash_once_after_terminate(operation, phase):
        if operation == "TerminateJob" and phase == "after" and not crashed:
            crashed.append(1)
            return "crash"
        return None

    batch, _ = world(crash_once_after_terminate)
    victim = borrower(batch)
    batch.advance(3600)
    owner_claims_back(batch)
    with pytest.raises(Crash):
        tick(batch, table, [])
    assert batch.jobs[victim]["status"] == "FAILED" and copies_of(batch, victim) == []
    batch.advance(60)  # the claim is older than the function's timeout by the next tick
    records = []
    tick(batch, table, records)
    assert len(copies_of(batch, victim)) == 1
    assert [(r["job_id"], r["outcome"]) for r in records if r.get("event") == "preemption_resumed"] == [
        (victim, "done")
    ]


def test_a_submit_answer_lost_after_batch_accepted_it_never_makes_a_second_copy(table):
    lost = []

    def timeout_after_submit(operation, phase):
        if operation == "SubmitJob" and phase == "after" and not lost:
            lost.append(1)
            return "timeout"
        return None

    batch, _ = world(timeout_after_submit, listing_lag=90.0)  # and the copy is listed only 90 s later
    victim = borrower(batch)
    batch.advance(3600)
    owner_claims_back(batch)
    batch.advance(120)  # listed by now
    records = []
    tick(batch, table, records)
    assert [r["outcome"] for r in records if r.get("event") == "preemption"] == ["submitting"]
    for _ in range(
        int(LISTING_GRACE_SECONDS // 60) + 3
    ):  # within the grace the listing lags; after it the copy is found
        batch.advance(60)
        tick(batch, table, records)
    assert len(copies_of(batch, victim)) == 1
    assert (
        sum(
            1
            for operation, request in batch.requests
            if operation == "SubmitJob" and TAG_FROM in request.get("tags", {})
        )
        == 1
    )


def test_a_stop_retried_by_the_sdk_and_refused_after_an_earlier_attempt_stopped_the_job_still_brings_it_back(table):
    """Found by the reclaim scenario once the model played botocore's retries (issue 39): TerminateJob's
    first attempt stops the job and its answer is lost, the SDK retries and Batch throttles every retry.
    botocore raises the last attempt's TooManyRequestsException; read as "refused, nothing stopped",
    the action was closed and the stopped job never came back."""
    from gpu_governance_runtime.common.clients import WITHIN_A_TICK
    from tests.aws_model import sdk

    attempts = []

    def lost_then_throttled(operation, phase):
        if operation != "TerminateJob":
            return None
        if phase == "before":
            attempts.append(1)
            return None if len(attempts) == 1 else "throttle"
        return "timeout" if len(attempts) == 1 else None

    batch, _ = world(lost_then_throttled)
    victim = borrower(batch)
    batch.advance(3600)
    owner_claims_back(batch)
    records = []
    with sdk.no_backoff():
        client = batch.client(config=WITHIN_A_TICK, by="reclaim")
        adapter = BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch)
        controller.run_tick(
            "ec2-gpu",
            adapter,
            Ledger(table),
            settings=Settings(),
            dry_run=False,
            namespace="Test",
            now=batch.clock.now,
            emit=records.append,
        )
        assert len(attempts) == 5 and batch.jobs[victim]["status"] == "FAILED"  # stopped by the first attempt
        assert [r["outcome"] for r in records if r.get("event") == "preemption"] == ["terminating"]
        batch.advance(60)
        tick(batch, table, records)
    assert len(copies_of(batch, victim)) == 1


def test_a_throttled_submit_is_sent_again_by_the_next_tick(table):
    throttled = []

    def throttle_first_submit(operation, phase):
        if operation == "SubmitJob" and phase == "before" and not throttled:
            throttled.append(1)
            return "throttle"
        return None

    batch, _ = world(throttle_first_submit)
    victim = borrower(batch)
    batch.advance(3600)
    owner_claims_back(batch)
    records = []
    tick(batch, table, records)
    assert [r["outcome"] for r in records if r.get("event") == "preemption"] == ["terminated"]
    batch.advance(60)
    tick(batch, table, records)
    assert len(copies_of(batch, victim)) == 1


@pytest.mark.parametrize("kind", ["array", "waited_on"])
def test_a_job_that_cannot_be_brought_back_faithfully_is_never_a_victim(table, kind):
    batch, _ = world()
    victim = borrower(batch, **({"arrayProperties": {"size": 2}} if kind == "array" else {}))
    if kind == "waited_on":
        batch.add_job(
            jobName="evaluate",
            jobQueue=QUEUE,
            jobDefinition="eval:1",
            shareIdentifier="research",
            dependsOn=[{"jobId": victim}],
        )
    batch.advance(3600)
    owner_claims_back(batch)
    records = []
    result = tick(batch, table, records)
    assert result.preemptions == 0
    assert batch.jobs[victim]["status"] in ("STARTING", "RUNNING") and copies_of(batch, victim) == []


def test_a_terminate_whose_answer_was_lost_still_brings_the_job_back(table):
    """Found by the month-long scenario: TerminateJob times out after Batch stopped the job."""
    lost = []

    def timeout_after_terminate(operation, phase):
        if operation == "TerminateJob" and phase == "after" and not lost:
            lost.append(1)
            return "timeout"
        return None

    batch, _ = world(timeout_after_terminate)
    victim = borrower(batch)
    batch.advance(3600)
    owner_claims_back(batch)
    records = []
    tick(batch, table, records)
    assert [r["outcome"] for r in records if r.get("event") == "preemption"] == ["terminating"]
    assert batch.jobs[victim]["status"] == "FAILED" and copies_of(batch, victim) == []
    batch.advance(60)
    tick(batch, table, records)
    assert len(copies_of(batch, victim)) == 1


def test_a_copy_counts_as_preempted_so_it_does_not_borrow_straight_back(table):
    """Found by the month-long scenario: copies start a fresh attempt count, so the re-borrow backoff
    never applied to them and the same work was preempted again and again."""
    batch, _ = world()
    victim = borrower(batch)
    batch.advance(3600)
    owner_claims_back(batch)
    tick(batch, table, [])
    (copy,) = copies_of(batch, victim)
    state = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch).read(
        batch.clock.now + 60
    )
    (waiting,) = [j for j in state.pending if j.job_id == copy["jobId"]]
    assert waiting.times_preempted == 1


def test_a_chain_of_three_preemptions_gets_the_backoff_of_the_third(table):
    """Each copy starts a fresh attempt count; the chain's count rides on the platform's tag, so the
    copy of a copy of a copy backs off 2^2 x the re-borrow backoff, not 1 x (it did on main)."""
    batch, _ = world()
    current = borrower(batch)
    batch.advance(3600)
    settings = Settings()
    for n in (1, 2, 3):
        owner = owner_claims_back(batch)
        tick(batch, table, [])
        (copy,) = copies_of(batch, current)
        assert copy["tags"]["gpu-governance:times-preempted"] == str(n)
        state = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch).read(
            batch.clock.now
        )
        (waiting,) = [j for j in state.pending if j.job_id == copy["jobId"]]
        assert waiting.times_preempted == n
        assert reborrow_at(waiting, settings) == waiting.submitted_at + settings.reborrow_backoff_s * 2 ** (n - 1)
        # the owner's job finishes and Batch starts the copy on the capacity it frees
        while batch.jobs[owner]["status"] != "SUCCEEDED" or batch.jobs[copy["jobId"]]["status"] != "RUNNING":
            batch.advance(600)
        current = copy["jobId"]
    (running,) = [
        j
        for j in BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch)
        .read(batch.clock.now)
        .running
        if j.job_id == current
    ]
    assert running.times_preempted == 3  # and so protected again after a restart, like the original
