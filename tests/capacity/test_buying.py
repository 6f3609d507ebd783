"""Fault-injection matrix for exactly-once buying. Every case asserts: no double purchase, no
spend beyond the budget, and every window left uncovered is reported."""

from datetime import timedelta
from decimal import Decimal

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ParamValidationError,
    ReadTimeoutError,
    SSLError,
)
from moto import mock_aws

from gpu_governance_runtime.capacity import controller
from gpu_governance_runtime.capacity.aws import PURCHASE_CLIENT_CONFIG, classify
from gpu_governance_runtime.capacity.ledger import ClaimRefused, Ledger

from .builders import NOW, at, block, window
from .stubbed_aws import REGION, TABLE, StubbedAws, capacity_reservation, create_ledger_table, later

WINDOW = window(mode="auto", budget=Decimal("5000"))  # one 2784 block fits, two do not
OFFER = block("cbo-1111111111111111", at(10), 1, per_hour="29")
INTENT_1 = "launch-load-test-202612101400-1"
INTENT_2 = "launch-load-test-202612101400-2"
OCCURRENCE = "launch-load-test@20261210T1400Z"


@pytest.fixture
def aws():
    with mock_aws():
        yield StubbedAws(), create_ledger_table()


def run(aws_pair, now=NOW, windows=(WINDOW,)):
    stubbed, ledger = aws_pair
    notes = []
    report = controller.run(
        windows=windows, ledger=ledger, capacity=stubbed.market, notify=lambda s, m: notes.append((s, m)), now=now
    )
    return report, notes


def assert_invariants(aws_pair, *, successful_purchases):
    stubbed, ledger = aws_pair
    stubbed.done()  # every stubbed call made, no unexpected one (an extra purchase would raise)
    spent = ledger.spent(WINDOW, NOW)
    assert spent == OFFER.upfront_fee * successful_purchases
    assert spent <= WINDOW.budget


def test_buys_once_and_a_duplicate_event_buys_nothing(aws):
    stubbed, ledger = aws
    stubbed.owned()
    stubbed.offerings(OFFER)
    stubbed.purchase(OFFER, INTENT_1, WINDOW.name)
    report, notes = run(aws)
    assert [i.id for i in report.bought] == [INTENT_1]
    assert notes[0][0] == "Capacity bought" and notes[0][1]["fee"] == "2784"
    # The same event again: the tagged block is found, the window is covered, nothing is bought.
    stubbed.owned(capacity_reservation(OFFER, intent_id=INTENT_1, window=WINDOW.name))
    report, _ = run(aws, later(NOW, 1))
    assert report.plan.covered and report.plan.purchases == ()
    assert len(stubbed.purchase_attempts) == 1
    assert_invariants(aws, successful_purchases=1)


def test_throttled_purchase_was_not_made_and_is_retried_next_run(aws):
    stubbed, ledger = aws
    stubbed.owned()
    stubbed.offerings(OFFER)
    stubbed.purchase_error("RequestLimitExceeded", 503)
    report, _ = run(aws)
    assert report.failed[0][0] == INTENT_1 and "throttled" in report.failed[0][1]
    assert report.uncovered == ((OCCURRENCE, "purchase failed: throttled (RequestLimitExceeded); retried next run"),)
    assert ledger.spent(WINDOW, NOW) == 0  # the reserved fee went back
    stubbed.owned()
    stubbed.offerings(OFFER)
    stubbed.purchase(OFFER, INTENT_2, WINDOW.name)
    report, _ = run(aws, later(NOW, 5))
    assert [i.id for i in report.bought] == [INTENT_2]
    assert_invariants(aws, successful_purchases=1)


@pytest.mark.parametrize("fault", ["server_error", "timeout"])
def test_purchase_that_went_through_despite_an_error_is_found_by_its_tag(aws, fault):
    stubbed, ledger = aws
    stubbed.owned()
    stubbed.offerings(OFFER)
    if fault == "server_error":
        stubbed.purchase_error("InternalError", 500)  # the service bought it, then failed to answer
    else:
        stubbed.purchase_times_out_after_going_through(OFFER, INTENT_1, WINDOW.name)
    report, _ = run(aws)
    assert report.in_flight == (INTENT_1,) and report.bought == ()
    assert ledger.spent(WINDOW, NOW) == OFFER.upfront_fee  # counted while undecided
    # Next run: reconciliation finds the block by its intent tag before planning anything.
    stubbed.owned(capacity_reservation(OFFER, intent_id=INTENT_1, window=WINDOW.name))
    report, _ = run(aws, later(NOW, 2))
    assert [(i.id, i.reservation_id) for i in report.bought] == [(INTENT_1, "cr-0123456789abcdef0")]
    assert ledger.intent(INTENT_1).status == "purchased"
    assert len(stubbed.purchase_attempts) == 1
    assert_invariants(aws, successful_purchases=1)


