"""Small builders for realistic capacity-window test data (prices near the public p5 rates)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpu_governance_runtime.planners.capacity import Offering, Reservation, Window

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(day: int, hour: int = 11, minute: int = 30, month: int = 12) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


def window(**overrides) -> Window:
    values = dict(
        name="launch-load-test",
        market="capacity_block",
        instance_type="p5.48xlarge",
        instance_count=4,
        start=at(10, 14, 0),
        duration_hours=6,
        repeat_every_days=None,
        availability_zones=(),
        max_price_per_instance_hour=Decimal("40"),
        budget=Decimal("50000"),
        budget_period="month",
        buy_ahead_days=56,
        prefer_extension=False,
        mode="auto",
    )
    values.update(overrides)
    return Window(**values)


def block(
    id: str,
    start: datetime,
    days: int,
    *,
    per_hour: str = "31.464",
    count: int = 4,
    zone: str = "us-east-1a",
    instance_type: str = "p5.48xlarge",
    kind: str = "block",
    reservation_id: str | None = None,
    end: datetime | None = None,
) -> Offering:
    hours = days * 24
    return Offering(
        id=id,
        kind=kind,
        instance_type=instance_type,
        count=count,
        availability_zone=zone,
        start=start,
        end=end or start + timedelta(hours=hours),
        duration_hours=hours,
        upfront_fee=Decimal(per_hour) * count * hours,
        reservation_id=reservation_id,
    )


def reservation(
    id: str,
    start: datetime,
    days: int,
    *,
    state: str = "scheduled",
    count: int = 4,
    zone: str = "us-east-1a",
    window_name: str = "launch-load-test",
) -> Reservation:
    return Reservation(
        id=id,
        window=window_name,
        instance_type="p5.48xlarge",
        count=count,
        availability_zone=zone,
        start=start,
        end=start + timedelta(days=days),
        state=state,
    )
