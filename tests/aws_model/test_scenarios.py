"""The reclaim controller on the AWS model over simulated days, faults injected at every call
boundary (issue 23, "A model of AWS to test against"): the scenario checks its invariants after
every step (tests/aws_model/scenario.py). The month-long run is benchmarks/aws_scenarios.py."""

from __future__ import annotations

import os
from collections import Counter

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from gpu_governance_runtime.planners.reclaim import Settings
from tests.aws_model import scenario

NO_FAULTS = {"throttle": 0, "timeout": 0, "crash": 0}


def _runs(seeds, **options) -> scenario.Report:
    """The scenario on each seed (each checks every invariant), and what the runs exercised in all."""
    return scenario.summed(scenario.run(seed=seed, workload=scenario.BUSY, **options) for seed in seeds)


def test_reclaim_with_faults_on_three_seeds_loses_no_job_copies_each_once_as_it_was_and_holds_the_cap():
    """Six hours of contention on each of three seeds, faults on every call (writes weighted), through the
    handler's own clients: the copies' SubmitJob sent once, everything else retried by botocore. Each run
    checks every invariant after every step; together they must have exercised what the invariants are
    about, or they prove nothing (issue 39)."""
    report = _runs((1, 2, 3), days=0.25)
    assert report.preempted >= 60 and report.copies == report.preempted
    assert report.resumed >= 20  # stopped jobs an earlier tick left open, brought back by a later one
    assert report.cap_reached >= 3  # minutes in which more than the cap was wanted
    assert report.duplicates >= 20 and report.late >= 20  # ticks delivered twice; Lambda's retries of killed ones
    for operation in ("TerminateJob", "SubmitJob", "PutItem", "UpdateItem"):
        # throttled (retried, and past the retries), answered too late, and killed between the call and its record
        assert report.on(operation, "throttle") >= 10, operation
        assert report.on(operation, "timeout") >= 5, operation
        assert report.on(operation, "crash", "after") >= 1, operation


def test_reclaim_put_in_dry_run_with_preemptions_open_changes_nothing_and_acting_again_finishes_them():
    """The controller acts for an hour, then is put in dry run while preemptions are open in its ledger:
    the dry run plans preemptions and changes nothing on any service (it leaves the open ones as they
    are); acting again at the end brings their jobs back."""
    for seed, grace_s in ((1, 0.0), (2, 300.0)):  # with a grace, the dry run must not give notices either
        report = scenario.run(days=0.25, seed=seed, workload=scenario.BUSY, dry_run_after=1 / 24, grace_s=grace_s)
        assert report.open_at_dry_run >= 1 and report.planned >= 20, (seed, report.summary())
        assert report.preempted >= 1 and report.copies == report.preempted


def test_reclaim_with_a_grace_stops_no_job_before_its_notice_is_the_grace_old():
    """Grace before preemption on the model: every stop comes at least the pool's grace after the
    ledger's notice to the victim, whatever the faults, duplicates and Lambda's retries."""
    report = _runs((1, 2), days=0.25, grace_s=300.0)
    assert report.notices >= 20 and report.preempted >= 10 and report.copies == report.preempted


def test_the_checks_catch_a_controller_that_loses_jobs(monkeypatch):
    """The invariants are not vacuous: a controller that terminates and never resubmits is caught."""
    from gpu_governance_runtime.backends.batch_fair_share import adapter

    monkeypatch.setattr(
        adapter.BatchFairShareAdapter,
        "_bring_back",
        lambda self, job, uncertain_since, progress: adapter.ActionResult(job_id=job["jobId"], outcome="done"),
    )
    with pytest.raises(scenario.InvariantBroken, match="lost|not brought back"):
        scenario.run(days=0.25, seed=3, workload=scenario.BUSY, fault_rates=NO_FAULTS)


def test_a_preemption_whose_close_was_lost_is_not_brought_back_twice_by_a_retried_tick():
    """Found by the scenario: a tick records the victim ``done`` (its copy submitted), then the
    write that takes it off the pool's open list is throttled and the tick fails. Lambda retries it
    [aws: events.lambda-async-retries] before Batch lists the copy [aws: batch.listing-lags]: the
    retry must not submit a second copy."""
    from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter
    from gpu_governance_runtime.common.action_ledger import Ledger
    from gpu_governance_runtime.reclaim import handler
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


def test_capacity_block_requeue_over_three_days_on_six_seeds_with_faults_loses_no_job_and_copies_none_twice():
    """Three blocks on each of six seeds, faults weighted toward the writes and every kind forced on each of them
    (tests/aws_model/block_scenario.py): jobs stopped at each block's end, each copied once and as it was."""
    from tests.aws_model import block_scenario

    reports = [block_scenario.run(days=3, seed=seed) for seed in range(1, 7)]
    faults = sum((r.faults for r in reports), Counter())
    said = [r.summary() for r in reports]
    assert all(r.copies == r.stopped for r in reports), said
    # not vacuous: what the six runs must have exercised (they did 110 stops, 28 copies whose answer was lost or
    # whose run was killed after the submit, 51 warning deliveries, 253 failed runs run again by Lambda)
    assert sum(r.stopped for r in reports) >= 60 and sum(r.uncertain_copies for r in reports) >= 15, said
    assert sum(r.warnings for r in reports) >= 30 and sum(r.retried_runs for r in reports) >= 100, said
    for operation in ("TerminateJob", "SubmitJob", "PutEvents", "PutItem"):
        assert all(faults[operation, kind] >= 3 for kind in ("throttle", "timeout", "crash")), (operation, faults)