def test_server_error_without_purchase_waits_for_settling_then_buys_again(aws):
    stubbed, ledger = aws
    stubbed.owned()
    stubbed.offerings(OFFER)
    stubbed.purchase_error("ServiceUnavailable", 503)
    run(aws)
    # Within the settle time nothing new is tried, and no offering is even looked up.
    stubbed.owned()
    stubbed.by_intent(INTENT_1)
    report, _ = run(aws, later(NOW, 3))
    assert report.in_flight == (INTENT_1,)
    # After it: no trace means not bought; the fee is released and the occurrence bought once.
    stubbed.owned()
    stubbed.by_intent(INTENT_1)
    stubbed.offerings(OFFER)
    stubbed.purchase(OFFER, INTENT_2, WINDOW.name)
    report, _ = run(aws, NOW + controller.SETTLE_AFTER + timedelta(minutes=1))
    assert report.failed[0][0] == INTENT_1 and "not bought" in report.failed[0][1]
    assert [i.id for i in report.bought] == [INTENT_2]
    assert len(stubbed.purchase_attempts) == 2
    assert_invariants(aws, successful_purchases=1)


def test_crash_between_purchase_and_record_is_recovered_from_the_tag(aws, monkeypatch):
    stubbed, ledger = aws
    stubbed.owned()
    stubbed.offerings(OFFER)
    stubbed.purchase(OFFER, INTENT_1, WINDOW.name)

    def crash(*args, **kwargs):
        raise SystemExit("Lambda timed out")

    with monkeypatch.context() as patch:
        patch.setattr(ledger, "settle", crash)
        with pytest.raises(SystemExit):
            run(aws)
    assert ledger.intent(INTENT_1).status == "purchasing"  # recorded before the call
    stubbed.owned(capacity_reservation(OFFER, intent_id=INTENT_1, window=WINDOW.name))
    report, _ = run(aws, later(NOW, 15))
    assert [i.id for i in report.bought] == [INTENT_1]
    assert len(stubbed.purchase_attempts) == 1
    assert_invariants(aws, successful_purchases=1)


def test_two_runs_at_once_cannot_both_claim_the_occurrence(aws):
    stubbed, ledger = aws
    plan = controller.plan(windows=[WINDOW], reservations=[], offerings=[OFFER], spent={}, now=NOW)
    purchase = plan.purchases[0]
    # Run A reads the slot; run B (its own client) claims in between; A's write must then fail.
    run_b = Ledger(client=boto3.client("dynamodb", region_name=REGION), table_name=TABLE)
    real_get = ledger._db.get_item
    interleaved = []

    def get_then_let_b_in(**kwargs):
        item = real_get(**kwargs)
        if kwargs["Key"]["pk"]["S"].startswith("slot#") and not interleaved:
            interleaved.append(run_b.claim(purchase, WINDOW, status="purchasing", now=NOW))
        return item

    ledger._db.get_item = get_then_let_b_in
    with pytest.raises(ClaimRefused, match="another run claimed it first"):
        ledger.claim(purchase, WINDOW, status="purchasing", now=NOW)
    assert interleaved[0].id == INTENT_1
    assert ledger.spent(WINDOW, NOW) == OFFER.upfront_fee  # reserved once, not twice


def test_concurrent_claims_for_different_occurrences_cannot_overspend(aws):
    _, ledger = aws
    weekly = window(mode="auto", budget=Decimal("5000"), repeat_every_days=7, buy_ahead_days=20)
    offers = [block("cbo-10", at(10), 1, per_hour="29"), block("cbo-17", at(17), 1, per_hour="29")]
    # Both runs planned with nothing spent; each plan alone fits the budget.
    purchases = [
        p
        for offer in offers
        for p in controller.plan(windows=[weekly], reservations=[], offerings=[offer], spent={}, now=NOW).purchases
    ]
    assert len(purchases) == 2
    ledger.claim(purchases[0], weekly, status="purchasing", now=NOW)
    with pytest.raises(ClaimRefused, match="budget"):
        ledger.claim(purchases[1], weekly, status="purchasing", now=NOW)
    assert ledger.spent(weekly, NOW) == Decimal("2784")


