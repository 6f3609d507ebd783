"""The AWS side of buying: read offerings and reservations, purchase with the intent tag.

Purchases go through clients with retries switched off (``PURCHASE_CLIENT_CONFIG``): botocore
would otherwise resend a purchase after a 5xx or a timeout, and ``PurchaseCapacityBlock`` has
no idempotency token, so a resend can buy a second block [aws: ec2-cb.purchase-has-no-client-token].
We retry only where the request was certainly refused (throttling, validation, a connection that
never opened) and reconcile from tags everywhere else: any other error, whatever its type, may
have come after the request left.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ProxyConnectionError,
)

from ..common.clients import PURCHASE as PURCHASE_CLIENT_CONFIG  # noqa: F401  (the name its callers use)
from ..contract import TAG_INTENT, TAG_MANAGED_BY, TAG_WINDOW
from ..planners import market
from ..planners.capacity import HOUR, Offering, Reservation, Window, coverable, shortfall
from .consumers import launch_zones

# The longest one purchase call can take with that client (connect, then wait for the answer).
PURCHASE_CALL_SECONDS = 40
# Raised before a single byte of the request was sent: nothing can have been bought.
NOT_SENT = (
    ParamValidationError,
    NoCredentialsError,
    EndpointConnectionError,
    ConnectTimeoutError,
    ProxyConnectionError,
)
THROTTLING_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException"})
TRAINING_PLAN_TARGETS = {"hyperpod_instance_group": "hyperpod-cluster", "sagemaker_training_jobs": "training-job"}


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a purchase call tells us. ``uncertain``: it may have gone through."""

    result: Literal["purchased", "refused", "uncertain"]
    reservation_id: str | None = None
    reason: str = ""