def test_a_block_copy_whose_run_was_killed_after_its_submit_is_not_submitted_again_by_lambdas_retry():
    """Every copy listed 4 minutes after its SubmitJob (within the lag copies are designed for); the runs killed
    after the first SubmitJobs are run again by Lambda a minute later, before the copy is listed: they must
    find the submit recorded before it was sent and wait, not send a second copy."""
    from tests.aws_model import block_scenario

    report = block_scenario.run(days=1, seed=3, fault_rates=NO_FAULTS, listing_lags=(240.0,))
    assert report.faults["SubmitJob", "crash"] >= 2 and report.retried_runs >= 2, report.summary()
    assert report.copies == report.stopped >= 3, report.summary()


def test_capacity_block_requeue_in_dry_run_stops_nothing_sends_no_drain_event_and_writes_nothing():
    """The scenario raises at any change in dry run (a Batch stop or submit, a PutEvents request, a ledger item)."""
    from tests.aws_model import block_scenario

    report = block_scenario.run(days=1, seed=4, dry_run=True)
    assert report.stopped == 0 and report.copies == 0
    assert report.warnings >= 1, report.summary()  # a block came to its end: a drain was due


def test_the_block_checks_catch_a_controller_that_stops_jobs_as_it_tells_them_to_checkpoint(monkeypatch):
    """Not vacuous: stopping a job in the run that sends the drain event (no time to checkpoint) breaks the block's rule."""
    from gpu_governance_runtime.capacity import requeue
    from tests.aws_model import block_scenario

    monkeypatch.setattr(requeue, "stop_time", lambda ends_at, signalled_at: signalled_at)
    with pytest.raises(scenario.InvariantBroken, match="too early to checkpoint"):
        block_scenario.run(days=2, seed=3, fault_rates=NO_FAULTS)


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


def _gpu_runs(backend: str, seeds, **options):
    from tests.aws_model import gpu_hours_scenario

    return scenario.summed(gpu_hours_scenario.run(backend=backend, seed=seed, **options) for seed in seeds)


def _exercised_every_write(report, switch_call: str, *writes: str) -> None:
    """Each write met every kind of fault: throttled, lost on its way, answered too late, killed after it."""
    for operation in (switch_call, "PutEvents", "PutItem", "UpdateItem", *writes):
        assert report.on(operation, "timeout", "before") >= 1, operation
        assert report.on(operation, "timeout", "after") >= 1, operation
        assert report.on(operation, "crash", "after") >= 1, operation
    assert report.duplicates >= 20 and report.late >= 20


def test_gpu_hour_limits_on_a_quota_share_queue_with_faults_and_deploys_hold_the_limit_and_come_back_next_period():
    """Issue 39 item 4 on the Batch model: the count, the 80 % notice, the quota share switched off at the
    limit (again after each deploy turns it back on), on again next period, a paused team never on, and
    the queued jobs of a team over its limit or paused terminated (never a running one). Two seeds, two
    days each, through the handler's own clients; every invariant checked after every invocation."""
    report = _gpu_runs("quota_share", (1, 2), days=2)
    assert report.periods_over >= 8 and report.switched_off >= 20 and report.switched_on >= 6
    assert report.deploys >= 8 and report.held >= 6 and report.notices >= 12 and report.refused >= 100
    _exercised_every_write(report, "UpdateQuotaShare", "TerminateServiceJob")


def test_gpu_hour_limits_on_hyperpod_compute_quotas_with_faults_and_deploys_hold_the_limit_and_come_back_next_period():
    """The same on the HyperPod task-governance model: the compute quota's ActivationState, updated at the
    version read (a deploy's new version refuses an update made at the old one)."""
    report = _gpu_runs("compute_quota", (1, 2), days=2)
    assert report.periods_over >= 8 and report.switched_off >= 12 and report.switched_on >= 4
    assert report.deploys >= 8 and report.notices >= 12
    _exercised_every_write(report, "UpdateComputeQuota")


@pytest.mark.parametrize("backend", ["quota_share", "compute_quota"])
def test_gpu_hour_limits_in_dry_run_count_and_change_nothing(backend):
    """Dry run counts GPU hours (the one write it makes) and calls nothing else that changes anything:
    no switch, no hold, no notice, no other ledger write."""
    report = _gpu_runs(backend, (3,), days=1, dry_run=True)
    assert report.periods_over >= 2 and report.switched_off == report.held == report.notices == 0


def _guard_runs(seeds, **options):
    from tests.aws_model import guard_scenario

    return scenario.summed(guard_scenario.run(seed=seed, **options) for seed in seeds)


