"""Drive the capacity controller's requeue path for a Batch compute environment on Capacity Blocks
over simulated days: one block a day, jobs running on its instances, the expiration warning 40
minutes before its end (delivered late, twice, or retried by Lambda after a failed run), the
instances terminated 30 minutes before the end (tests/aws_model/ec2.py), and the controller's
scheduled run every 5 minutes. Each run does what ``capacity.handler.process`` does for this
backend: ``requeue.resume`` first, then ``requeue.drain`` for the warned block (on the warning
event) and for every other block within ``requeue.SIGNAL_LEAD`` of its end; the drain event goes
to :class:`FakeEvents`. Faults are injected at every Batch, EC2, ECS, EventBridge and DynamoDB
call (:class:`tests.aws_model.scenario.FaultPlan`: weighted toward the writes, and each of TerminateJob,
SubmitJob, PutEvents and the ledger's writes meets every kind once: lost on its way, answered too late,
the run killed after it), and a job just submitted stays out of ListJobs for a lag drawn from
``LISTING_LAGS``. Checked after every step (:class:`tests.aws_model.scenario.Checks` plus the block's own rule):

- no job lost: every job the controller stopped has its copy (or its requeue is still open and
  is finished once the faults stop); a job that was running on the block otherwise ends
  SUCCEEDED, or fails as its host did and its retry strategy brings it back;
- none twice: never two copies of one job, never one job running twice at once;
- a job is stopped only ``CHECKPOINT_SECONDS`` or more after the first drain event sent to tell it
  to checkpoint, or (that sent late) by the last run before its instances go;
- nothing changed in dry run: no request to Batch that stops or submits, no drain event sent
  (:class:`FakeEvents` counts every request it receives), no ledger item written.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from gpu_governance_runtime.capacity import requeue
from gpu_governance_runtime.capacity.ledger import Ledger
from gpu_governance_runtime.contract import TAG_REQUEUED_FROM

from .batch import Clock, Crash, Environment, FakeBatch, Faults
from .dynamodb import FakeDynamoDB
from .ec2 import (
    WARNING_LEAD,
    Block,
    FakeEc2,
    FakeEcs,
    container_instance,
)
from .scenario import LISTING_LAGS, RECLAIM_FAULT_RATES, Checks, FaultPlan, InvariantBroken

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/block"
ENVIRONMENT = "arn:aws:batch:us-east-1:111122223333:compute-environment/p5-block"
CLUSTER = "arn:aws:ecs:us-east-1:111122223333:cluster/p5-block"
WINDOW = "nightly-p5"
SCHEDULE = 300.0  # the construct runs the controller every 5 minutes while a window feeds a compute environment
BLOCK_HOURS, GAP_HOURS, INSTANCES = 22, 2, 8
# An event whose run failed (a warning's, or the schedule's: both invoke the function asynchronously) is
# retried twice, about a minute and then two minutes later [aws: events.lambda-async-retries].
EVENT_RETRY_DELAYS = (60.0, 120.0)
# The scenario's own rule (not the controller's constant): a job gets at least one schedule to checkpoint after the
# drain event told it to (docs/capacity.md).
CHECKPOINT_SECONDS = SCHEDULE
# Unless the first drain event came so late that this would leave no run before the instances terminate (30
# minutes before the end): then the job is stopped by the last run before them (docs/capacity.md).
LAST_STOP_SECONDS = 30 * 60 + SCHEDULE


class FakeEvents:
    """EventBridge ``put_events``: when each block's first drain event went out, and how many
    requests came (whether they got through or not)."""

    def __init__(self, clock: Clock, faults: Faults):
        self.clock, self.faults = clock, faults
        self.signalled: dict[str, float] = {}  # capacity reservation id -> its first drain event
        self.tried: dict[str, float] = {}  # capacity reservation id -> the first request to send one
        self.requests = 0

    def put_events(self, *, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        # every entry accepted; the rule delivers at least once [aws: events.lambda-async-retries]
        self.requests += 1
        for entry in Entries:
            self.tried.setdefault(json.loads(entry["Detail"])["capacity_reservation_id"], self.clock.now)
        self.faults.check("PutEvents", "before", throttle_code="ThrottlingException", service="events")
        for entry in Entries:
            self.signalled.setdefault(json.loads(entry["Detail"])["capacity_reservation_id"], self.clock.now)
        self.faults.check("PutEvents", "after", throttle_code="ThrottlingException", service="events")
        return {"FailedEntryCount": 0, "Entries": [{"EventId": f"event-{n}"} for n, _ in enumerate(Entries)]}


@dataclass
class Report:
    runs: int = 0
    submitted: int = 0
    stopped: int = 0
    copies: int = 0
    warnings: int = 0
    failed_runs: int = 0
    crashes: int = 0
    warnings_unhandled: int = 0  # blocks whose warning no run handled (every delivery and Lambda retry failed)
    drain_errors: int = 0
    killed_with_instances: int = (
        0  # attempts that ended with their instance (not stopped in time): Batch's retry strategy applies
    )
    faults: Counter = field(default_factory=Counter)  # (operation, fault) -> how many
    retried_runs: int = 0  # failed runs Lambda invoked again a minute or two later
    stopped_untold: int = 0  # jobs stopped while every drain event of their block had failed
    uncertain_copies: int = 0  # copies whose SubmitJob's answer was lost or whose run was killed after it

    def summary(self) -> str:
        return (
            f"{self.runs} controller runs, {self.warnings} warning deliveries ({self.warnings_unhandled} blocks' warning never handled), "
            f"{self.submitted} jobs submitted, "
            f"{self.stopped} jobs stopped at a block's end ({self.stopped_untold} while every drain event had failed), "
            f"{self.copies} copies ({self.uncertain_copies} whose submit's answer was lost or whose run was killed after "
            f"it), {self.killed_with_instances} attempts ended with their instance, {self.failed_runs} failed runs "
            f"({self.crashes} crashed, {self.retried_runs} run again by Lambda)"
        )


def run(
    *,
    days: float,
    seed: int = 1,
    dry_run: bool = False,
    fault_rates: dict[str, float] = RECLAIM_FAULT_RATES,
    duplicate_rate: float = 0.1,
    late_seconds: float = 240.0,
    listing_lags: tuple[float, ...] = LISTING_LAGS,
) -> Report:
    rng = random.Random(seed)
    clock = Clock()
    plan = FaultPlan(rng, fault_rates)
    # first, twice, a run killed between a copy's SubmitJob and its record: Lambda runs it again a minute
    # later, often before the copy is listed
    plan.force("SubmitJob", "after", "crash", "crash")
    plan.every_kind_on(("TerminateJob", "SubmitJob", "PutEvents", "PutItem"))  # the capacity ledger writes with PutItem
    faults = Faults(plan)
    day = 86400.0
    blocks = [
        Block(
            f"cr-{n:013x}",
            clock.now + n * day + GAP_HOURS * 3600,
            clock.now + n * day + (GAP_HOURS + BLOCK_HOURS) * 3600,
            INSTANCES,
        )
        for n in range(int(days) + 1)
    ]
    ec2 = FakeEc2(clock, blocks, faults=faults)
    ecs = FakeEcs(ec2, cluster=CLUSTER, faults=faults)
    batch = FakeBatch(
        clock,
        capacity={},
        faults=faults,
        listing_lag=lambda: rng.choice(listing_lags),
        environments={
            ENVIRONMENT: Environment(CLUSTER, (QUEUE,), lambda: [container_instance(i) for i in ec2.live_instances()])
        },
    )
    dynamodb = FakeDynamoDB(faults=faults)
    dynamodb.create_table("capacity", key="pk")
    ledger = Ledger(client=dynamodb.client(), table_name="capacity")
    eventbridge = FakeEvents(clock, faults)
    world = (ledger, batch, ec2, ecs, eventbridge, blocks, clock)
    report, checks = Report(), Checks(batch, None, dry_run)
    # (due, attempt, block): warning deliveries (the schedule's runs: block None) and Lambda's retries of a failed run
    events: list[tuple[float, int, Block | None]] = []
    for block in blocks:
        first = block.end - WARNING_LEAD + rng.uniform(0, late_seconds)
        events.append((first, 0, block))
        if rng.random() < duplicate_rate:  # EventBridge delivers at least once: the same event again
            events.append((first + rng.uniform(0, late_seconds), 0, block))
    end, seen_requests, handled, next_run = clock.now + days * day, 0, set(), clock.now
    while clock.now < end:
        _arrivals(rng, batch, report)
        batch.advance(60)
        if clock.now >= next_run:  # the schedule's run: an asynchronous invocation, retried as an event's
            next_run += SCHEDULE
            events.append((clock.now, 0, None))
        for event in sorted((e for e in events if e[0] <= clock.now), key=lambda e: e[:2]):
            events.remove(event)
            _, attempt, block = event
            report.warnings += block is not None
            ran = _run(world, report, dry_run, block)
            if ran and block is not None:
                handled.add(block.reservation_id)
            elif not ran and attempt < len(EVENT_RETRY_DELAYS):
                report.retried_runs += 1
                events.append((clock.now + EVENT_RETRY_DELAYS[attempt], attempt + 1, block))
        checks.step()
        seen_requests = _check_stop_times(batch, blocks, eventbridge, seen_requests, report)
        if dry_run and (eventbridge.requests or dynamodb.tables["capacity"][1]):
            raise InvariantBroken(
                f"dry run changed something: {eventbridge.requests} drain events sent, "
                f"ledger items {sorted(dynamodb.tables['capacity'][1])[:3]}"
            )
    plan.on = False  # the faults stop: every open requeue must now be finished
    plan.forced.clear()
    for _ in range(3):
        batch.advance(SCHEDULE)
        _run(world, report, dry_run, None)
    checks.final()
    report.faults = Counter((operation, f) for operation, _, f in faults.injected)
    report.uncertain_copies = sum(
        1 for operation, phase, f in faults.injected if (operation, phase) == ("SubmitJob", "after")
    )
    report.warnings_unhandled = sum(
        1 for b in blocks if b.end - WARNING_LEAD <= clock.now and b.reservation_id not in handled
    )
    report.copies = sum(1 for j in batch.jobs.values() if TAG_REQUEUED_FROM in j["tags"])
    report.stopped = sum(1 for operation, _ in batch.requests if operation == "TerminateJob")
    report.killed_with_instances = sum(
        1 for j in batch.jobs.values() for a in j["attempts"] if a["statusReason"].startswith("Host EC2")
    )
    return report


def _run(world: tuple, report: Report, dry_run: bool, warned: Block | None) -> bool:
    """One controller invocation; False when it failed (Lambda runs it again a minute or two later)."""
    ledger, batch, ec2, ecs, eventbridge, blocks, clock = world
    now = datetime.fromtimestamp(clock.now, UTC)
    report.runs += 1

    def drain(block: Block) -> None:
        requeue.drain(
            window=WINDOW,
            compute_environment=ENVIRONMENT,
            reservation_id=block.reservation_id,
            ends_at=datetime.fromtimestamp(block.end, UTC),
            moved_to=None,
            dry_run=dry_run,
            ledger=ledger,
            ec2=ec2,
            ecs=ecs,
            batch=batch,
            submit=batch,
            events=eventbridge,
            now=now,
        )

    try:
        requeue.resume(ledger=ledger, batch=batch, submit=batch, now=now)
        if warned is not None:
            drain(warned)
        for block in blocks:  # every run, as consumer_steps.drain_batch_blocks: a failed listing is the next run's
            if (
                block is not warned
                and block.start <= clock.now
                and requeue.draining(datetime.fromtimestamp(block.end, UTC), now)
            ):
                try:
                    drain(block)
                except (ClientError, BotoCoreError):
                    report.drain_errors += 1
    except Crash:
        report.failed_runs += 1
        report.crashes += 1
        return False
    except Exception:  # noqa: BLE001 - a faulted read fails the invocation, as in Lambda
        report.failed_runs += 1
        return False
    return True


def _arrivals(rng: random.Random, batch: FakeBatch, report: Report) -> None:
    """About one single-node job every 40 minutes, 1 to 8 hours of work, retried by Batch up to 3 attempts."""
    if rng.random() < 60 / 2400:
        batch.add_job(
            jobName=f"train-{report.submitted}",
            jobQueue=QUEUE,
            jobDefinition="arn:aws:batch:us-east-1:111122223333:job-definition/train:7",
            shareIdentifier="research",
            retryStrategy={"attempts": 3},
            timeout={"attemptDurationSeconds": 86400},
            parameters={"work_seconds": str(int(rng.uniform(1, 8) * 3600))},
            tags={"gpu-governance:team": "research"},
        )
        report.submitted += 1


def _check_stop_times(batch: FakeBatch, blocks: list[Block], eventbridge: FakeEvents, seen: int, report: Report) -> int:
    """A job is stopped only CHECKPOINT_SECONDS or more after the controller first sent its block's
    drain event to tell it to checkpoint, or (the event sent late) in the block's last LAST_STOP_SECONDS.
    Where EventBridge refused or lost every one, the job is stopped untold (counted): stopping it at
    its time beats losing it with its instance."""
    for operation, request in batch.requests[seen:]:
        if operation != "TerminateJob":
            continue
        ending = min((b for b in blocks if b.end >= request["_at"]), key=lambda b: b.end)
        tried = eventbridge.tried.get(ending.reservation_id)
        at_the_last_run = request["_at"] >= ending.end - LAST_STOP_SECONDS
        if tried is None or (request["_at"] < tried + CHECKPOINT_SECONDS and not at_the_last_run):
            raise InvariantBroken(
                f"{request['jobId']} stopped {request['_at'] - (tried or request['_at']):.0f} s after its block's "
                f"drain event ({'none sent' if tried is None else 'too early to checkpoint'})"
            )
        report.stopped_untold += ending.reservation_id not in eventbridge.signalled
    return len(batch.requests)