def classify(error: Exception) -> Outcome:
    """Throttled or rejected requests and requests never sent were not carried out; 5xx answers
    and every other error (a read timeout, a connection closed mid-answer, anything unforeseen)
    may come after the purchase was made."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400)
        if code in THROTTLING_CODES:
            return Outcome(result="refused", reason=f"throttled ({code}); retried next run")
        if status >= 500 or code in {"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"}:
            return Outcome(result="uncertain", reason=f"server error {code}; reconciling from tags")
        return Outcome(result="refused", reason=f"{code}: {error.response.get('Error', {}).get('Message', '')}".strip())
    if isinstance(error, NOT_SENT):
        return Outcome(result="refused", reason=f"not sent ({type(error).__name__}: {error}); retried next run")
    return Outcome(result="uncertain", reason=f"{type(error).__name__}: {error}; reconciling from tags")


class CapacityMarket:
    """EC2 Capacity Blocks and SageMaker training plans for one controller."""

    def __init__(
        self,
        *,
        ec2: Any,
        sagemaker: Any,
        controller_id: str,
        purchase_ec2: Any = None,
        purchase_sagemaker: Any = None,
        batch: Any = None,
        eks: Any = None,
    ):
        """``ec2``/``sagemaker`` read (retries welcome); ``purchase_*`` buy and must be built with
        ``PURCHASE_CLIENT_CONFIG`` (default: the reading clients, which then must be too); ``batch``
        and ``eks`` read where a launch-template consumer can launch (None: not read, the declared
        zones alone bound the planner)."""
        self.ec2 = ec2
        self.sagemaker = sagemaker
        self.batch = batch
        self.eks = eks
        self.purchase_ec2 = purchase_ec2 or ec2
        self.purchase_sagemaker = purchase_sagemaker or sagemaker
        self.controller_id = controller_id

    # --- reservations ---------------------------------------------------------------------------

    def owned(self, windows: Iterable[Window]) -> list[tuple[Reservation, str | None]]:
        """Every block and training plan this controller bought, with its intent id."""
        found = [
            (reservation_from_api(item), _tags(item.get("Tags", [])).get(TAG_INTENT))
            for item in _all(
                self.ec2,
                "describe_capacity_reservations",
                "CapacityReservations",
                Filters=[{"Name": f"tag:{TAG_MANAGED_BY}", "Values": [self.controller_id]}],
            )
        ]
        plan_windows = [w.name for w in windows if w.market == "training_plan"]
        if plan_windows:
            # Training plans are named after their intent (``<window>-<start>-<seq>``).
            for summary in _all(self.sagemaker, "list_training_plans", "TrainingPlanSummaries"):
                window = next((w for w in plan_windows if _names_intent_of(summary["TrainingPlanName"], w)), None)
                if window:
                    found.append((_training_plan(summary, window), summary["TrainingPlanName"]))
        return found

    def reservation(self, reservation_id: str) -> Reservation | None:
        """The block of this id as EC2 describes it, or None while it is not listed (or not ours)."""
        item = described_reservation(self.ec2, reservation_id)
        return None if item is None else reservation_from_api(item)

    def outcome_of(self, intent_id: str, offering: Offering, window: str) -> Reservation | None:
        """What an earlier purchase attempt produced, looked up by its intent, or None."""
        if offering.kind == "block":
            # A filtered EC2 listing may answer with empty pages and a NextToken: read them all.
            items = _all(
                self.ec2,
                "describe_capacity_reservations",
                "CapacityReservations",
                Filters=[{"Name": f"tag:{TAG_INTENT}", "Values": [intent_id]}],
            )
            return reservation_from_api(items[0]) if items else None
        if offering.kind == "extension":
            history = _all(
                self.ec2,
                "describe_capacity_block_extension_history",
                "CapacityBlockExtensions",
                CapacityReservationIds=[offering.reservation_id],
            )
            match = next((e for e in history if e["CapacityBlockExtensionOfferingId"] == offering.id), None)
            if match is None:
                return None
            state = "payment-failed" if match["CapacityBlockExtensionStatus"] == "payment-failed" else "scheduled"
            return Reservation(
                id=offering.reservation_id,
                window=window,
                instance_type=match["InstanceType"],
                count=match["InstanceCount"],
                availability_zone=match["AvailabilityZone"],
                start=match["CapacityBlockExtensionStartDate"],
                end=match["CapacityBlockExtensionEndDate"],
                state=state,
            )
        if offering.kind == "training_plan_extension":
            history = _all(
                self.sagemaker,
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
        try:
            plan = self.sagemaker.describe_training_plan(TrainingPlanName=intent_id)
        except ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFound":
                return None
            raise
        return _training_plan(plan, window)

    # --- offerings ------------------------------------------------------------------------------

    def for_planning(self, window: Window, held: Iterable[Reservation], now: datetime) -> tuple[Window, list[Offering]]:
        """The window as the planner should see it, and the offerings that could fill the gaps of its
        occurrences in the horizon. With a gap, the window carries the zones its consumer can launch
        in (``consumers.launch_zones``, read only then: a covered window costs no read)."""
        held = [r for r in held if window.serves_with(r.window) and r.state in market.COVERING_STATES]
        found: dict[str, Offering] = {}
        read_zones = False
        for occurrence in window.occurrences(now):
            for gap_start, gap_end, missing in shortfall(
                coverable(occurrence, now), window.instance_count, [(r.start, r.end, r.count) for r in held]
            ):
                if not read_zones:
                    window = replace(
                        window, launch_zones=launch_zones(window, ec2=self.ec2, batch=self.batch, eks=self.eks)
                    )
                    read_zones = True
                if window.market == "training_plan":
                    found.update(
                        (o.id, o) for o in self._training_plan_offerings(window, missing, gap_start, gap_end, now)
                    )
                elif (days := market.block_search_days(gap_start, gap_end, now)) is not None:
                    found.update(
                        (o.id, o) for o in self._block_offerings(window, missing, gap_start, gap_end, days, now)
                    )
                if window.prefer_extension:
                    for reservation in held:
                        if reservation.state in market.EXTENDABLE_STATES and gap_start <= reservation.end < gap_end:
                            found.update(
                                (o.id, o) for o in self._extension_offerings(reservation, gap_end, window.market)
                            )
        return window, sorted(found.values(), key=lambda o: o.id)

    def _block_offerings(self, window, missing, gap_start, gap_end, days, now):
        return [
            replace(block_offering(o), requested_hours=days * 24)
            for o in _all(
                self.ec2,
                "describe_capacity_block_offerings",
                "CapacityBlockOfferings",
                InstanceType=window.instance_type,
                InstanceCount=missing,
                CapacityDurationHours=days * 24,
                StartDateRange=max(now, gap_end - timedelta(days=days)),
                EndDateRange=gap_start + timedelta(days=days),
            )
        ]

    def _extension_offerings(self, reservation, gap_end, kind="capacity_block"):
        if kind == "training_plan":  # in hours, as plans are searched [aws: sm-plan.search-in-hours]
            search = market.training_plan_search(reservation.end, gap_end, reservation.count)
            return [] if search is None else self._training_plan_extensions(search[0], reservation)
        days = market.shortest_block_days(reservation.end, gap_end)
        return [] if days is None else self._extensions(days * 24, reservation.id)

    def _training_plan_extensions(self, duration_hours, plan: Reservation):
        """Extension offerings of a plan (SearchTrainingPlanOfferings with its TrainingPlanArn):
        the plan keeps its ARN, its end moves."""
        response = self.sagemaker.search_training_plan_offerings(TrainingPlanArn=plan.id, DurationHours=duration_hours)
        return [
            Offering(
                id=o["TrainingPlanExtensionOfferingId"],
                kind="training_plan_extension",
                instance_type=plan.instance_type,
                count=plan.count,
                availability_zone=o.get("AvailabilityZone", plan.availability_zone),
                start=_when(o["StartDate"]),
                end=_when(o["EndDate"]),
                duration_hours=_whole(o["DurationHours"], "DurationHours"),
                upfront_fee=_fee(o["UpfrontFee"]),
                currency=o.get("CurrencyCode", "USD"),
                reservation_id=plan.id,
                requested_hours=duration_hours,
            )
            for o in response.get("TrainingPlanExtensionOfferings") or []
        ]

    def _extensions(self, duration_hours, reservation_id):
        offered = _all(
            self.ec2,
            "describe_capacity_block_extension_offerings",
            "CapacityBlockExtensionOfferings",
            CapacityBlockExtensionDurationHours=duration_hours,
            CapacityReservationId=reservation_id,
        )
        return [extension_offering(o, reservation_id) for o in offered]

    def _training_plan_offerings(self, window, missing, gap_start, gap_end, now):
        """Plans of the gap's whole hours [aws: sm-plan.search-in-hours] (SageMaker may answer a little longer: the
        guide's 15-hour search found 15 h 51 min), starting within a day before the gap and ending within a day after
        it, of the fewest instances a plan offers [aws: sm-plan.instance-counts]."""
        search = market.training_plan_search(max(gap_start, now), gap_end, missing)
        if search is None:
            return []
        hours, count = search
        response = self.sagemaker.search_training_plan_offerings(
            InstanceType=window.instance_type,
            InstanceCount=count,
            StartTimeAfter=max(now, gap_start - timedelta(days=1)),
            EndTimeBefore=gap_end + timedelta(days=1),
            DurationHours=hours,
            TargetResources=[TRAINING_PLAN_TARGETS[window.consumer["kind"]]],
        )
        return [replace(training_plan_offering(o), requested_hours=hours) for o in response["TrainingPlanOfferings"]]

    def still_offered(self, offering: Offering, window: Window) -> Offering | None:
        """The same offering as the market shows it now (its fee may have changed), or None."""
        days = (offering.requested_hours or offering.duration_hours) // 24  # searched again as it was found
        if offering.kind == "block":
            found = self._block_offerings(window, offering.count, offering.start, offering.end, days, offering.start)
        elif offering.kind == "extension":
            found = self._extensions(offering.duration_hours, offering.reservation_id)
        elif offering.kind == "training_plan_extension":
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
            found = self._training_plan_extensions(offering.requested_hours or offering.duration_hours, plan)
        else:  # searched again for the hours it was found with
            hours = timedelta(hours=offering.requested_hours or offering.duration_hours)
            found = self._training_plan_offerings(
                window, offering.count, offering.start, offering.start + hours, offering.start
            )
        return next((o for o in found if o.id == offering.id), None)

    # --- purchases ------------------------------------------------------------------------------

    def purchase(
        self, offering: Offering, *, intent_id: str, window: str, owner: Mapping[str, str] | None = None
    ) -> Outcome:
        """Buy with the tags on the request itself (tag-on-create): the intent, window and
        controller, then ``owner`` (``Window.owner_tags``: team and cost centre)."""
        tags = {TAG_INTENT: intent_id, TAG_WINDOW: window, TAG_MANAGED_BY: self.controller_id, **(owner or {})}
        try:
            if offering.kind == "block":
                response = self.purchase_ec2.purchase_capacity_block(
                    CapacityBlockOfferingId=offering.id,
                    InstancePlatform="Linux/UNIX",
                    TagSpecifications=[
                        {
                            "ResourceType": "capacity-reservation",
                            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                        }
                    ],
                )
                return Outcome(
                    result="purchased", reservation_id=response["CapacityReservation"]["CapacityReservationId"]
                )
            if offering.kind == "training_plan_extension":
                # Like a block extension: the plan keeps its ARN, name and tags.
                self.purchase_sagemaker.extend_training_plan(TrainingPlanExtensionOfferingId=offering.id)
                return Outcome(result="purchased", reservation_id=offering.reservation_id)
            if offering.kind == "extension":
                # The extension keeps the reservation id, which already carries our tags.
                self.purchase_ec2.purchase_capacity_block_extension(
                    CapacityBlockExtensionOfferingId=offering.id, CapacityReservationId=offering.reservation_id
                )
                return Outcome(result="purchased", reservation_id=offering.reservation_id)
            response = self.purchase_sagemaker.create_training_plan(
                TrainingPlanName=intent_id,
                TrainingPlanOfferingId=offering.id,
                Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
            )
            return Outcome(result="purchased", reservation_id=response["TrainingPlanArn"])
        except Exception as error:  # noqa: BLE001 - an unforeseen error after sending must not look like "not bought"
            return classify(error)


def described_reservation(ec2: Any, reservation_id: str) -> dict[str, Any] | None:
    """DescribeCapacityReservations of one id; None when EC2 does not know it (yet: the listing is
    eventually consistent, https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html)."""
    try:
        items = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "InvalidCapacityReservationId.NotFound":
            return None
        raise
    return items[0] if items else None


def _all(client: Any, operation: str, key: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of a paginated listing: the first page alone may be empty or partial."""
    return [item for page in client.get_paginator(operation).paginate(**params) for item in page.get(key) or []]


