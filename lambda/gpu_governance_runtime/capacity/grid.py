"""What AWS's grid makes a window pay, and the placement that wastes least (``capacity plan`` and ``validate``).

Capacity Blocks bought ahead are searched in whole days and end at 11:30 UTC (``market.py``), so they start at 11:30
UTC too; only a block found by a search for capacity now starts at another time, minutes after the search, and ends at
an 11:30 UTC [aws: ec2-cb.instant-start]. Training plans are searched in hours [aws: sm-plan.search-in-hours]. Either
way the instances end 30 minutes before the reservation [aws: ec2-cb.expiration-warning-and-termination]. So a window's
hours use only part of what is bought for them; the rest is idle by construction, whatever the controller does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from ..planners import market
from ..planners.capacity import Window

DAY = timedelta(days=1)


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


def _hours(delta: timedelta) -> Decimal:
    return Decimal(delta.total_seconds()) / 3600


def placements(window: Window) -> tuple[Placement, ...]:
    """The window's first occurrence as declared, then the placements that waste less."""
    start, length, lead = window.start, timedelta(hours=window.duration_hours), market.TERMINATION_LEAD
    if window.market == "training_plan":  # searched for the window's hours, from its start: no other placement
        return (
            Placement(
                how=f"a training plan of {window.duration_hours} h from {start:%H:%M} UTC (its last 30 minutes run no work)",
                start=start,
                end=start + length,
                used_hours=_hours(length - lead),
            ),
        )
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


def percent(share: Decimal) -> str:
    return f"{share * 100:.0f} %"


def report(window: Window) -> str:
    """One line: what the window pays as declared, the placement that wastes least, and the one bought ahead that
    wastes least when that one is an instant block."""
    declared, *others = placements(window)
    line = (
        f"capacity window {window.name}: {window.duration_hours} h of {window.instance_count} x {window.instance_type} "
        f"pay {declared.paid_hours:.1f} h per instance {declared.how}: {percent(declared.idle_share)} idle built in"
    )
    best = min(others, key=lambda p: p.idle_share, default=None)
    if best is not None and best.idle_share < declared.idle_share:
        line += f"; least waste: {best.how}, {percent(best.idle_share)} idle"
    # Bought ahead, capacity is sold before the hours come; an instant block may not be there when they do.
    ahead = min(
        (p for p in others if p.bought_ahead and p.paid_hours < declared.paid_hours),
        key=lambda p: p.idle_share,
        default=None,
    )
    if ahead is not None and ahead is not best:
        line += f"; bought ahead: {ahead.how}, {percent(ahead.idle_share)} idle"
    if 1 - declared.idle_share < window.min_yield:
        line += f" (below min_yield {percent(window.min_yield)}: an auto window does not buy that)"
    return line
