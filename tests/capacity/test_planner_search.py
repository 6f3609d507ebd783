"""The pruned search gives exactly what trying every combination gives (the planner's earlier,
exhaustive search, kept here as the reference), extensions and budgets included."""

from __future__ import annotations

import itertools
from decimal import Decimal

from hypothesis import given, settings, strategies as st

from gpu_governance_runtime.planners.capacity import (
    MAX_PURCHASES_PER_OCCURRENCE,
    Occurrence,
    _cheapest_cover,
    _covers,
    _interval,
    _most_at_once,
    shortfall,
)

from .builders import at, block, reservation, window

HELD = {
    "cr-1": reservation("cr-1", at(2), 3, state="active", count=4),
    "cr-2": reservation("cr-2", at(2), 2, state="active", count=2),
}


def usable_together(w, combo, reservations):
    """The consumer can launch into every piece of ``combo`` (with the held blocks) at once."""
    if w.reservations_at_once is None:
        return True
    spans = {r.id: (r.start, r.end) for r in reservations.values()}
    for o in combo:
        spans[o.reservation_id if o.kind == "extension" else o.id] = (
            spans[o.reservation_id][0] if o.kind == "extension" else o.start,
            _interval(o, reservations)[1],
        )
    return (
        _most_at_once(spans.values(), within=[_interval(o, reservations)[:2] for o in combo]) <= w.reservations_at_once
    )


def exhaustive(w, gaps, offerings, reservations, budget_left=None):
    def rank(combo):
        extends = any(o.kind == "extension" for o in combo)
        return (
            not extends if w.prefer_extension else False,
            sum(o.upfront_fee for o in combo),
            sum(o.instance_hours for o in combo),
            len(combo),
            tuple(o.id for o in combo),
        )

    best = None
    for size in range(1, MAX_PURCHASES_PER_OCCURRENCE + 1):
        for combo in itertools.combinations(offerings, size):
            if budget_left is not None and sum(o.upfront_fee for o in combo) > budget_left:
                continue
            if len({o.reservation_id for o in combo if o.kind == "extension"}) < sum(
                o.kind == "extension" for o in combo
            ):
                continue
            if not usable_together(w, combo, reservations):
                continue
            if (best is None or rank(combo) < rank(best)) and _covers(
                gaps, (_interval(o, reservations) for o in combo)
            ):
                best = combo
    return best


offering = st.builds(
    lambda i, day, days, per_hour, count, extends: block(
        f"cbo-{i:03d}",
        at(day),
        days,
        per_hour=str(per_hour),
        count=count,
        **({"kind": "extension", "reservation_id": extends, "end": at(day + days)} if extends else {}),
    ),
    st.integers(0, 999),
    st.integers(2, 9),
    st.sampled_from([1, 2, 3, 7]),
    st.integers(10, 40),
    st.integers(1, 6),
    st.sampled_from([None, None, None, "cr-1", "cr-2"]),
)


@settings(max_examples=300, deadline=None)
@given(
    offers=st.lists(offering, max_size=9, unique_by=lambda o: o.id),
    count=st.integers(1, 8),
    days=st.integers(1, 6),
    prefer=st.booleans(),
    budget=st.none() | st.integers(0, 30000).map(Decimal),
    consumer=st.sampled_from([{}, {"kind": "batch_compute_environment"}]),
)
def test_pruned_search_equals_the_exhaustive_one(offers, count, days, prefer, budget, consumer):
    offers = sorted(offers, key=lambda o: o.id)
    w = window(prefer_extension=prefer, instance_count=count, consumer=consumer)
    gaps = shortfall(Occurrence(window="w", start=at(3, 12, 0), end=at(3 + days, 10, 0)), count, [])
    expected = exhaustive(w, gaps, offers, HELD, budget)
    held = {r.id: (r.start, r.end) for r in HELD.values()}
    # The pieces come in buying order: cheapest first.
    assert _cheapest_cover(w, gaps, offers, HELD, budget_left=budget, held=held) == (
        None if expected is None else tuple(sorted(expected, key=lambda o: (o.upfront_fee, o.id)))
    )