def block_offering(o: dict[str, Any]) -> Offering:
    """An offering as DescribeCapacityBlockOfferings returns it (boto3 or AWS CLI JSON)."""
    return Offering(
        id=o["CapacityBlockOfferingId"],
        kind="block",
        instance_type=o["InstanceType"],
        count=_whole(o["InstanceCount"], "InstanceCount"),
        availability_zone=o["AvailabilityZone"],
        start=_when(o["StartDate"]),
        end=_when(o["EndDate"]),
        duration_hours=_whole(o["CapacityBlockDurationHours"], "CapacityBlockDurationHours"),
        upfront_fee=_fee(o["UpfrontFee"]),
        currency=o["CurrencyCode"],
        duration_minutes=_whole(o.get("CapacityBlockDurationMinutes", 0), "CapacityBlockDurationMinutes"),
        # One reservation per segment, each "with its own Availability Zone, instance type, schedule, and pricing"
        # [aws: ec2-cb.offering-segments]: the planner refuses an offering of more than one.
        segments=max(1, len(o.get("CapacityBlockOfferingSegments") or [])),
    )


def extension_offering(o: dict[str, Any], reservation_id: str) -> Offering:
    """An offering as DescribeCapacityBlockExtensionOfferings returns it (boto3 or AWS CLI JSON); the
    response does not name the block it extends, the caller does."""
    return Offering(
        id=o["CapacityBlockExtensionOfferingId"],
        kind="extension",
        instance_type=o["InstanceType"],
        count=_whole(o["InstanceCount"], "InstanceCount"),
        availability_zone=o["AvailabilityZone"],
        start=_when(o["CapacityBlockExtensionStartDate"]),
        end=_when(o["CapacityBlockExtensionEndDate"]),
        duration_hours=_whole(o["CapacityBlockExtensionDurationHours"], "CapacityBlockExtensionDurationHours"),
        upfront_fee=_fee(o["UpfrontFee"]),
        currency=o["CurrencyCode"],
        reservation_id=reservation_id,
    )


