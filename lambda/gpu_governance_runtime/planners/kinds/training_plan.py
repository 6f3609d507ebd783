"""SageMaker training plans: what a window feeding SageMaker (a HyperPod instance group, training
jobs) buys, as the runtime searches, buys and describes it.

Plans are searched in hours [aws: sm-plan.search-in-hours] and have no 11:30 rule (SageMaker aligns
them itself); a plan is named after the intent that bought it, and an extension keeps its ARN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from .. import market
from ..offers import HOUR, Offering, Placement, Reservation, all_items, fee, names_intent_of, when, whole
from .base import CapacityKind

NAME = "training_plan"
PLAN, EXTENSION = "training_plan", "training_plan_extension"  # Offering.kind of a new plan and of an extension of one
# What a plan is bought for, by the consumer the window feeds (SearchTrainingPlanOfferings' TargetResources).
TRAINING_PLAN_TARGETS = {"hyperpod_instance_group": "hyperpod-cluster", "sagemaker_training_jobs": "training-job"}

# Training plans [aws: sm-plan.search-in-hours]: searched in hours (DurationHours 1-87,600), of 1, 2, 4, 8, 16, 32 or
# 64 instances [aws: sm-plan.instance-counts].
TRAINING_PLAN_MAX_HOURS = 87_600
TRAINING_PLAN_COUNTS = (1, 2, 4, 8, 16, 32, 64)


# Training plan statuses mapped onto the reservation states (market.COVERING_STATES).
TRAINING_PLAN_STATES = {
    "Pending": "payment-pending",
    "Scheduled": "scheduled",
    "Active": "active",
    "Expired": "expired",
    "Failed": "payment-failed",
}


def training_plan_search(gap_start: datetime, gap_end: datetime, missing: int) -> tuple[int, int] | None:
    """(DurationHours, InstanceCount) of the search for a training plan covering the gap: its whole hours, and the
    fewest instances a plan offers that cover ``missing``; None when no plan can (over 87,600 hours or 64 instances)."""
    hours = max(1, math.ceil((market.utc(gap_end) - market.utc(gap_start)) / timedelta(hours=1)))
    count = next((c for c in TRAINING_PLAN_COUNTS if c >= missing), None)
    return None if hours > TRAINING_PLAN_MAX_HOURS or count is None else (hours, count)


def training_plan_offering_problem(*, start: datetime, end: datetime, now: datetime) -> str | None:
    """Training plans have no 11:30 rule (SageMaker aligns them itself) but share the horizon."""
    if market.utc(start) - market.utc(now) > market.MAX_START_AHEAD:
        return f"starts {market.utc(start):%Y-%m-%d}, more than 8 weeks ahead"
    if market.utc(end) <= market.utc(start):
        return "ends before it starts"
    return None


def _offering_problem(offering: Offering, extended: Reservation | None, now: datetime) -> str | None:
    return training_plan_offering_problem(start=offering.start, end=offering.end, now=now)


# --- reading what SageMaker answers (boto3 or AWS CLI JSON) ---------------------------------------


def training_plan_offering(o: dict[str, Any]) -> Offering:
    """An offering as SearchTrainingPlanOfferings returns it (boto3 or AWS CLI JSON)."""
    capacity = o["ReservedCapacityOfferings"][0]
    start = when(capacity["StartTime"])
    hours = whole(o["DurationHours"], "DurationHours")
    minutes = whole(o.get("DurationMinutes", 0), "DurationMinutes")
    return Offering(
        id=o["TrainingPlanOfferingId"],
        kind=PLAN,
        instance_type=capacity["InstanceType"],
        count=whole(capacity["InstanceCount"], "InstanceCount"),
        availability_zone=capacity.get("AvailabilityZone", ""),
        start=start,
        end=start + hours * HOUR + minutes * timedelta(minutes=1),
        duration_hours=hours,
        duration_minutes=minutes,
        upfront_fee=fee(o["UpfrontFee"]),
        currency=o.get("CurrencyCode", "USD"),
    )


def plan_reservation(plan: dict[str, Any], window: str) -> Reservation:
    """A plan as ListTrainingPlans or DescribeTrainingPlan returns it, bought for ``window``."""
    capacity = (plan.get("ReservedCapacitySummaries") or [{}])[0]
    return Reservation(
        id=plan["TrainingPlanArn"],
        window=window,
        instance_type=capacity.get("InstanceType", ""),
        count=plan.get("TotalInstanceCount", 0),
        availability_zone=capacity.get("AvailabilityZone", ""),
        start=plan["StartTime"],
        end=plan["EndTime"],
        state=TRAINING_PLAN_STATES[plan["Status"]],
    )


# --- the AWS side, through the CapacityMarket's clients -------------------------------------------


def _owned(capacity: Any, windows: Iterable[Any]) -> list[tuple[Reservation, str | None]]:
    """Every plan this controller bought: plans are named after their intent (``<window>-<start>-<seq>``)."""
    plan_windows = [w.name for w in windows if w.market == NAME]
    if not plan_windows:
        return []
    found = []
    for summary in all_items(capacity.sagemaker, "list_training_plans", "TrainingPlanSummaries"):
        window = next((w for w in plan_windows if names_intent_of(summary["TrainingPlanName"], w)), None)
        if window:
            found.append((plan_reservation(summary, window), summary["TrainingPlanName"]))
    return found


def _plans(capacity: Any, window: Any, missing: int, gap_start: datetime, gap_end: datetime, now: datetime):
    """Plans of the gap's whole hours [aws: sm-plan.search-in-hours] (SageMaker may answer a little longer: the
    guide's 15-hour search found 15 h 51 min), starting within a day before the gap and ending within a day after
    it, of the fewest instances a plan offers [aws: sm-plan.instance-counts]."""
    search = training_plan_search(max(gap_start, now), gap_end, missing)
    if search is None:
        return []
    hours, count = search
    response = capacity.sagemaker.search_training_plan_offerings(
        InstanceType=window.instance_type,
        InstanceCount=count,
        StartTimeAfter=max(now, gap_start - timedelta(days=1)),
        EndTimeBefore=gap_end + timedelta(days=1),
        DurationHours=hours,
        TargetResources=[TRAINING_PLAN_TARGETS[window.consumer["kind"]]],
    )
    return [replace(training_plan_offering(o), requested_hours=hours) for o in response["TrainingPlanOfferings"]]


def _plan_extensions(capacity: Any, duration_hours: int, plan: Reservation) -> list[Offering]:
    """Extension offerings of a plan (SearchTrainingPlanOfferings with its TrainingPlanArn):
    the plan keeps its ARN, its end moves."""
    response = capacity.sagemaker.search_training_plan_offerings(TrainingPlanArn=plan.id, DurationHours=duration_hours)
    return [
        Offering(
            id=o["TrainingPlanExtensionOfferingId"],
            kind=EXTENSION,
            instance_type=plan.instance_type,
            count=plan.count,
            availability_zone=o.get("AvailabilityZone", plan.availability_zone),
            start=when(o["StartDate"]),
            end=when(o["EndDate"]),
            duration_hours=whole(o["DurationHours"], "DurationHours"),
            upfront_fee=fee(o["UpfrontFee"]),
            currency=o.get("CurrencyCode", "USD"),
            reservation_id=plan.id,
            requested_hours=duration_hours,
        )
        for o in response.get("TrainingPlanExtensionOfferings") or []
    ]


def _extensions(capacity: Any, reservation: Reservation, gap_end: datetime) -> list[Offering]:
    # in hours, as plans are searched [aws: sm-plan.search-in-hours]
    search = training_plan_search(reservation.end, gap_end, reservation.count)
    return [] if search is None else _plan_extensions(capacity, search[0], reservation)


def _offered_again(capacity: Any, offering: Offering, window: Any) -> list[Offering]:
    """Searched again for the hours it was found with."""
    hours = offering.requested_hours or offering.duration_hours
    if offering.extends:
        plan = Reservation(
            id=offering.reservation_id,
            window=window.name,
            instance_type=offering.instance_type,
            count=offering.count,
            availability_zone=offering.availability_zone,
            start=offering.start,
            end=offering.end,
            state="active",
        )
        return _plan_extensions(capacity, hours, plan)
    end = offering.start + timedelta(hours=hours)
    return _plans(capacity, window, offering.count, offering.start, end, offering.start)


def _outcome_of(capacity: Any, intent_id: str, offering: Offering, window: str) -> Reservation | None:
    if offering.extends:
        history = all_items(
            capacity.sagemaker,
            "describe_training_plan_extension_history",
            "TrainingPlanExtensions",
            TrainingPlanArn=offering.reservation_id,
        )
        match = next((e for e in history if e["TrainingPlanExtensionOfferingId"] == offering.id), None)
        if match is None:
            return None
        failed = "fail" in f"{match.get('Status', '')} {match.get('PaymentStatus', '')}".lower()
        return Reservation(
            id=offering.reservation_id,
            window=window,
            instance_type=offering.instance_type,
            count=offering.count,
            availability_zone=match.get("AvailabilityZone", offering.availability_zone),
            start=match.get("StartDate", offering.start),
            end=match.get("EndDate", offering.end),
            state="payment-failed" if failed else "scheduled",
        )
    from botocore.exceptions import ClientError  # here: the library's model reads this module's rules, not its calls

    try:
        plan = capacity.sagemaker.describe_training_plan(TrainingPlanName=intent_id)
    except ClientError as error:
        if error.response["Error"]["Code"] == "ResourceNotFound":
            return None
        raise
    return plan_reservation(plan, window)


def _purchase(capacity: Any, offering: Offering, intent_id: str, tags: Mapping[str, str]) -> str:
    if offering.extends:
        # Like a block extension: the plan keeps its ARN, name and tags.
        capacity.purchase_sagemaker.extend_training_plan(TrainingPlanExtensionOfferingId=offering.id)
        return offering.reservation_id
    response = capacity.purchase_sagemaker.create_training_plan(
        TrainingPlanName=intent_id,
        TrainingPlanOfferingId=offering.id,
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
    )
    return response["TrainingPlanArn"]


def placements(window: Any) -> tuple[Placement, ...]:
    """Searched for the window's hours, from its start: no other placement; the last 30 minutes run no work
    [aws: hyperpod.training-plan-termination]."""
    start, length = window.start, timedelta(hours=window.duration_hours)
    return (
        Placement(
            how=f"a training plan of {window.duration_hours} h from {start:%H:%M} UTC (its last 30 minutes run no work)",
            start=start,
            end=start + length,
            used_hours=Decimal((length - market.TERMINATION_LEAD).total_seconds()) / 3600,
        ),
    )


KIND = CapacityKind(
    name=NAME,
    offering_kinds=(PLAN, EXTENSION),
    offering_problem=_offering_problem,
    holds=lambda reservation: reservation.id.startswith("arn:") and ":training-plan/" in reservation.id,
    placements=placements,
    owned=_owned,
    search=_plans,
    extensions=_extensions,
    offered_again=_offered_again,
    outcome_of=_outcome_of,
    purchase=_purchase,
    offering_lists={"TrainingPlanOfferings": training_plan_offering},
    operations={
        "sagemaker": (
            "CreateTrainingPlan",
            "DescribeTrainingPlan",
            "DescribeTrainingPlanExtensionHistory",
            "ExtendTrainingPlan",
            "ListTrainingPlans",
            "SearchTrainingPlanOfferings",
        )
    },
)
