"""Exactly-once buying under EC2's real behaviour: listings that lag, events in bursts and out
of order, runs overlapping a purchase call, answers lost after the purchase was made and
invocations killed between call and record. Two or more runs go through the real ledger (moto
DynamoDB) against the simulated market of ``simulated_ec2``; for every interleaving AWS sells
at most one block per occurrence and the ledger's spend equals what was paid."""

from __future__ import annotations

import contextlib
from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from moto import mock_aws

from gpu_governance_runtime.capacity import controller

from .builders import NOW, at, block, window
from .simulated_ec2 import FAULTS, Killed, SimulatedEc2
from .stubbed_aws import create_ledger_table

# A budget with room for several blocks: only the controller, not the budget, may stop a second.
WINDOW = window(mode="auto", budget=Decimal("20000"))
OFFERS = [
    block("cbo-1111111111111111", at(10), 1, per_hour="29"),
    block("cbo-2222222222222222", at(10), 1, per_hour="30"),
]
MINUTE = timedelta(minutes=1)


class World:
    def __init__(self, *, lag_minutes: float, faults=(), windows=(WINDOW,), **market):
        self.sim = SimulatedEc2(
            offerings=list(OFFERS), lag=lag_minutes * MINUTE, now=NOW, faults=list(faults), **market
        )
        self.ledger = create_ledger_table()
        self.windows = windows
        self.notes: list[tuple[str, dict]] = []
        self.reports: list[controller.RunReport] = []

    def run(self) -> None:
        """One invocation from now on; a killed one leaves whatever it recorded."""
        with contextlib.suppress(Killed):
            self.reports.append(
                controller.run(
                    windows=self.windows,
                    ledger=self.ledger,
                    capacity=self.sim.market,
                    notify=lambda s, m: self.notes.append((s, m)),
                    now=self.sim.now,
                    clock=self.sim.clock,
                )
            )

    def run_at(self, minutes: float) -> None:
        self.sim.now = max(self.sim.now, NOW + minutes * MINUTE)
        self.run()

    def quiesce(self) -> None:
        """Runs without faults until every block is listed and every intent settled."""
        self.sim.faults, self.sim.during_call = [], []
        for _ in range(3):  # an uncertain attempt settles as not bought, the next one succeeds
            self.run_at((self.sim.now - NOW) / MINUTE + controller.SETTLE_AFTER / MINUTE + self.sim.lag / MINUTE + 1)
            if not self.ledger.open_intents():
                break
        self.run_at((self.sim.now - NOW) / MINUTE + self.sim.lag / MINUTE + 1)

    def assert_exactly_once(self, *, purchases: int | None = 1) -> None:
        per_occurrence = Counter((p.window, p.offering.start) for p in self.sim.made)
        assert all(n <= 1 for n in per_occurrence.values()), f"bought twice: {self.sim.made}"
        if purchases is not None:
            assert len(self.sim.made) == purchases
        paid = sum((p.offering.upfront_fee for p in self.sim.made), Decimal(0))
        assert self.ledger.spent(WINDOW, NOW) == paid
        assert self.ledger.open_intents() == []


# Runs started by a burst of Capacity Block events (two at the same minute: one event delivered
# twice), then by the schedule.
BURST = (0, 0, 1, 2, 3, 5, 8, 11, 12, 16, 25, 40)


@pytest.fixture
def aws():
    with mock_aws():
        yield


@pytest.mark.parametrize("lag", [1, 2, 10])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_burst_of_runs_buys_once_whatever_the_lag_and_the_fault(aws, lag, fault):
    world = World(lag_minutes=lag, faults=[fault])
    for minute in BURST:
        world.run_at(minute)
    world.quiesce()
    world.assert_exactly_once()


@pytest.mark.parametrize("lag", [1, 2, 10])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_runs_inside_a_purchase_call_buy_nothing_more(aws, lag, fault):
    """A second and a third invocation run while the first waits for its purchase answer: they
    start later and finish first (out of order)."""
    world = World(lag_minutes=lag, faults=[fault])
    world.sim.during_call = [world.run, world.run]
    world.run_at(0)
    for minute in (1, 2, 10, 12):
        world.run_at(minute)
    world.quiesce()
    world.assert_exactly_once()


@pytest.mark.parametrize("lag", [1, 2, 10])
def test_a_run_that_calls_late_and_is_killed_is_not_settled_by_the_run_start(aws, lag):
    """The run reads offerings for 8 minutes, then its purchase call is made and the function is
    killed before recording the answer: the grace counts from the call, not the run start."""
    world = World(lag_minutes=lag, faults=["killed_after"], page_takes=4 * MINUTE)
    world.run_at(0)
    world.sim.page_takes = timedelta(0)
    intent = world.ledger.open_intents()[0]
    assert intent.called_at == NOW + 8 * MINUTE  # recorded before the call
    for minute in (11, 15, 19, 24, 30):
        world.run_at(minute)
    world.quiesce()
    world.assert_exactly_once()