def training_plan_offering(o: dict[str, Any]) -> Offering:
    """An offering as SearchTrainingPlanOfferings returns it (boto3 or AWS CLI JSON)."""
    capacity = o["ReservedCapacityOfferings"][0]
    start = _when(capacity["StartTime"])
    hours = _whole(o["DurationHours"], "DurationHours")
    minutes = _whole(o.get("DurationMinutes", 0), "DurationMinutes")
    return Offering(
        id=o["TrainingPlanOfferingId"],
        kind="training_plan",
        instance_type=capacity["InstanceType"],
        count=_whole(capacity["InstanceCount"], "InstanceCount"),
        availability_zone=capacity.get("AvailabilityZone", ""),
        start=start,
        end=start + hours * HOUR + minutes * timedelta(minutes=1),
        duration_hours=hours,
        duration_minutes=minutes,
        upfront_fee=_fee(o["UpfrontFee"]),
        currency=o.get("CurrencyCode", "USD"),
    )


def _when(value: datetime | str) -> datetime:
    if not isinstance(value, (datetime, str)):
        raise ValueError(f"time {value!r} is not an ISO 8601 text with a zone (e.g. 2026-12-10T11:30:00Z)")
    return market.utc(value if isinstance(value, datetime) else datetime.fromisoformat(value.replace("Z", "+00:00")))


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} {value!r} is not a whole number")
    return value