def test_the_submission_guard_with_faults_and_lost_events_stops_every_violating_job_once_and_no_legitimate_one():
    """Issue 39 item 4 for the guard: six hours of service jobs from three teams on each of four seeds,
    a third of them reaching outside their team, events late, twice and lost to the dead-letter queue
    (the redrive brings them back), faults on every call, the writes weighted. Every minute, from the
    models' records: no legitimate job stopped or named in an alert, every violating job stopped within
    two hours, none stopped twice or alerted twice. Seed 4 caught a claim whose answer was lost: the
    client's retry was refused by the claim's own write and the guard dropped the job as handled."""
    report = _guard_runs((1, 2, 3, 4), days=0.25)
    assert report.violating >= 60 and report.stopped == report.violating
    assert report.submitted - report.violating >= 150  # legitimate, and none of them stopped
    assert report.duplicates >= 50 and report.late >= 150 and report.lost >= 20 and report.redriven >= report.lost
    assert report.crashes >= 15 and report.retried >= 40
    for operation in ("TerminateServiceJob", "Publish", "PutItem", "UpdateItem"):
        # throttled, lost on the way or answered too late, and the invocation killed after AWS did it
        assert report.on(operation, "throttle") >= 10, operation
        assert report.on(operation, "timeout", "before") >= 1 and report.on(operation, "timeout", "after") >= 1
        assert report.on(operation, "crash", "after") >= 3, operation


def test_the_submission_guard_in_dry_run_records_every_violating_job_and_changes_nothing():
    """Dry run under the same faults: no TerminateServiceJob, no alert but "would stop", no ledger write
    under the acting key, and every violating job recorded as reported in the table."""
    report = _guard_runs((1, 2), days=0.25, dry_run=True)
    assert report.violating >= 30 and report.planned >= 15 and report.stopped == 0
    assert report.on("PutItem", "crash", "after") >= 2 and report.on("Publish", "timeout") >= 5


def test_the_guard_checks_catch_a_guard_that_stops_legitimate_jobs(monkeypatch):
    """The invariants are not vacuous: a guard that finds every job violating is caught."""
    from gpu_governance_runtime.guard import checks
    from tests.aws_model import guard_scenario

    found = checks.violations
    monkeypatch.setattr(checks, "violations", lambda job, *a, **k: (found(job, *a, **k)[0], ["everything"]))
    with pytest.raises(scenario.InvariantBroken, match="legitimate job"):
        guard_scenario.run(days=1 / 12, seed=1, fault_rates=NO_FAULTS)


def test_capacity_purchases_with_approvals_faults_and_deploys_never_buy_twice_above_the_cap_or_unapproved():
    """Four days on each of three seeds of an auto, an approval and a dry-run window of Capacity Blocks
    (tests/aws_model/purchase_scenario.py): faults weighted toward PurchaseCapacityBlock and the ledger's writes,
    every kind forced on each; runs delivered twice and late; prices that move; deploys lowering the caps and the
    budget; approvals late, twice, and just before a deploy. Checked from EC2's record of what it sold."""
    from tests.aws_model import purchase_scenario

    reports = [purchase_scenario.run(days=4, seed=seed) for seed in (1, 2, 3)]
    faults = sum((r.faults for r in reports), Counter())
    said = [r.summary() for r in reports]

    def total(name: str) -> int:
        return sum(getattr(r, name) for r in reports)

    # not vacuous: what the three runs must have exercised (they did 23 auto and 20 approved purchases; 43 approvals,
    # 14 of them twice, 16 not honoured after a price rise or a lowered cap; 79 occurrences left uncovered for the
    # budget; 10 purchases whose answer was lost or whose run was killed after it, 3 payment-failed, 13 looked for
    # before EC2 listed them; 54 runs delivered twice, 48 late, 19 killed, 34 run again by Lambda; 29 deploys,
    # 96 price changes)
    assert total("bought_auto") >= 15 and total("bought_approved") >= 12, said
    assert total("approvals") >= 30 and total("approved_twice") >= 8 and total("refused_after_approval") >= 8, said
    assert total("over_budget") >= 20 and total("uncertain") >= 6, said
    assert total("payment_failed") >= 2 and total("listed_late") >= 8, said
    assert total("duplicates") >= 35 and total("late_runs") >= 30 and total("retried_runs") >= 20, said
    assert total("crashes") >= 10 and total("deploys") >= 15 and total("price_changes") >= 60, said
    for operation in purchase_scenario.WRITES:  # lost on its way or its answer lost; the run killed after it
        assert all(faults[operation, kind] >= 3 for kind in ("timeout", "crash")), (operation, faults)


def test_the_purchase_checks_catch_a_purchase_client_that_retries(monkeypatch):
    """Not vacuous: PurchaseCapacityBlock takes no client token, so a purchase client that resends after a lost
    answer buys the occurrence twice, and EC2's record shows it [aws: ec2-cb.purchase-has-no-client-token]."""
    from botocore.config import Config

    from tests.aws_model import purchase_scenario

    monkeypatch.setattr(purchase_scenario, "PURCHASE", Config(retries={"mode": "standard", "total_max_attempts": 3}))
    with pytest.raises(scenario.InvariantBroken, match="more than its"):
        purchase_scenario.run(days=2, seed=1)
