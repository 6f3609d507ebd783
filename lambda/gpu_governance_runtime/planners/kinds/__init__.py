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
    """The kind ``offering`` (an ``Offering``) buys or extends; a ValueError naming the offering kinds
    the registered kinds take for any other (a ledger record no kind wrote)."""
    kind = next((k for k in KINDS.values() if k.offers(offering)), None)
    if kind is None:
        allowed = sorted({o for k in KINDS.values() for o in k.offering_kinds})
        raise ValueError(f"offering {offering.id}: kind {offering.kind!r} is no capacity kind's - one of {allowed}")
    return kind


__all__ = ["KINDS", "CapacityKind", "ExtensionListing", "kind_named", "kind_of_offering"]
