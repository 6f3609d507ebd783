"""The reclaim controller on the AWS model over simulated days, faults injected at every call
boundary (issue 23, "A model of AWS to test against"): the scenario checks its invariants after
every step (tests/aws_model/scenario.py). The month-long run is benchmarks/aws_scenarios.py."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from gpu_governance_runtime.reclaim.planner import Settings
from tests.aws_model import scenario


def test_half_a_day_with_faults_loses_no_job_runs_none_twice_and_holds_the_cap():
    report = scenario.run(days=0.5, seed=7)
    # the scenario did what it is for: jobs were preempted and brought back, and faults hit
    assert report.preempted > 0 and report.copies > 0
    assert report.faults["throttle"] > 0 and report.faults["timeout"] > 0 and report.crashes > 0


def test_dry_run_changes_nothing_whatever_the_faults():
    report = scenario.run(days=0.2, seed=3, dry_run=True)
    assert report.copies == 0


def test_the_checks_catch_a_controller_that_loses_jobs(monkeypatch):
    """The invariants are not vacuous: a controller that terminates and never resubmits is caught."""
    from gpu_governance_runtime.reclaim import adapters

    monkeypatch.setattr(
        adapters.BatchFairShareAdapter,
        "_bring_back",
        lambda self, job, uncertain_since, progress: adapters.ActionResult(job_id=job["jobId"], outcome="done"),
    )
    with pytest.raises(scenario.InvariantBroken, match="lost"):
        scenario.run(
            days=0.5,
            seed=3,
            fault_rates={"throttle": 0, "timeout": 0, "crash": 0},
            settings=Settings(max_preemptions_per_tick=3),
        )


def test_a_preemption_whose_close_was_lost_is_not_brought_back_twice_by_a_retried_tick():
    """Found by the scenario: a tick records the victim ``done`` (its copy submitted), then the
    write that takes it off the pool's open list is throttled and the tick fails. Lambda retries it
    [aws: events.lambda-async-retries] before Batch lists the copy [aws: batch.listing-lags]: the
    retry must not submit a second copy."""
    from gpu_governance_runtime.reclaim import handler
    from gpu_governance_runtime.reclaim.adapters import BatchFairShareAdapter
    from gpu_governance_runtime.reclaim.ledger import Ledger
    from tests.aws_model.batch import Clock, FakeBatch, Faults
    from tests.aws_model.dynamodb import FakeDynamoDB

    clock, faults = Clock(), Faults()
    batch = FakeBatch(clock, capacity={scenario.QUEUE: 16}, listing_lag=30.0)
    dynamodb = FakeDynamoDB(faults=faults)
    dynamodb.create_table("ledger", key="action_id")
    ledger = Ledger(dynamodb.table("ledger"))
    for share, count, priority in (("research", 4, 10), ("training", 1, 50)):
        for i in range(count):
            batch.add_job(
                jobName=f"{share}-{i}",
                jobQueue=scenario.QUEUE,
                jobDefinition=f"{share}:1",
                shareIdentifier=share,
                schedulingPriorityOverride=priority,
                parameters={"work_seconds": "36000"},
                nodeOverrides={"numNodes": 4},
            )
        batch.advance(120)  # research takes the whole pool; training's job waits for its guarantee

    def closing(operation: str, phase: str) -> str | None:
        request = dynamodb.current[1]
        return (
            "throttle" if phase == "before" and request.get("UpdateExpression", "").startswith("DELETE ids") else None
        )

    faults.plan = closing

    def tick() -> None:
        adapter = BatchFairShareAdapter(
            batch, job_queue=scenario.QUEUE, pool=scenario.POLICY.pool(scenario.POOL), submit=batch
        )
        handler.run_tick(
            scenario.POOL,
            adapter,
            ledger,
            settings=Settings(max_preemptions_per_tick=1),
            dry_run=False,
            namespace="Test",
            now=clock.now,
            emit=lambda record: None,
        )

    with pytest.raises(Exception, match="ThrottlingException"):
        tick()
    faults.plan = lambda operation, phase: None
    clock.sleep(5)  # the retry comes seconds later, before the copy is listed
    tick()
    copies = [j for j in batch.jobs.values() if "gpu-governance:requeued-from" in j["tags"]]
    assert len(copies) == 1, [(j["jobId"], j["tags"]) for j in copies]
    assert ledger.open_actions(scenario.POOL) == []  # the retry finished closing it


NO_FAULTS = {"throttle": 0, "timeout": 0, "crash": 0}


def test_capacity_block_requeue_over_two_days_with_faults_loses_no_job_and_copies_none_twice():
    from tests.aws_model import block_scenario

    report = block_scenario.run(days=2, seed=3)
    # jobs were stopped at each block's end and brought back, each warning was delivered, faults hit
    assert report.stopped > 0 and report.copies == report.stopped
    assert (
        report.warnings >= 2
        and report.faults["throttle"] > 0
        and report.faults["timeout"] > 0
        and report.failed_runs > 0
    )


def test_capacity_block_requeue_in_dry_run_stops_nothing():
    from tests.aws_model import block_scenario

    report = block_scenario.run(days=1, seed=4, dry_run=True)
    assert report.stopped == 0 and report.copies == 0


def test_the_block_checks_catch_a_controller_that_stops_jobs_as_it_tells_them_to_checkpoint(monkeypatch):
    """Not vacuous: stopping a job in the run that sends the drain event (no time to checkpoint) breaks the block's rule."""
    from gpu_governance_runtime.capacity import requeue
    from tests.aws_model import block_scenario

    monkeypatch.setattr(requeue, "stop_time", lambda ends_at, signalled_at: signalled_at)
    with pytest.raises(scenario.InvariantBroken, match="too early to checkpoint"):
        block_scenario.run(days=1, seed=3, fault_rates=NO_FAULTS)


