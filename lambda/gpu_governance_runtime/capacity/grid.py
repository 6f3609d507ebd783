"""What AWS's grid makes a window pay, and the placement that wastes least (``capacity plan`` and ``validate``).

Each kind of capacity is sold on a grid of its own (``kinds/``: Capacity Blocks in whole days ending at 11:30 UTC,
training plans in hours), and the instances end 30 minutes before the reservation
[aws: ec2-cb.expiration-warning-and-termination]. So a window's hours use only part of what is bought for them; the
rest is idle by construction, whatever the controller does.
"""

from __future__ import annotations

from decimal import Decimal

from ..planners.kinds import kind_named
from ..planners.offers import Placement
from ..planners.window import Window


def placements(window: Window) -> tuple[Placement, ...]:
    """The window's first occurrence as declared, then the placements that waste less (its kind's grid)."""
    return kind_named(window.market).placements(window)


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
