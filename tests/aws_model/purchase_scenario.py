"""Drive the capacity controller's purchase path (``capacity.controller.run``) over simulated days on the
Capacity Block model (tests/aws_model/capacity_blocks.py) and the DynamoDB model, through real botocore
clients built with the controller's configurations (reads retried, the purchase sent once).

Three windows of one controller: one that buys by itself (``auto``), one that asks first (``approval``)
and one in dry run. The schedule runs the controller every ``SCHEDULE``; a run is now and then delivered
twice or late, and a failed run is run again by Lambda a minute and two minutes later. Faults are drawn
by :class:`tests.aws_model.scenario.FaultPlan` (weighted toward the writes: PurchaseCapacityBlock as an
action, the ledger's PutItem and UpdateItem), and each of them meets every kind early (lost on its way,
answered too late, the run killed after it). The market's price level moves every few hours; a deploy
now and then lowers or restores the windows' hourly caps and the auto window's budget. An operator
approves each purchase asked for, late, sometimes twice, sometimes just after a deploy lowered the cap.

Checked after every run, from the model's own record of what EC2 sold (never from what the controller
says it did):

- never more bought than needed: at no moment do a window's blocks (not released for a failed payment)
  hold more instances than it asks for, so each occurrence is bought at most once;
- never above the hourly cap in force when bought, nor the auto window's budget in force then;
- nothing bought for the approval window without its approval, nor at more than the fee approved;
- nothing bought for the dry-run window, and no ledger item written for it.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from gpu_governance_runtime.capacity import controller
from gpu_governance_runtime.capacity.aws import CapacityMarket
from gpu_governance_runtime.capacity.ledger import ClaimRefused, Ledger
from gpu_governance_runtime.common.clients import CAPACITY_READS, PURCHASE
from gpu_governance_runtime.contract import TAG_WINDOW
from gpu_governance_runtime.planners.capacity import Window

from . import sdk
from .batch import Clock, Crash, Faults
from .capacity_blocks import FakeCapacityBlocks
from .dynamodb import FakeDynamoDB
from .scenario import RECLAIM_FAULT_RATES, FaultPlan, InvariantBroken

CONTROLLER, TABLE = "acme-ml-capacity", "capacity-ledger"
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)  # every run within one budget month
SCHEDULE = 1800.0
EVENT_RETRY_DELAYS = (60.0, 120.0)  # a failed asynchronous invocation is run again [aws: events.lambda-async-retries]
PRICE_LEVELS = (Decimal("0.85"), Decimal("1"), Decimal("1"), Decimal("1.1"), Decimal("1.25"))
CAPS = (Decimal("40"), Decimal("28"))  # what a deploy sets a window's cap to: as declared, or lowered
# The calls that buy or record: the purchase, the ledger's claim (a transaction) and its updates.
WRITES = ("PurchaseCapacityBlock", "TransactWriteItems", "UpdateItem")
AUTO_BUDGETS = (Decimal("60000"), Decimal("5000"))


def windows() -> dict[str, Window]:
    def make(name: str, mode: str, count: int, days: int, first: int) -> Window:
        return Window(
            name=name,
            market="capacity_block",
            instance_type="p5.48xlarge",
            instance_count=count,
            start=START.replace(hour=11, minute=30) + timedelta(days=first),
            duration_hours=24,
            repeat_every_days=days,
            availability_zones=(),
            max_price_per_instance_hour=CAPS[0],
            budget=Decimal("100000") if mode != "auto" else AUTO_BUDGETS[0],
            budget_period="month",
            buy_ahead_days=6,
            prefer_extension=False,
            mode=mode,
            team="research",
        )

    return {
        w.name: w
        for w in (
            make("nightly-eval", "auto", 4, 2, 2),
            make("launch-load", "approval", 2, 1, 3),
            make("dry-eval", "dry_run", 2, 2, 2),
        )
    }


@dataclass
class Report:
    runs: int = 0
    failed_runs: int = 0
    crashes: int = 0
    retried_runs: int = 0
    duplicates: int = 0
    late_runs: int = 0
    deploys: int = 0
    price_changes: int = 0
    purchases: int = 0  # PurchaseCapacityBlock requests EC2 carried out
    bought_auto: int = 0
    bought_approved: int = 0
    payment_failed: int = 0
    listed_late: int = 0  # (run, block) pairs: a run began while a block it had bought was not listed yet
    approvals: int = 0
    approved_twice: int = 0
    over_budget: int = 0  # occurrences the controller left uncovered for the budget (told once a run)
    refused_after_approval: int = 0  # approvals the controller did not honour (price or cap changed since)
    uncertain: int = 0  # purchases whose answer was lost or whose run was killed after it
    faults: Counter = field(default_factory=Counter)  # (operation, fault) -> how many

    def summary(self) -> str:
        return (
            f"{self.runs} runs ({self.duplicates} delivered twice, {self.late_runs} late, {self.failed_runs} failed, "
            f"{self.crashes} killed, {self.retried_runs} run again by Lambda), {self.deploys} deploys, "
            f"{self.price_changes} price changes, {self.over_budget} occurrences left for the budget; {self.purchases} purchases ({self.bought_auto} auto, "
            f"{self.bought_approved} approved, {self.uncertain} uncertain, {self.payment_failed} payment-failed, "
            f"{self.listed_late} listed late); {self.approvals} approvals ({self.approved_twice} twice, "
            f"{self.refused_after_approval} not honoured)"
        )


@dataclass
class _World:
    rng: random.Random
    clock: Clock
    ec2: FakeCapacityBlocks
    dynamodb: FakeDynamoDB
    faults: Faults
    windows: dict[str, Window]
    report: Report
    approved: dict[str, tuple[float, Decimal]] = field(default_factory=dict)  # intent -> (when, fee approved)
    asked: set[str] = field(default_factory=set)
    capacity: CapacityMarket | None = None  # the controller's clients, kept by a warm Lambda between runs
    ledger: Ledger | None = None
    operator: Ledger | None = None  # the CLI's
    checked: int = 0  # purchases already checked

    def moment(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now, UTC)


def run(*, days: float, seed: int = 1, fault_rates: dict[str, float] = RECLAIM_FAULT_RATES) -> Report:
    with sdk.no_backoff():
        return _play(days, seed, fault_rates)


def _play(days: float, seed: int, fault_rates: dict[str, float]) -> Report:
    rng = random.Random(seed)
    clock = Clock(now=START.timestamp())
    plan = FaultPlan(rng, fault_rates)
    plan.every_kind_on(WRITES)
    faults = Faults(plan)
    dynamodb = FakeDynamoDB(faults=faults, clock=clock)
    dynamodb.create_table(TABLE, key="pk")
    world = _World(rng, clock, FakeCapacityBlocks(clock, rng=rng, faults=faults), dynamodb, faults, windows(), Report())
    world.capacity = CapacityMarket(
        ec2=world.ec2.client(config=CAPACITY_READS, by="controller"),
        sagemaker=None,
        controller_id=CONTROLLER,
        purchase_ec2=world.ec2.client(config=PURCHASE, by="controller"),
    )
    world.ledger = Ledger(client=dynamodb.client(config=CAPACITY_READS, by="controller"), table_name=TABLE)
    world.operator = Ledger(client=dynamodb.client(by="operator"), table_name=TABLE)
    events: list[tuple[float, int]] = []  # (due, attempt): scheduled runs and Lambda's retries of failed ones
    approvals: list[tuple[float, str]] = []
    end, next_run, next_price = clock.now + days * 86400, clock.now, clock.now
    while clock.now < end:
        clock.now += 60
        if clock.now >= next_price:
            next_price += rng.choice((1, 3, 6)) * 3600.0
            world.ec2.price = rng.choice(PRICE_LEVELS)
            world.report.price_changes += 1
        if rng.random() < 1 / (18 * 60):  # about one deploy every 18 hours
            _deploy(world)
        if clock.now >= next_run:
            next_run += SCHEDULE
            late = rng.random() < 0.1
            world.report.late_runs += late
            events.append((clock.now + (rng.uniform(60, 900) if late else 0), 0))
            if rng.random() < 0.1:  # EventBridge delivers at least once: the same run twice
                world.report.duplicates += 1
                events.append((clock.now, 0))
        for event in sorted(e for e in events if e[0] <= clock.now):
            events.remove(event)
            if not _run(world) and event[1] < len(EVENT_RETRY_DELAYS):
                world.report.retried_runs += 1
                events.append((clock.now + EVENT_RETRY_DELAYS[event[1]], event[1] + 1))
            _check(world)
            approvals += _ask(world)
        for due, intent in [a for a in approvals if a[0] <= clock.now]:
            approvals.remove((due, intent))
            _approve(world, intent)
    report = world.report
    report.faults = Counter((operation, f) for operation, _, f in faults.injected)
    report.uncertain = sum(1 for op, phase, _ in faults.injected if (op, phase) == ("PurchaseCapacityBlock", "after"))
    report.purchases = len(world.ec2.bought)
    report.payment_failed = sum(b.payment_fails for b in world.ec2.bought)
    return report


def _run(world: _World) -> bool:
    """One controller run; False when it failed (Lambda runs it again)."""
    world.report.runs += 1
    unlisted = {b.reservation_id for b in world.ec2.bought if b.listed_at > world.clock.now}
    try:
        controller.run(
            windows=list(world.windows.values()),
            ledger=world.ledger,
            capacity=world.capacity,
            notify=lambda subject, message: _notified(world, message),
            now=world.moment(),
            sleep=lambda seconds: None,
        )
    except Crash:
        world.report.crashes += 1
        world.report.failed_runs += 1
        return False
    except Exception:  # noqa: BLE001 - the listing failed: the run fails (and alarms), as in Lambda
        world.report.failed_runs += 1
        return False
    finally:
        world.report.listed_late += len(unlisted)
    return True


def _notified(world: _World, message: dict[str, Any]) -> None:
    world.report.over_budget += str(message.get("reason", "")).startswith("budget")


def _deploy(world: _World) -> None:
    """A stack update: each window's cap as declared or lowered, the auto window's budget too."""
    world.report.deploys += 1
    world.windows = {
        name: replace(
            w,
            max_price_per_instance_hour=world.rng.choice(CAPS),
            budget=world.rng.choice(AUTO_BUDGETS) if w.mode == "auto" else w.budget,
        )
        for name, w in world.windows.items()
    }


def _ask(world: _World) -> list[tuple[float, str]]:
    """The operator sees each new request for approval and answers it late, sometimes twice."""
    due = []
    for item in _items(world):
        if item.get("status", {}).get("S") == "awaiting_approval" and item["pk"]["S"] not in world.asked:
            world.asked.add(item["pk"]["S"])
            intent = item["pk"]["S"].removeprefix("intent#")
            first = world.clock.now + world.rng.uniform(600, 8 * 3600)
            due.append((first, intent))
            if world.rng.random() < 0.3:
                due.append((first + world.rng.uniform(60, 3600), intent))
    return due


def _approve(world: _World, intent_id: str) -> None:
    """``gpu-governance capacity approve``: the operator's own call (its faults are not this test's)."""
    saved, world.faults.plan = world.faults.plan, lambda operation, phase: None
    try:
        try:
            intent = world.operator.approve(intent_id, now=world.moment())
        except ClaimRefused:
            world.report.approved_twice += intent_id in world.approved
            return
        world.approved[intent_id] = (world.clock.now, intent.offering.upfront_fee)
        world.report.approvals += 1
        if world.rng.random() < 0.3:  # a deploy right after the approval: the cap may be lower now
            _deploy(world)
    finally:
        world.faults.plan = saved


def _items(world: _World) -> list[dict[str, Any]]:
    return list(world.dynamodb.tables[TABLE][1].values())


def _check(world: _World) -> None:
    bought = world.ec2.bought
    for b in bought[world.checked :]:
        window = world.windows[b.tags[TAG_WINDOW]]
        if window.mode == "dry_run":
            raise InvariantBroken(f"dry run bought {b.reservation_id} for {window.name}")
        if b.per_instance_hour > window.max_price_per_instance_hour:
            raise InvariantBroken(
                f"{b.reservation_id} bought at {b.per_instance_hour:.2f} an instance-hour, above {window.name}'s cap "
                f"of {window.max_price_per_instance_hour} in force"
            )
        if window.mode == "auto":
            world.report.bought_auto += 1
            spent = sum(o.fee for o in world.ec2.held(window.name) if o.at <= b.at)
            if not b.payment_fails and spent > window.budget:
                raise InvariantBroken(f"{b.reservation_id} took {window.name}'s spend to {spent}, over {window.budget}")
        else:
            world.report.bought_approved += 1
            approved = world.approved.get(world.ec2.intent_of(b))
            if approved is None or approved[0] > b.at:
                raise InvariantBroken(f"{b.reservation_id} bought for {window.name} without its approval")
            if b.fee > approved[1]:
                raise InvariantBroken(f"{b.reservation_id} bought at {b.fee}, more than the {approved[1]} approved")
        _at_most_needed(world, window)
    world.checked = len(bought)
    for item in _items(world):
        if "dry-eval" in item["pk"]["S"] or item.get("window", {}).get("S") == "dry-eval":
            raise InvariantBroken(f"dry run wrote {item['pk']['S']}")
    world.report.refused_after_approval = sum(
        1
        for item in _items(world)
        if item["pk"]["S"].removeprefix("intent#") in world.approved
        and item.get("status", {}).get("S") == "failed"
        and "price" in item.get("reason", {}).get("S", "")
    )


def _at_most_needed(world: _World, window: Window) -> None:
    """At no moment more instances held for ``window`` than it asks for."""
    held = world.ec2.held(window.name)
    for b in held:
        holding = sum(o.count for o in held if o.start <= b.start < o.end)
        if holding > window.instance_count:
            raise InvariantBroken(
                f"{window.name} holds {holding} instances from {b.start:%m-%d %H:%M}, more than its "
                f"{window.instance_count}: {[o.reservation_id for o in held if o.start <= b.start < o.end]}"
            )
