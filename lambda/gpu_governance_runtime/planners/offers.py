"""What the capacity market sells and what the controller holds, whatever the kind of capacity
(``kinds``): an offering, a reservation, and the readers of the fields AWS answers with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from ..contract import TAG_WINDOW
from . import market

HOUR = timedelta(hours=1)


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """A reservation of any kind (a Capacity Block, a training plan) this controller bought for a window."""

    id: str
    window: str
    instance_type: str
    count: int
    availability_zone: str
    start: datetime
    end: datetime
    state: str


@dataclass(frozen=True, kw_only=True)
class Offering:
    id: str
    kind: str  # what it buys (a kind's ``offering_kinds``): a new reservation, or an extension of one
    instance_type: str
    count: int
    availability_zone: str
    start: datetime
    end: datetime
    duration_hours: int
    upfront_fee: Decimal
    currency: str = "USD"
    reservation_id: str | None = None  # the reservation an extension extends (None: a new one)
    duration_minutes: int = 0  # on top of duration_hours: blocks end at 11:30 UTC, whenever they start
    requested_hours: int | None = None  # the duration searched for that found it (None: read from a file)
    segments: int = 1  # reservations one purchase creates (CapacityBlockOfferingSegments)

    @property
    def extends(self) -> bool:
        """An extension keeps the reservation's (plan's) id and moves its end; only an extension names one."""
        return self.reservation_id is not None

    @property
    def hours(self) -> Decimal:
        return self.duration_hours + Decimal(self.duration_minutes) / 60

    @property
    def price_per_instance_hour(self) -> Decimal:
        return self.upfront_fee / (self.count * self.hours)

    @property
    def instance_hours(self) -> Decimal:
        return self.count * self.hours


@dataclass(frozen=True, kw_only=True)
class Placement:
    """One way to buy an occurrence of the window: what is paid per instance, and how much of it the window uses."""

    how: str
    start: datetime
    end: datetime
    used_hours: Decimal
    bought_ahead: bool = True  # False: an instant block, searched for when the hours start and maybe not there

    @property
    def paid_hours(self) -> Decimal:
        return Decimal((self.end - self.start).total_seconds()) / 3600

    @property
    def idle_share(self) -> Decimal:
        return 1 - self.used_hours / self.paid_hours


def all_items(client: Any, operation: str, key: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of a paginated listing: the first page alone may be empty or partial."""
    return [item for page in client.get_paginator(operation).paginate(**params) for item in page.get(key) or []]


def when(value: datetime | str) -> datetime:
    """A time as the API (a datetime) or the AWS CLI (ISO 8601 text) gives it, in UTC."""
    if not isinstance(value, (datetime, str)):
        raise ValueError(f"time {value!r} is not an ISO 8601 text with a zone (e.g. 2026-12-10T11:30:00Z)")
    return market.utc(value if isinstance(value, datetime) else datetime.fromisoformat(value.replace("Z", "+00:00")))


def whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} {value!r} is not a whole number")
    return value


def fee(value: Any) -> Decimal:
    """The API sends fees as text; a number (hand-written JSON) is read as written, not as the
    binary float it became (9123.84, not 9123.840000000000145...)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise ValueError(f"UpfrontFee {value!r} is not an amount")
    return Decimal(str(value))


def tags_of(tags: list[dict[str, str]]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags}


def names_intent_of(name: str, window: str) -> bool:
    """Whether ``name`` is an intent id of ``window`` (``<window>-<start>-<seq>``)."""
    rest = name.removeprefix(f"{window}-")
    return rest != name and bool(re.fullmatch(r"\d{12}-\d+", rest))


def reservation_from_api(item: dict[str, Any]) -> Reservation:
    """An EC2 capacity reservation (a Capacity Block) as DescribeCapacityReservations returns it (boto3 or AWS
    CLI JSON), bought for the window its tag names."""
    return Reservation(
        id=item["CapacityReservationId"],
        window=tags_of(item.get("Tags", [])).get(TAG_WINDOW, ""),
        instance_type=item["InstanceType"],
        count=whole(item["TotalInstanceCount"], "TotalInstanceCount"),
        availability_zone=item["AvailabilityZone"],
        start=when(item["StartDate"]),
        end=when(item["EndDate"]),
        state=item["State"],
    )
