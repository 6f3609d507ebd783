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

from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.common.batch_copy import LISTING_GRACE_SECONDS  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Settings, reborrow_at  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from tests.aws_model.batch import Clock, Crash, FakeBatch, Faults  # noqa: E402
from tests.aws_model.batch_arrays import ArrayBatch  # noqa: E402
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


def once_after(operation, fault):
    """A fault plan: ``fault`` ("crash", "timeout") right after ``operation`` reached AWS, the first time only."""
    done = []

    def plan(called, phase):
        if called == operation and phase == "after" and not done:
            done.append(1)
            return fault
        return None

    return plan


def dependant(batch, job_id):
    """research's evaluation job, waiting PENDING on ``job_id``."""
    return batch.add_job(
        jobName="evaluate",
        jobQueue=QUEUE,
        jobDefinition="eval:1",
        shareIdentifier="research",
        dependsOn=[{"jobId": job_id}],
    )


EC2_GPU = POLICY.pool("ec2-gpu")


def tick(batch, table, records, pool=EC2_GPU, *, client=None):
    """``client``: what the adapter reads and stops through (the model itself by default)."""
    adapter = BatchFairShareAdapter(client or batch, job_queue=QUEUE, pool=pool, submit=batch)
    return controller.run_tick(
        pool.name,
        adapter,
        Ledger(table),
        settings=Settings(),
        dry_run=False,
        namespace="Test",
        now=batch.clock.now,
        emit=records.append,
    )


def copies_of(batch, job_id):
    return [j for j in batch.jobs.values() if j.get("tags", {}).get(TAG_FROM) == job_id]


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
    batch, _ = world(once_after("TerminateJob", "crash"))
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
    batch, _ = world(once_after("SubmitJob", "timeout"), listing_lag=90.0)  # and the copy is listed only 90 s later
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
        tick(batch, table, records, client=batch.client(config=WITHIN_A_TICK, by="reclaim"))
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


def array_borrower(batch):
    """research runs an array of 8 one-instance children on its quota of 2: 6 are borrowed."""
    return batch.add_job(
        jobName="research-sweep",
        jobQueue=QUEUE,
        jobDefinition="sweep:1",
        shareIdentifier="research",
        arrayProperties={"size": 8},
        parameters={"work_seconds": "36000"},
        tags={"gpu-governance:team": "research"},
    )


@pytest.mark.parametrize("listed_by_queue", [False, True])
def test_an_array_borrowing_beyond_its_quota_is_reclaimed_child_by_child_stopped_for_good_and_told_why(
    table, listed_by_queue
):
    """Issue 38: until now an array job was never a victim, so a team kept lent capacity for ever
    by submitting its work as one. Its children hold the instances (the parent never runs), each
    is read whether or not ListJobs by queue lists it, and the 6 beyond research's quota of 2 are
    terminated for training, with no copy (a child cannot be submitted again as it was) and the
    reason on each; the 2 inside the quota run on."""
    batch = ArrayBatch(Clock(), capacity={QUEUE: 8}, children_listed_by_queue=listed_by_queue)
    parent = array_borrower(batch)
    batch.advance(3600)
    assert batch.jobs[parent]["status"] == "PENDING"
    owner = owner_claims_back(batch)
    records = []
    result = tick(batch, table, records)
    preemptions = [r for r in records if r.get("event") == "preemption"]
    assert result.preemptions == len(preemptions) == 6
    assert {(r["outcome"], r["stopped_for_good"]) for r in preemptions} == {("done", True)}
    children = {child: batch.jobs[child] for child in batch.children[parent]}
    stopped = {c for c, job in children.items() if job["status"] == "FAILED"}
    assert {r["job_id"] for r in preemptions} == stopped and len(stopped) == 6
    assert all("an array job" in children[c]["statusReason"] for c in stopped)  # what its owner reads
    assert all(copies_of(batch, c) == [] for c in (parent, *children))
    items = {i["job_id"]: i for i in table.scan()["Items"] if i.get("action") == "preempt"}
    assert {(i["status"], i["stopped_for_good"][:13]) for i in items.values()} == {("done", "an array job ")}
    batch.advance(60)
    assert batch.jobs[owner]["status"] == "STARTING"  # on the 6 instances freed for it
    assert sum(job["status"] == "RUNNING" for job in children.values()) == 2
    assert tick(batch, table, records).preemptions == 0  # the 2 inside research's quota are its guarantee


def test_a_job_others_depend_on_is_reclaimed_its_dependant_fails_as_batch_says_and_nothing_is_copied(table):
    """Issue 38: a PENDING job that depends on the borrowed one no longer protects it."""
    batch, _ = world()
    victim = borrower(batch)
    evaluate = dependant(batch, victim)
    batch.advance(3600)
    owner_claims_back(batch)
    records = []
    assert tick(batch, table, records).preemptions == 1
    (preemption,) = [r for r in records if r.get("event") == "preemption"]
    assert (preemption["job_id"], preemption["outcome"], preemption["stopped_for_good"]) == (victim, "done", True)
    assert "other jobs depend on it" in batch.jobs[victim]["statusReason"]
    assert batch.jobs[evaluate]["status"] == "FAILED"  # Batch fails a dependant whose dependency failed
    assert copies_of(batch, victim) == [] and copies_of(batch, evaluate) == []


def test_a_crash_after_stopping_a_job_that_gets_no_copy_is_closed_by_the_next_tick_without_one(table):
    """The ledger says before the call that no copy is owed: the tick that finishes the open
    action no longer sees the dependant (it failed with its dependency) and would otherwise copy."""
    batch, _ = world(once_after("TerminateJob", "crash"))
    victim = borrower(batch)
    dependant(batch, victim)
    batch.advance(3600)
    owner_claims_back(batch)
    with pytest.raises(Crash):
        tick(batch, table, [])
    assert batch.jobs[victim]["status"] == "FAILED"
    batch.advance(60)
    records = []
    tick(batch, table, records)
    (resumed,) = [r for r in records if r.get("event") == "preemption_resumed"]
    assert (resumed["job_id"], resumed["outcome"]) == (victim, "done")
    assert resumed["detail"].startswith("stopped for good, not requeued: other jobs depend on it")
    assert copies_of(batch, victim) == []


def test_a_terminate_whose_answer_was_lost_still_brings_the_job_back(table):
    """Found by the month-long scenario: TerminateJob times out after Batch stopped the job."""
    batch, _ = world(once_after("TerminateJob", "timeout"))
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
