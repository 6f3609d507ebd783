"""The runtime's registry of capacity kinds: how each kind of capacity a window buys is searched,
bought and described, and its market's rules, asked by the window's ``market`` or by an offering.

No runtime module outside a kind's own module names a kind or its offerings' kinds; the planner,
the market (``aws.py``), the grid and the controller ask ``kind_named(window.market)``,
``kind_of_offering(offering)`` or :data:`KINDS`. A new kind (On-Demand Capacity Reservations, say)
is one module here declaring its :class:`CapacityKind` and one line below (docs/architecture.md,
"Adding a capacity kind").
"""

from __future__ import annotations

from typing import Any

from . import capacity_block, training_plan
from .base import CapacityKind, ExtensionListing

KINDS: dict[str, CapacityKind] = {k.name: k for k in (capacity_block.KIND, training_plan.KIND)}


def kind_named(market: str) -> CapacityKind:
    """The kind a window of this ``market`` buys."""
    return KINDS[market]


def kind_of_offering(offering: Any) -> CapacityKind:
    """The kind ``offering`` (an ``Offering``) buys or extends."""
    return next(k for k in KINDS.values() if k.offers(offering))


__all__ = ["KINDS", "CapacityKind", "ExtensionListing", "kind_named", "kind_of_offering"]
