"""What the runtime knows about one kind of capacity (a Capacity Block, a training plan): its
market rules and how to search, buy and describe it, declared by the kind's module and listed by
the registry (``kinds``).

A kind calls AWS only through the clients of the ``CapacityMarket`` it is handed (``aws.py``: the
reading clients, and the purchase clients that never resend); it holds none and decides nothing
beyond the published rules of its market.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..offers import Offering, Placement, Reservation

# (market, window, missing instances, gap start, gap end, now) -> offerings covering the gap
Search = Callable[[Any, Any, int, datetime, datetime, datetime], list[Offering]]


@dataclass(frozen=True, kw_only=True)
class ExtensionListing:
    """How the AWS CLI lists a kind's extension offerings when an item does not name the reservation it extends:
    ``key`` (the listing), ``id_key`` (an item's id), ``start(item)`` (where the extension starts: where the
    reservation it extends ends) and ``offering(item, reservation_id)`` (the item as an ``Offering``)."""

    key: str
    id_key: str
    start: Callable[[dict[str, Any]], datetime]
    offering: Callable[[dict[str, Any], str], Offering]


@dataclass(frozen=True, kw_only=True)
class CapacityKind:
    """One kind of capacity a window buys.

    ``name``: the window's ``market`` in the policy document (the library's kind of the same name
    declares what the model accepts). ``offering_kinds``: the ``Offering.kind`` of a new
    reservation and of an extension of one. ``offering_problem(offering, extended, now)``: why an
    offering breaks the market's rules (``extended``: the reservation an extension extends), or
    None. ``instance_limit``: (the most instances all reservations of the kind not yet ended may
    hold in the account, what they are called) or None; ``holds(reservation)``: whether a
    reservation is of the kind. ``placements(window)``: what AWS's grid makes one occurrence pay,
    as declared first (``grid.py``). The AWS side, each handed the ``CapacityMarket``: ``owned``
    (every reservation of the kind the controller bought, with its intent id), ``search`` (new
    reservations covering a gap), ``extensions`` (of a held reservation up to the gap's end),
    ``offered_again`` (the offering searched again as it was found), ``outcome_of`` (what an earlier
    purchase of an intent produced), ``purchase`` (buy with the tags on the request; the
    reservation's id). ``offering_lists``: the AWS CLI's listing keys of its new offerings and their
    readers, ``extension_listing`` that of its extension offerings, if the CLI lists them apart
    (``gpu-governance capacity plan --offerings``). ``ec2_capacity_reservation``: its reservations are
    EC2 capacity reservations (``cr-...``), which a launch template targets and whose jobs' use the
    controller measures per reservation (``fill.py``, ``gpu-governance usage``). ``operations``: the
    API operations its module calls, per service (the capacity function checks them at cold start)."""

    name: str
    offering_kinds: tuple[str, str]
    offering_problem: Callable[[Offering, Reservation | None, datetime], str | None]
    holds: Callable[[Reservation], bool]
    placements: Callable[[Any], tuple[Placement, ...]]
    owned: Callable[[Any, Iterable[Any]], list[tuple[Reservation, str | None]]]
    search: Search
    extensions: Callable[[Any, Reservation, datetime], list[Offering]]
    offered_again: Callable[[Any, Offering, Any], list[Offering]]
    outcome_of: Callable[[Any, str, Offering, str], Reservation | None]
    purchase: Callable[[Any, Offering, str, Mapping[str, str]], str]
    offering_lists: Mapping[str, Callable[[dict[str, Any]], Offering]] = field(default_factory=dict)
    extension_listing: ExtensionListing | None = None
    ec2_capacity_reservation: bool = False
    operations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    instance_limit: tuple[int, str] | None = None

    def offers(self, offering: Offering) -> bool:
        """Whether ``offering`` is of this kind (a new reservation or an extension)."""
        return offering.kind in self.offering_kinds
