"""EC2 Capacity Blocks for ML: what a window feeding EC2 instances (a Batch compute environment,
an EKS node group) buys, as the runtime searches, buys and describes it.

Source: EC2 User Guide, "Capacity Blocks for ML" (durations, lead time, end time, states), and
the ``CapacityBlockOffering`` shape of the EC2 API (``CapacityBlockDurationHours`` plus
``CapacityBlockDurationMinutes``).

A search asks for a duration in whole days (``CapacityDurationHours``: 1-14 days, then 7-day
steps up to 182 days). What comes back does not last exactly that long: every block ends at
11:30 UTC, so blocks starting at other times of day last a little less or a little more than
asked (AWS: "one block will have a duration that is slightly less than your desired duration,
while the other will have a duration slightly greater"), down to hours and minutes (an instant
start at 04:55 that ends at 11:30 the same day lasts 6 h 35 min). An offering is sound when it
ends at 11:30 UTC and lasts less than a day more or less than a duration one may ask for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from ...contract import TAG_INTENT, TAG_MANAGED_BY
from .. import market
from ..offers import Offering, Placement, Reservation, all_items, fee, reservation_from_api, tags_of, when, whole
from .base import CapacityKind, ExtensionListing

NAME = "capacity_block"
BLOCK, EXTENSION = "block", "extension"  # Offering.kind of a new block and of an extension of one
DAY = timedelta(days=1)

MAX_INSTANCES_ACROSS_BLOCKS = 256  # [aws: ec2-cb.instance-limits], KIND.instance_limit


# Extensions [aws: ec2-cb.extension-rules]: requested "up to a minimum of 1 hour or a maximum of 56 days before it
# expires" (the latter is the 8 weeks an offering may start ahead, block_offering_problem), in the durations of a
# block, "up to 182 days (26 weeks) total".
EXTENSION_LATEST = timedelta(hours=1)
MAX_BLOCK_TOTAL = timedelta(days=182)


def ends_at_block_time(moment: datetime) -> bool:
    moment = market.utc(moment)
    return (moment.hour, moment.minute, moment.second, moment.microsecond) == (11, 30, 0, 0)


def shortest_block_days(gap_start: datetime, gap_end: datetime) -> int | None:
    """Fewest allowed whole days of a block that ends at 11:30 UTC and spans the gap, or None
    when no single block is long enough."""
    end = market.next_block_end(gap_end)
    needed = math.ceil((end - market.utc(gap_start)) / timedelta(days=1))
    return next((days for days in market.ALLOWED_DURATION_DAYS if days >= needed), None)


def block_search_days(gap_start: datetime, gap_end: datetime, now: datetime) -> int | None:
    """The whole days to search for a block covering the gap: the fewest that span it to the next 11:30 UTC
    (``shortest_block_days``), or, for a gap that starts now, the fewest for which an instant block covers it: a
    search answers a block "slightly less" and one "slightly greater" than the days asked, ending at an 11:30 UTC
    [aws: ec2-cb.instant-start], the greater at the first 11:30 after its start plus those days. So a page at 06:30
    until 15:00 is searched for 1 day (a block until 11:30 the next day), not 2 (one a day longer)."""
    if market.utc(gap_start) > market.utc(now) + market.INSTANT_START_LEAD:
        return shortest_block_days(gap_start, gap_end)
    return next(
        (d for d in market.ALLOWED_DURATION_DAYS if market.next_block_end(gap_start + timedelta(days=d)) >= gap_end),
        None,
    )


def searchable_duration(length: timedelta) -> bool:
    """Whether a block of ``length`` can answer a search for an allowed whole-day duration:
    strictly less than a day shorter or longer than one."""
    return length > timedelta(0) and any(
        abs(length - timedelta(days=days)) < timedelta(days=1) for days in market.ALLOWED_DURATION_DAYS
    )


def block_offering_problem(
    *, start: datetime, end: datetime, duration_hours: int, count: int, now: datetime, duration_minutes: int = 0
) -> str | None:
    """Why an EC2 Capacity Block offering breaks the market rules, or None when it is sound.

    Offerings come from the API or from a file a person typed; an offering that breaks the
    rules is a sign of a bad input, and buying it would not give what the planner assumed."""
    if not ends_at_block_time(end):
        return f"ends {market.utc(end):%H:%M} UTC, but blocks end at 11:30 UTC"
    if not 0 <= duration_minutes < 60 or not searchable_duration(
        timedelta(hours=duration_hours, minutes=duration_minutes)
    ):
        return (
            f"duration {duration_hours} h {duration_minutes} min is not within a day of 1-14 days or of 7-day steps "
            "up to 182 days"
        )
    if market.utc(start) - market.utc(now) > market.MAX_START_AHEAD:
        return f"starts {market.utc(start):%Y-%m-%d}, more than 8 weeks ahead"
    if not 1 <= count <= market.MAX_INSTANCES_PER_BLOCK:
        return f"{count} instances; a block holds 1-{market.MAX_INSTANCES_PER_BLOCK}"
    if market.utc(end) <= market.utc(start):
        return "ends before it starts"
    return None


def extension_offering_problem(
    *, block_start: datetime, block_end: datetime, end: datetime, now: datetime
) -> str | None:
    """Why a Capacity Block extension cannot be bought now, or None (the block's own rules aside)."""
    if market.utc(block_end) - market.utc(now) < EXTENSION_LATEST:
        return f"the block ends {market.utc(block_end):%Y-%m-%d %H:%M} UTC: extensions are sold until 1 hour before its end"
    if market.utc(end) - market.utc(block_start) > MAX_BLOCK_TOTAL:
        return (
            f"the block would last {(market.utc(end) - market.utc(block_start)).days} days with it: at most 182 in all"
        )
    return None


def _offering_problem(offering: Offering, extended: Reservation | None, now: datetime) -> str | None:
    problem = block_offering_problem(
        start=offering.start,
        end=offering.end,
        duration_hours=offering.duration_hours,
        count=offering.count,
        now=now,
        duration_minutes=offering.duration_minutes,
    )
    if problem is None and offering.segments > 1:  # [aws: ec2-cb.offering-segments]
        problem = (
            f"one purchase would create {offering.segments} reservations (segments, each with a zone, type and "
            "schedule of its own): a consumer launches into one reservation at a time, so the others would be "
            "paid and idle"
        )
    if problem is None and extended is not None:
        problem = extension_offering_problem(
            block_start=extended.start, block_end=extended.end, end=offering.end, now=now
        )
    return problem


# --- reading what EC2 answers (boto3 or AWS CLI JSON) ---------------------------------------------


def block_offering(o: dict[str, Any]) -> Offering:
    """An offering as DescribeCapacityBlockOfferings returns it (boto3 or AWS CLI JSON)."""
    return Offering(
        id=o["CapacityBlockOfferingId"],
        kind=BLOCK,
        instance_type=o["InstanceType"],
        count=whole(o["InstanceCount"], "InstanceCount"),
        availability_zone=o["AvailabilityZone"],
        start=when(o["StartDate"]),
        end=when(o["EndDate"]),
        duration_hours=whole(o["CapacityBlockDurationHours"], "CapacityBlockDurationHours"),
        upfront_fee=fee(o["UpfrontFee"]),
        currency=o["CurrencyCode"],
        duration_minutes=whole(o.get("CapacityBlockDurationMinutes", 0), "CapacityBlockDurationMinutes"),
        # One reservation per segment, each "with its own Availability Zone, instance type, schedule, and pricing"
        # [aws: ec2-cb.offering-segments]: the planner refuses an offering of more than one.
        segments=max(1, len(o.get("CapacityBlockOfferingSegments") or [])),
    )


def extension_offering(o: dict[str, Any], reservation_id: str) -> Offering:
    """An offering as DescribeCapacityBlockExtensionOfferings returns it (boto3 or AWS CLI JSON); the
    response does not name the block it extends, the caller does."""
    return Offering(
        id=o["CapacityBlockExtensionOfferingId"],
        kind=EXTENSION,
        instance_type=o["InstanceType"],
        count=whole(o["InstanceCount"], "InstanceCount"),
        availability_zone=o["AvailabilityZone"],
        start=when(o["CapacityBlockExtensionStartDate"]),
        end=when(o["CapacityBlockExtensionEndDate"]),
        duration_hours=whole(o["CapacityBlockExtensionDurationHours"], "CapacityBlockExtensionDurationHours"),
        upfront_fee=fee(o["UpfrontFee"]),
        currency=o["CurrencyCode"],
        reservation_id=reservation_id,
    )


# --- the AWS side, through the CapacityMarket's clients -------------------------------------------


def _owned(capacity: Any, windows: Iterable[Any]) -> list[tuple[Reservation, str | None]]:
    """Every block this controller bought (tagged with its id), with its intent id."""
    return [
        (reservation_from_api(item), tags_of(item.get("Tags", [])).get(TAG_INTENT))
        for item in all_items(
            capacity.ec2,
            "describe_capacity_reservations",
            "CapacityReservations",
            Filters=[{"Name": f"tag:{TAG_MANAGED_BY}", "Values": [capacity.controller_id]}],
        )
    ]


def _blocks(capacity: Any, window: Any, missing: int, gap_start: datetime, gap_end: datetime, days: int, now: datetime):
    return [
        replace(block_offering(o), requested_hours=days * 24)
        for o in all_items(
            capacity.ec2,
            "describe_capacity_block_offerings",
            "CapacityBlockOfferings",
            InstanceType=window.instance_type,
            InstanceCount=missing,
            CapacityDurationHours=days * 24,
            StartDateRange=max(now, gap_end - timedelta(days=days)),
            EndDateRange=gap_start + timedelta(days=days),
        )
    ]


def _search(capacity: Any, window: Any, missing: int, gap_start: datetime, gap_end: datetime, now: datetime):
    days = block_search_days(gap_start, gap_end, now)
    return [] if days is None else _blocks(capacity, window, missing, gap_start, gap_end, days, now)


def _extension_offers(capacity: Any, duration_hours: int, reservation_id: str) -> list[Offering]:
    offered = all_items(
        capacity.ec2,
        "describe_capacity_block_extension_offerings",
        "CapacityBlockExtensionOfferings",
        CapacityBlockExtensionDurationHours=duration_hours,
        CapacityReservationId=reservation_id,
    )
    return [extension_offering(o, reservation_id) for o in offered]


def _extensions(capacity: Any, reservation: Reservation, gap_end: datetime) -> list[Offering]:
    days = shortest_block_days(reservation.end, gap_end)
    return [] if days is None else _extension_offers(capacity, days * 24, reservation.id)


def _offered_again(capacity: Any, offering: Offering, window: Any) -> list[Offering]:
    if offering.extends:
        return _extension_offers(capacity, offering.duration_hours, offering.reservation_id)
    days = (offering.requested_hours or offering.duration_hours) // 24  # searched again as it was found
    return _blocks(capacity, window, offering.count, offering.start, offering.end, days, offering.start)


def _outcome_of(capacity: Any, intent_id: str, offering: Offering, window: str) -> Reservation | None:
    if not offering.extends:
        # A filtered EC2 listing may answer with empty pages and a NextToken: read them all.
        items = all_items(
            capacity.ec2,
            "describe_capacity_reservations",
            "CapacityReservations",
            Filters=[{"Name": f"tag:{TAG_INTENT}", "Values": [intent_id]}],
        )
        return reservation_from_api(items[0]) if items else None
    history = all_items(
        capacity.ec2,
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


def _purchase(capacity: Any, offering: Offering, intent_id: str, tags: Mapping[str, str]) -> str:
    if offering.extends:
        # The extension keeps the reservation id, which already carries our tags.
        capacity.purchase_ec2.purchase_capacity_block_extension(
            CapacityBlockExtensionOfferingId=offering.id, CapacityReservationId=offering.reservation_id
        )
        return offering.reservation_id
    response = capacity.purchase_ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offering.id,
        InstancePlatform="Linux/UNIX",
        TagSpecifications=[
            {"ResourceType": "capacity-reservation", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    return response["CapacityReservation"]["CapacityReservationId"]


# --- what the grid makes a window pay (grid.py) -----------------------------------------------------


def _hours(delta: timedelta) -> Decimal:
    return Decimal(delta.total_seconds()) / 3600


def placements(window: Any) -> tuple[Placement, ...]:
    """Blocks bought ahead are searched in whole days and end at 11:30 UTC, so they start at 11:30 UTC too; only a
    block found by a search for capacity now starts at another time, minutes after the search, and ends at an 11:30
    UTC [aws: ec2-cb.instant-start]. The window's first occurrence as declared, then the placements that waste less."""
    start, length, lead = window.start, timedelta(hours=window.duration_hours), market.TERMINATION_LEAD
    # The last 11:30 UTC at or before the start, to the first at least 30 minutes after the end, in whole allowed days.
    block_start = market.next_block_end(start - DAY + timedelta(microseconds=1))
    days = math.ceil((market.next_block_end(start + length + lead) - block_start) / DAY)
    days = next((d for d in market.ALLOWED_DURATION_DAYS if d >= days), days)
    declared = Placement(
        how=f"as declared ({start:%H:%M} UTC): {days} whole day(s) from 11:30 UTC",
        start=block_start,
        end=block_start + days * DAY,
        used_hours=Decimal(window.duration_hours),
    )
    # The same hours moved to start at 11:30 UTC on the start's day, bought ahead like the declared ones: fewer whole days
    # for a window that crosses 11:30 (06:00 to 14:00 pays two days as declared, one from 11:30).
    moved = market.utc(start).replace(hour=11, minute=30, second=0, microsecond=0)
    moved_days = math.ceil((length + lead) / DAY)
    moved_days = next((d for d in market.ALLOWED_DURATION_DAYS if d >= moved_days), moved_days)
    ahead = Placement(
        how=f"starting at 11:30 UTC: its {window.duration_hours} h from 11:30 UTC, {moved_days} whole day(s) bought ahead",
        start=moved,
        end=moved + moved_days * DAY,
        used_hours=Decimal(window.duration_hours),
    )
    # The same hours ending 30 minutes before an 11:30 UTC, bought when they start: an instant block that ends there.
    ends = market.next_block_end(start + length + lead)
    instant = Placement(
        how=(
            f"ending at 11:30 UTC: its {window.duration_hours} h from {ends - length - lead:%H:%M} UTC, asked for when they "
            "start (`capacity request --start now`, or an alarm: an instant block)"
        ),
        start=ends - length - lead,
        end=ends,
        used_hours=Decimal(window.duration_hours),
        bought_ahead=False,
    )
    return (declared, ahead, instant)


KIND = CapacityKind(
    name=NAME,
    offering_kinds=(BLOCK, EXTENSION),
    offering_problem=_offering_problem,
    # EC2 capacity reservation ids are cr-...; a training plan's is an ARN.
    holds=lambda reservation: reservation.id.startswith("cr-"),
    placements=placements,
    owned=_owned,
    search=_search,
    extensions=_extensions,
    offered_again=_offered_again,
    outcome_of=_outcome_of,
    purchase=_purchase,
    offering_lists={"CapacityBlockOfferings": block_offering},
    extension_listing=ExtensionListing(
        key="CapacityBlockExtensionOfferings",
        id_key="CapacityBlockExtensionOfferingId",
        start=lambda item: when(item["CapacityBlockExtensionStartDate"]),
        offering=extension_offering,
    ),
    # "Each Capacity Block can have up to 64 instances, and you can have up to 256 instances across Capacity Blocks"
    # [aws: ec2-cb.instance-limits]. Read strictly: every block not yet ended counts, whether or not it overlaps.
    instance_limit=(MAX_INSTANCES_ACROSS_BLOCKS, "Capacity Blocks"),
    ec2_capacity_reservation=True,
    operations={
        "ec2": (
            "DescribeCapacityBlockExtensionHistory",
            "DescribeCapacityBlockExtensionOfferings",
            "DescribeCapacityBlockOfferings",
            "DescribeCapacityReservations",
            "PurchaseCapacityBlock",
            "PurchaseCapacityBlockExtension",
        )
    },
)
