"""Training plans are extended like Capacity Blocks: the extension offering of the plan the window
holds (SearchTrainingPlanOfferings with its TrainingPlanArn) is bought with ExtendTrainingPlan,
and an answer lost after the call is settled from DescribeTrainingPlanExtensionHistory."""

from __future__ import annotations

from decimal import Decimal

import pytest
from botocore.exceptions import ReadTimeoutError
from moto import mock_aws

from gpu_governance_runtime.capacity import controller

from .builders import NOW, at, block, window
from .stubbed_aws import StubbedAws, add_training_plan_stubs, create_ledger_table, later, training_plan_summary

HELD_NAME = "finetune-eval-202612021200-7"  # bought before this ledger's records
PLAN_ARN = f"arn:aws:sagemaker:us-east-1:111122223333:training-plan/{HELD_NAME}"
# 2 Dec 12:00 to 5 Dec 12:00; the plan held ends 4 Dec 11:30.
TRAINING = window(
    name="finetune-eval",
    market="training_plan",
    instance_type="ml.p5.48xlarge",
    mode="auto",
    prefer_extension=True,
    start=at(2, 12, 0),
    duration_hours=72,
    consumer={"kind": "sagemaker_training_jobs", "pool": None},
    budget=Decimal("50000"),
)
HELD = block("tpo-held", at(2), 2, instance_type="ml.p5.48xlarge", kind="training_plan")
FRESH = block(
    "tpo-fresh", at(4), 2, per_hour="20", instance_type="ml.p5.48xlarge", kind="training_plan"
)  # cheaper, but not an extension
EXTENSION = {
    "TrainingPlanExtensionOfferingId": "tpeo-0001",
    "AvailabilityZone": "us-east-1a",
    "StartDate": at(4),
    "EndDate": at(6),
    "DurationHours": 48,
    "UpfrontFee": "7000.00",
    "CurrencyCode": "USD",
}
INTENT = "finetune-eval-202612021200-1"


@pytest.fixture
def aws():
    with mock_aws():
        yield StubbedAws(), create_ledger_table()


def market_with_extension(stubbed):
    plans, offerings = add_training_plan_stubs(stubbed)
    stubbed.owned()
    plans(training_plan_summary(HELD, HELD_NAME, status="Active"))
    offerings(FRESH)
    stubbed.sm_stub.add_response(
        "search_training_plan_offerings",
        {"TrainingPlanOfferings": [], "TrainingPlanExtensionOfferings": [EXTENSION]},
        # The gap's hours, 4 Dec 11:30 to 5 Dec 12:00 (25), not two whole days [aws: sm-plan.search-in-hours].
        {"TrainingPlanArn": PLAN_ARN, "DurationHours": 25},
    )
    return plans


def run(aws_pair, now):
    stubbed, ledger = aws_pair
    return controller.run(windows=[TRAINING], ledger=ledger, capacity=stubbed.market, notify=lambda *_: None, now=now)


def test_the_held_plan_is_extended_before_a_new_one_is_bought(aws):
    stubbed, ledger = aws
    market_with_extension(stubbed)
    stubbed.sm_stub.add_response(
        "extend_training_plan", {"TrainingPlanExtensions": []}, {"TrainingPlanExtensionOfferingId": "tpeo-0001"}
    )
    report = run(aws, NOW)
    (bought,) = report.bought
    assert (bought.id, bought.offering.kind, bought.reservation_id) == (INTENT, "training_plan_extension", PLAN_ARN)
    assert ledger.spent(TRAINING, NOW) == Decimal("7000.00")
    stubbed.done()


def test_an_extension_whose_answer_was_lost_is_settled_from_the_history_not_bought_again(aws):
    stubbed, ledger = aws
    market_with_extension(stubbed)
    stubbed.sm_stub.add_response(
        "extend_training_plan", {"TrainingPlanExtensions": []}, {"TrainingPlanExtensionOfferingId": "tpeo-0001"}
    )

    def timeout(**_):
        stubbed.sagemaker.meta.events.unregister("after-call.sagemaker.ExtendTrainingPlan", timeout)
        raise ReadTimeoutError(endpoint_url="https://api.sagemaker.us-east-1.amazonaws.com")

    stubbed.sagemaker.meta.events.register("after-call.sagemaker.ExtendTrainingPlan", timeout)
    assert run(aws, NOW).in_flight == (INTENT,)
    plans, _ = add_training_plan_stubs(stubbed)
    stubbed.owned()
    plans(training_plan_summary(HELD, HELD_NAME, status="Active"))  # the listing still shows the old end
    stubbed.sm_stub.add_response(
        "describe_training_plan_extension_history",
        {
            "TrainingPlanExtensions": [
                {
                    "TrainingPlanExtensionOfferingId": "tpeo-0001",
                    "StartDate": at(4),
                    "EndDate": at(6),
                    "Status": "Scheduled",
                    "PaymentStatus": "Paid",
                    "DurationHours": 48,
                    "UpfrontFee": "7000.00",
                }
            ]
        },
        {"TrainingPlanArn": PLAN_ARN},
    )
    report = run(aws, later(NOW, 5))
    assert [i.id for i in report.bought] == [INTENT] and len(stubbed.purchase_attempts) == 1
    assert report.plan.covered  # the pending extension counts as held: nothing else is searched or bought
    assert ledger.spent(TRAINING, NOW) == Decimal("7000.00")
    stubbed.done()