def _fee(value: Any) -> Decimal:
    """The API sends fees as text; a number (hand-written JSON) is read as written, not as the
    binary float it became (9123.84, not 9123.840000000000145...)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise ValueError(f"UpfrontFee {value!r} is not an amount")
    return Decimal(str(value))


def _tags(tags: list[dict[str, str]]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags}


def _names_intent_of(name: str, window: str) -> bool:
    rest = name.removeprefix(f"{window}-")
    return rest != name and bool(re.fullmatch(r"\d{12}-\d+", rest))


def _training_plan(plan: dict[str, Any], window: str) -> Reservation:
    capacity = (plan.get("ReservedCapacitySummaries") or [{}])[0]
    return Reservation(
        id=plan["TrainingPlanArn"],
        window=window,
        instance_type=capacity.get("InstanceType", ""),
        count=plan.get("TotalInstanceCount", 0),
        availability_zone=capacity.get("AvailabilityZone", ""),
        start=plan["StartTime"],
        end=plan["EndTime"],
        state=market.TRAINING_PLAN_STATES[plan["Status"]],
    )


def reservation_from_api(item: dict[str, Any]) -> Reservation:
    return Reservation(
        id=item["CapacityReservationId"],
        window=_tags(item.get("Tags", [])).get(TAG_WINDOW, ""),
        instance_type=item["InstanceType"],
        count=_whole(item["TotalInstanceCount"], "TotalInstanceCount"),
        availability_zone=item["AvailabilityZone"],
        start=_when(item["StartDate"]),
        end=_when(item["EndDate"]),
        state=item["State"],
    )