def test_a_purchase_recorded_but_not_listed_yet_counts_as_held(aws):
    world = World(lag_minutes=5)
    world.run_at(0)
    assert [i.status for i in world.ledger.intents("purchased")] == ["purchased"]
    world.run_at(1)  # a Capacity Block event a minute later: the listing is still empty
    report = world.reports[-1]
    assert report.plan.purchases == () and report.plan.covered
    world.quiesce()
    world.assert_exactly_once()


def test_a_block_listed_after_the_grace_is_recorded_again_and_alerted(aws):
    """Beyond the assumption (listed within SETTLE_AFTER) a second block can be bought; the
    ledger still records every fee paid and the operator is told."""
    grace = controller.SETTLE_AFTER / MINUTE
    world = World(lag_minutes=grace + 5, faults=["timeout_after"])
    for minute in (
        0,
        5,
        10,
        grace + 1,
        grace + 3,
    ):  # settled as failed past the grace, bought again, before it is listed
        world.run_at(minute)
    world.quiesce()
    assert len(world.sim.made) == 2
    [first] = [i for r in world.reports for i in r.found_late]
    assert first.id == world.sim.made[0].intent and first.reservation_id == world.sim.made[0].reservation_id
    alert = next(m for s, m in world.notes if s == "Capacity purchase found after it was settled as failed")
    assert alert["fee"] == str(OFFERS[0].upfront_fee) and "second block" in alert["check"]
    assert world.ledger.spent(WINDOW, NOW) == sum(p.offering.upfront_fee for p in world.sim.made)
    # Found once: later runs do not count it again.
    world.run_at((world.sim.now - NOW) / MINUTE + 30)
    assert world.ledger.spent(WINDOW, NOW) == sum(p.offering.upfront_fee for p in world.sim.made)


def test_one_window_that_cannot_be_read_does_not_stop_the_others(aws):
    other = window(name="other-window", mode="auto", budget=Decimal("20000"), instance_type="p5e.48xlarge")
    world = World(lag_minutes=1, windows=(other, WINDOW), unreadable_types=frozenset({"p5e.48xlarge"}))
    world.run_at(0)
    report = world.reports[-1]
    assert [i.window for i in report.bought] == [WINDOW.name]
    assert report.errors[0][0] == "window other-window" and "Unavailable" in report.errors[0][1]
    assert not any(
        occurrence.startswith("other-window") for occurrence, _ in report.uncovered
    )  # not "no offering": unknown
    assert any(s == "Capacity controller step failed" and m["what"] == "window other-window" for s, m in world.notes)


def test_no_purchase_is_started_without_time_to_finish_it(aws):
    world = World(lag_minutes=1)
    world.reports.append(
        controller.run(
            windows=[WINDOW],
            ledger=world.ledger,
            capacity=world.sim.market,
            notify=lambda s, m: None,
            now=NOW,
            time_left=lambda: controller.PURCHASE_SECONDS - 1,
        )
    )
    assert world.reports[-1].deferred == (f"{WINDOW.name}@20261210T1400Z",)
    assert world.sim.made == [] and world.ledger.open_intents() == []  # nothing claimed: the next run is free to buy
    world.run_at(1)
    world.quiesce()
    world.assert_exactly_once()


STEP = st.tuples(st.integers(0, 20), st.sampled_from(sorted(FAULTS)), st.integers(0, 2))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lag=st.integers(0, int(controller.SETTLE_AFTER / MINUTE) - 1),
    steps=st.lists(STEP, min_size=1, max_size=8),
    slow_reads=st.integers(0, 4),
)
def test_any_sequence_of_runs_events_delays_and_faults_buys_at_most_once_and_records_what_was_paid(
    lag, steps, slow_reads
):
    with mock_aws():
        world = World(lag_minutes=lag, page_takes=slow_reads * MINUTE)
        for gap, fault, overlapping in steps:
            world.sim.faults = [fault]
            world.sim.during_call = [world.run] * overlapping
            world.run_at((world.sim.now - NOW) / MINUTE + gap)
            # At every moment the ledger counts at least what was paid (undecided fees stay reserved).
            assert world.ledger.spent(WINDOW, NOW) >= sum((p.offering.upfront_fee for p in world.sim.made), Decimal(0))
        world.sim.page_takes = timedelta(0)
        world.quiesce()
        world.assert_exactly_once(purchases=None)


def test_offerings_are_read_to_the_last_page(aws):
    """The simulated market answers one offering per page: the cheapest is on the second."""
    world = World(lag_minutes=1)
    world.sim.offerings = [OFFERS[1], OFFERS[0]]
    world.run_at(0)
    assert [p.offering.id for p in world.sim.made] == [OFFERS[0].id]