def test_payment_failed_block_is_refunded_and_bought_again_once(aws):
    stubbed, ledger = aws
    stubbed.owned()
    stubbed.offerings(OFFER)
    stubbed.purchase(OFFER, INTENT_1, WINDOW.name)
    run(aws)
    second = block("cbo-2222222222222222", at(10), 1, per_hour="29")
    stubbed.owned(capacity_reservation(OFFER, intent_id=INTENT_1, window=WINDOW.name, state="payment-failed"))
    stubbed.offerings(second)
    stubbed.purchase(second, INTENT_2, WINDOW.name, reservation_id="cr-0fedcba9876543210")
    report, notes = run(aws, later(NOW, 30))
    assert (INTENT_1, "payment-failed") in report.failed
    assert (
        "Capacity Block payment failed",
        {"intent": INTENT_1, "reservation": "cr-0123456789abcdef0", "window": WINDOW.name},
    ) in notes
    assert [i.reservation_id for i in report.bought] == ["cr-0fedcba9876543210"]
    assert ledger.intent(INTENT_1).status == "failed"
    assert_invariants(aws, successful_purchases=1)
    # A later run seeing the same payment-failed block does not refund twice.
    stubbed.owned(
        capacity_reservation(OFFER, intent_id=INTENT_1, window=WINDOW.name, state="payment-failed"),
        capacity_reservation(second, intent_id=INTENT_2, window=WINDOW.name, reservation_id="cr-0fedcba9876543210"),
    )
    run(aws, later(NOW, 60))
    assert_invariants(aws, successful_purchases=1)


def test_vanished_offering_fails_cleanly_and_the_window_is_reported(aws):
    stubbed, ledger = aws
    stubbed.owned()
    stubbed.offerings(OFFER)
    stubbed.purchase_error("InvalidCapacityBlockOfferingId.NotFound", 400)
    report, notes = run(aws)
    assert report.bought == () and report.uncovered[0][0] == OCCURRENCE
    assert "InvalidCapacityBlockOfferingId.NotFound" in report.uncovered[0][1]
    assert any(subject == "Capacity window not covered" for subject, _ in notes)
    assert_invariants(aws, successful_purchases=0)


def test_windows_the_budget_cannot_cover_are_reported_not_bought(aws):
    stubbed, _ = aws
    poor = window(mode="auto", budget=Decimal("1000"))
    stubbed.owned()
    stubbed.offerings(OFFER)
    report, _ = run(aws, windows=(poor,))
    assert stubbed.purchase_attempts == []
    assert report.uncovered == ((OCCURRENCE, "budget: cheapest cover costs 2784, 1000 left this month"),)
    stubbed.done()


def test_dry_run_reports_but_never_buys_or_records(aws):
    stubbed, ledger = aws
    stubbed.owned()
    stubbed.offerings(OFFER)
    report, _ = run(aws, windows=(window(mode="dry_run", budget=Decimal("5000")),))
    assert [p.offering.id for p in report.plan.purchases] == [OFFER.id]
    assert stubbed.purchase_attempts == [] and ledger.open_intents() == []
    stubbed.done()


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_):
        yield self._body


@pytest.mark.parametrize("config, sends", [(None, 3), ("purchase", 1)])
def test_purchase_client_never_resends_after_a_server_error(config, sends):
    """botocore's standard retries would resend a purchase after a 5xx: the purchase client must not."""
    chosen = PURCHASE_CLIENT_CONFIG if config else Config(retries={"mode": "standard"})
    ec2 = boto3.client("ec2", region_name="us-east-1", config=chosen, aws_access_key_id="x", aws_secret_access_key="x")
    sent = []

    def answer_500(request, **_):
        sent.append(request)
        body = b"<Response><Errors><Error><Code>InternalError</Code><Message>x</Message></Error></Errors></Response>"
        return AWSResponse(request.url, 500, {}, _Raw(body))

    ec2.meta.events.register("before-send.ec2.PurchaseCapacityBlock", answer_500)
    with pytest.raises(ClientError, match="InternalError"):
        ec2.purchase_capacity_block(CapacityBlockOfferingId="cbo-1", InstancePlatform="Linux/UNIX")
    assert len(sent) == sends


@pytest.mark.parametrize(
    "error, result",
    [
        (ConnectionClosedError(endpoint_url="https://ec2"), "uncertain"),  # an HTTPClientError, not a ConnectionError
        (ReadTimeoutError(endpoint_url="https://ec2"), "uncertain"),
        (HTTPClientError(error="reset"), "uncertain"),
        (SSLError(endpoint_url="https://ec2", error="bad record mac"), "uncertain"),
        (RuntimeError("anything unforeseen"), "uncertain"),
        (EndpointConnectionError(endpoint_url="https://ec2"), "refused"),  # the connection never opened
        (ConnectTimeoutError(endpoint_url="https://ec2"), "refused"),
        (ParamValidationError(report="bad"), "refused"),
    ],
)
def test_every_error_after_the_request_may_have_left_is_uncertain(error, result):
    assert classify(error).result == result
