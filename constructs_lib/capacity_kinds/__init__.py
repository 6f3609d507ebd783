"""The registry of capacity kinds: what the library knows about each kind of capacity a window
buys, asked by name or by what the window feeds.

Nothing outside a kind's own module names a kind; the model, the capacity controller and the
explanations ask ``kind_of(window)`` (or :data:`KINDS`). A new kind (On-Demand Capacity
Reservations, say) is one module here declaring its :class:`CapacityKind`, one line below, its
runtime module and its docs (docs/architecture.md, "Adding a capacity kind").
"""

from __future__ import annotations

from typing import Any

from . import capacity_block, training_plan
from .base import CapacityKind, KindGrant

KINDS: dict[str, CapacityKind] = {k.name: k for k in (capacity_block.KIND, training_plan.KIND)}


def kind_for_feed(feed_kind: str) -> CapacityKind:
    """The kind a window feeding ``feed_kind`` (``contract.CONSUMER_*``) buys."""
    return next(k for k in KINDS.values() if feed_kind in k.feeds)


def kind_of(window: Any) -> CapacityKind:
    """The kind ``window`` (a model window, or its market's name) buys."""
    return KINDS[window] if isinstance(window, str) else kind_for_feed(window.feeds.kind)


__all__ = ["KINDS", "CapacityKind", "KindGrant", "kind_for_feed", "kind_of"]
