from decimal import Decimal

import pytest
from botocore.exceptions import ReadTimeoutError
from moto import mock_aws

from gpu_governance_runtime.capacity import controller
from gpu_governance_runtime.capacity.ledger import ClaimRefused

from .builders import NOW, at, block, window
from .stubbed_aws import StubbedAws, add_training_plan_stubs, create_ledger_table, later, training_plan_summary

APPROVAL = window(mode="approval", budget=Decimal("5000"))
OFFER = block("cbo-1111111111111111", at(10), 1, per_hour="29")
INTENT = "launch-load-test-202612101400-1"


@pytest.fixture
def aws():
    with mock_aws():
        yield StubbedAws(), create_ledger_table()


def run(aws_pair, now=NOW, windows=(APPROVAL,)):
    stubbed, ledger = aws_pair
    notes = []
    report = controller.run(
        windows=windows, ledger=ledger, capacity=stubbed.market, notify=lambda s, m: notes.append((s, m)), now=now
    )
    return report, notes


def request_approval(aws_pair):
    stubbed, _ = aws_pair
    stubbed.owned()
    stubbed.offerings(OFFER)
    return run(aws_pair)


def test_approval_request_says_what_when_where_how_much_and_is_sent_once(aws):
    stubbed, ledger = aws
    report, notes = request_approval(aws)
    assert [i.id for i in report.awaiting_approval] == [INTENT]
    assert notes == [
        (
            "Capacity purchase awaiting approval",
            {
                "intent": INTENT,
                "window": "launch-load-test",
                "expected_yield": "0.25",  # the window's 6 hours of the block's 24 (issue 40: buying for yield)
                "what": "4 x p5.48xlarge",
                "where": "us-east-1a",
                "when": "2026-12-10T11:30:00+00:00 to 2026-12-11T11:30:00+00:00",
                "how_much": "2784 USD",
                "kind": "block",
                "approve": f"gpu-governance capacity approve {INTENT}",
            },
        )
    ]
    stubbed.owned()  # the pending request holds the occurrence: no new lookup, no new request
    report, notes = run(aws, later(NOW, 15))
    assert report.awaiting_approval == () and notes == []
    assert stubbed.purchase_attempts == []
    stubbed.done()


def test_approved_purchase_is_made_while_the_offering_is_unchanged(aws):
    stubbed, ledger = aws
    request_approval(aws)
    ledger.approve(INTENT, now=later(NOW, 20))
    with pytest.raises(ClaimRefused, match="is approved, not awaiting_approval"):
        ledger.approve(INTENT, now=later(NOW, 21))
    stubbed.owned()
    stubbed.offerings(OFFER)  # re-checked at purchase time
    stubbed.purchase(OFFER, INTENT, APPROVAL.name)
    report, _ = run(aws, later(NOW, 30))
    assert [i.id for i in report.bought] == [INTENT]
    assert len(stubbed.purchase_attempts) == 1
    assert ledger.spent(APPROVAL, NOW) == OFFER.upfront_fee
    stubbed.done()


@pytest.mark.parametrize(
    "market_now, reason",
    [
        ((), "offering no longer for sale"),
        ((block("cbo-1111111111111111", at(10), 1, per_hour="31"),), "price changed from 2784 to 2976"),
    ],
)
def test_approval_is_not_honoured_when_the_offering_vanished_or_got_dearer(aws, market_now, reason):
    stubbed, ledger = aws
    request_approval(aws)
    ledger.approve(INTENT, now=later(NOW, 20))
    stubbed.owned()
    stubbed.offerings(*market_now)  # the re-check at purchase time
    stubbed.offerings(*market_now)  # the released occurrence is planned again in the same run
    report, notes = run(aws, later(NOW, 30))
    assert report.failed == ((INTENT, reason),)
    assert stubbed.purchase_attempts == []
    if market_now:  # still within the cap: a fresh request at the new price, never a silent purchase
        assert [(i.id, i.offering.upfront_fee) for i in report.awaiting_approval] == [
            ("launch-load-test-202612101400-2", Decimal("2976"))
        ]
        assert ledger.spent(APPROVAL, NOW) == Decimal("2976")
    else:
        assert report.uncovered[0][0] == "launch-load-test@20261210T1400Z"
        assert ledger.spent(APPROVAL, NOW) == 0
    stubbed.done()


def test_unknown_intent_cannot_be_approved(aws):
    _, ledger = aws
    with pytest.raises(ClaimRefused, match="intent nope-1 does not exist"):
        ledger.approve("nope-1", now=NOW)


def test_approval_expires_when_the_offering_starts(aws):
    stubbed, ledger = aws
    request_approval(aws)
    stubbed.owned()
    report, _ = run(aws, at(10, 12, 0), windows=())
    assert report.failed == ((INTENT, "approval expired"),)
    assert ledger.spent(APPROVAL, NOW) == 0
    stubbed.done()


def test_training_plan_named_after_its_intent_is_never_created_twice(aws):
    stubbed, ledger = aws
    plans, offerings = add_training_plan_stubs(stubbed)
    training = window(
        name="finetune-eval",
        market="training_plan",
        instance_type="ml.p5.48xlarge",
        mode="auto",
        consumer={"kind": "sagemaker_training_jobs", "pool": None},
        budget=Decimal("5000"),
    )
    offer = block("tpo-aaaa1111", at(10), 1, per_hour="29", instance_type="ml.p5.48xlarge", kind="training_plan")
    intent = "finetune-eval-202612101400-1"
    stubbed.owned()
    plans()
    offerings(offer)
    stubbed.sm_stub.add_response(
        "create_training_plan",
        {"TrainingPlanArn": "arn:aws:sagemaker:us-east-1:111122223333:training-plan/x"},
        {
            "TrainingPlanName": intent,
            "TrainingPlanOfferingId": offer.id,
            "Tags": [
                {"Key": "gpu-governance:intent", "Value": intent},
                {"Key": "gpu-governance:window", "Value": "finetune-eval"},
                {"Key": "gpu-governance:managed-by", "Value": "acme-ml-capacity"},
            ],
        },
    )

    def timeout(**_):
        stubbed.sagemaker.meta.events.unregister("after-call.sagemaker.CreateTrainingPlan", timeout)
        raise ReadTimeoutError(endpoint_url="https://api.sagemaker.us-east-1.amazonaws.com")

    stubbed.sagemaker.meta.events.register("after-call.sagemaker.CreateTrainingPlan", timeout)
    report, _ = run(aws, windows=(training,))
    assert report.in_flight == (intent,)
    stubbed.owned()
    plans(training_plan_summary(offer, intent))
    report, _ = run(aws, later(NOW, 5), windows=(training,))
    assert [i.id for i in report.bought] == [intent]
    assert report.plan.covered and len(stubbed.purchase_attempts) == 1
    assert ledger.spent(training, NOW) == offer.upfront_fee
    stubbed.done()
