"""Never lose a reservation id (issue 24, outcome 8): the ledger write after a purchase is retried
with the id the purchase answered with, and an intent is settled as not bought only when the block
is absent by its tag and by its id well past the listing lag, never because a listing was late.

The ledger is moto's DynamoDB; throttling is DynamoDB's own answer (a cancelled transaction with a
``ThrottlingError`` reason, https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html),
injected at the call boundary with a botocore hook."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from gpu_governance_runtime.capacity import controller

from .builders import NOW, at, block, window
from .simulated_ec2 import SimulatedEc2
from .stubbed_aws import create_ledger_table

WINDOW = window(mode="auto", budget=Decimal("20000"))
OFFER = block("cbo-1111111111111111", at(10), 1, per_hour="29")


def throttle_after_purchase(sim, ledger, operation: str, times: int) -> list[int]:
    """From the purchase call on, the next ``times`` calls of ``operation`` on the ledger's table are
    throttled; the count of calls made."""
    calls = [0]
    sim.during_call.append(lambda: ledger._db.meta.events.register(f"before-call.dynamodb.{operation}", answer))

    def answer(model, **_):
        calls[0] += 1
        if calls[0] > times:
            return None
        body = (
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                "CancellationReasons": [{"Code": "ThrottlingError"}, {"Code": "None"}],
            }
            if operation == "TransactWriteItems"
            else {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}}
        )
        return AWSResponse("https://dynamodb.us-east-1.amazonaws.com", 400, {}, None), {
            **body,
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }

    return calls


@pytest.fixture
def ledger():
    with mock_aws():
        yield create_ledger_table()


def run(sim, ledger, notes=None):
    return controller.run(
        windows=[WINDOW],
        ledger=ledger,
        capacity=sim.market,
        notify=lambda s, m: (notes or []).append((s, m)),
        now=sim.now,
        clock=sim.clock,
        sleep=lambda seconds: None,
    )


def test_a_throttled_settle_is_retried_with_the_reservation_id(ledger):
    sim = SimulatedEc2(offerings=[OFFER], lag=timedelta(minutes=30), now=NOW)
    calls = throttle_after_purchase(sim, ledger, "TransactWriteItems", times=2)
    report = run(sim, ledger)
    (bought,) = ledger.intents("purchased")
    assert bought.reservation_id == sim.made[0].reservation_id and calls[0] == 3
    assert [i.reservation_id for i in report.bought] == [sim.made[0].reservation_id]


def test_a_settle_that_never_goes_through_loses_neither_the_id_nor_the_block_to_a_late_listing(ledger):
    sim = SimulatedEc2(offerings=[OFFER], lag=timedelta(minutes=40), now=NOW)  # longer than the old 15-minute grace
    throttle_after_purchase(sim, ledger, "TransactWriteItems", times=controller.SETTLE_ATTEMPTS)
    report = run(sim, ledger)
    assert report.errors and "TransactionCanceledException" in report.errors[0][1]
    (undecided,) = ledger.open_intents()
    assert undecided.reservation_id == sim.made[0].reservation_id  # kept by the smaller write
    for minutes in (16, 30, 41):  # the listing shows the block at 40 minutes
        sim.now = NOW + timedelta(minutes=minutes)
        run(sim, ledger)
    assert len(sim.made) == 1  # never bought again
    (bought,) = ledger.intents("purchased")
    assert bought.reservation_id == sim.made[0].reservation_id
    assert ledger.spent(WINDOW, NOW) == OFFER.upfront_fee


def test_an_attempt_is_failed_only_when_absent_by_tag_and_id_past_the_grace(ledger):
    sim = SimulatedEc2(offerings=[OFFER], lag=timedelta(0), now=NOW, faults=["server_error_before"])
    run(sim, ledger)  # a 5xx: uncertain, and nothing was bought
    sim.now = NOW + timedelta(minutes=16)
    run(sim, ledger)
    assert [i.status for i in ledger.intents("purchasing")] == ["purchasing"]  # the old grace: still undecided
    sim.now = NOW + controller.SETTLE_AFTER + timedelta(minutes=1)
    run(sim, ledger)
    assert [i.reason for i in ledger.intents("failed")] == [
        f"no trace {controller.SETTLE_AFTER} after the purchase call: not bought"
    ]
    assert len(sim.made) == 1  # and the next plan bought the occurrence once