def test_slurm_window_over_three_days_with_faults_and_late_ssm_delivery_runs_no_command_late():
    from tests.aws_model import slurm_scenario

    report = slurm_scenario.run(days=3, seed=3)
    # jobs were requeued before their nodes went, SSM delivered late enough to be cancelled or to miss its deadline,
    # some cancels left their command to run [aws: ssm.cancel-command-may-not-stop], faults hit
    assert report.requeues > 0 and report.drains > 0
    assert report.cancelled > 0 and report.cancels_ignored > 0
    assert report.delivery_timed_out > 0 and report.failed_runs > 0
    assert report.faults["throttle"] > 0 and report.faults["timeout"] > 0 and report.faults["crash"] > 0


def test_slurm_window_without_faults_requeues_every_job_before_its_node_goes():
    from tests.aws_model import slurm_scenario

    report = slurm_scenario.run(days=2, seed=3, fault_rates=NO_FAULTS, slow_rate=0)
    assert report.requeues > 0 and report.killed_with_node == 0


def test_slurm_window_in_dry_run_changes_nothing_on_the_head_node():
    from tests.aws_model import slurm_scenario

    report = slurm_scenario.run(days=1, seed=4, dry_run=True)  # the scenario raises at a change; the run still read
    assert report.commands > 0 and report.drains == report.requeues == 0


def test_the_slurm_checks_catch_a_command_without_a_delivery_deadline(monkeypatch):
    """Not vacuous: with SSM's default delivery deadline (an hour), a command whose sender died
    before it could cancel it (a crash between SendCommand and CancelCommand) runs late."""
    from gpu_governance_runtime.slurm import ssm as slurm_ssm
    from tests.aws_model import slurm_scenario

    monkeypatch.setattr(slurm_ssm, "DELIVERY_SECONDS", 3600)
    with pytest.raises(scenario.InvariantBroken, match="after it was sent"):
        slurm_scenario.run(days=3, seed=3, slow_rate=0.2)
