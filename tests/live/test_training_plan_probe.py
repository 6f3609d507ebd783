"""The training-plan search probe, offline with botocore's Stubber: the search it sends is the
planner's for a gap of 15 hours, its verdicts, and that it only reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from botocore.stub import ANY

from tests.live import framework
from tests.live.framework import FAIL, INCONCLUSIVE, PASS
from tests.live.probes import training_plans

ARGS = dict(plan_instance_type="ml.p5.48xlarge")


def run(context):
    (probe,) = training_plans.PROBES
    return framework.run_one(probe, context(**ARGS))


def _offering(hours, minutes):
    start = datetime.now(UTC) + timedelta(days=1)
    return {
        "TrainingPlanOfferingId": f"tpo-{hours}-{minutes}",
        "TargetResources": ["training-job"],
        "DurationHours": hours,
        "DurationMinutes": minutes,
        "UpfrontFee": "700.00",
        "CurrencyCode": "USD",
        "ReservedCapacityOfferings": [
            {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1, "AvailabilityZone": "us-east-1a", "StartTime": start}
        ],
    }


def _searched(stubs, offerings):
    stubs("sagemaker").add_response(
        "search_training_plan_offerings",
        {"TrainingPlanOfferings": offerings},
        {
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": 1,
            "StartTimeAfter": ANY,
            "EndTimeBefore": ANY,
            "DurationHours": training_plans.GAP_HOURS,
            "TargetResources": ["training-job"],
        },
    )


def test_a_search_in_hours_accepted_passes_with_the_durations_offered(stubs, context):
    _searched(stubs, [_offering(15, 51), _offering(24, 0)])
    verdict = run(context).verdict
    assert verdict.outcome == PASS and "2 offerings of 15 h 51 min, 24 h 0 min" in verdict.detail
    assert "whole days only" not in verdict.detail


def test_offerings_of_whole_days_only_still_pass_and_say_so(stubs, context):
    _searched(stubs, [_offering(24, 0)])
    assert "whole days only" in run(context).verdict.detail
    _searched(stubs, [])
    assert run(context).verdict.outcome == PASS


def test_a_search_in_hours_refused_fails_and_another_error_is_inconclusive(stubs, context):
    sagemaker = stubs("sagemaker")
    sagemaker.add_client_error(
        "search_training_plan_offerings", "ValidationException", "DurationHours must be a multiple of 24"
    )
    verdict = run(context).verdict
    assert verdict.outcome == FAIL and "NOT COVERED" in verdict.detail
    sagemaker.add_client_error("search_training_plan_offerings", "ThrottlingException", "Rate exceeded")
    assert run(context).verdict.outcome == INCONCLUSIVE
    assert list(stubs.clients) == [("sagemaker", None)]  # it only searched
