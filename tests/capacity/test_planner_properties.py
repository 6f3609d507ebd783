"""Properties that hold for any market: never above the cap or the budget, every occurrence
accounted for, what is bought really covers, nothing cheaper that covers alone was passed over."""

from datetime import timedelta
from decimal import Decimal

from hypothesis import given, settings, strategies as st

from gpu_governance_runtime.planners.capacity import _interval, plan, shortfall

from .builders import NOW, at, block, reservation, window

offerings = st.lists(
    st.builds(
        lambda i, day, days, per_hour, count, zone: block(
            f"cbo-{i:03d}", at(day), days, per_hour=str(per_hour), count=count, zone=zone
        ),
        st.integers(0, 999),
        st.integers(2, 20),
        st.sampled_from([1, 2, 3, 7, 14, 21]),
        st.integers(10, 60),
        st.integers(1, 8),
        st.sampled_from(["us-east-1a", "us-east-1b"]),
    ),
    max_size=10,
    unique_by=lambda o: o.id,
)
windows = st.builds(
    lambda day, hours, count, cap, budget, repeat: window(
        start=at(day, 14, 0),
        duration_hours=hours,
        instance_count=count,
        max_price_per_instance_hour=Decimal(cap),
        budget=Decimal(budget),
        repeat_every_days=repeat,
        buy_ahead_days=30,
    ),
    st.integers(2, 20),
    st.sampled_from([4, 8, 30, 72, 200]),
    st.integers(1, 8),
    st.integers(15, 60),
    st.integers(0, 40000),
    st.sampled_from([None, 7]),
)
spent = st.integers(0, 20000).map(Decimal)


@settings(max_examples=150, deadline=None)
@given(w=windows, offers=offerings, already=spent, held_day=st.none() | st.integers(2, 20))
def test_plan_respects_limits_and_accounts_for_every_occurrence(w, offers, already, held_day):
    held = [] if held_day is None else [reservation("cr-held", at(held_day), 2, count=w.instance_count)]
    result = plan(windows=[w], reservations=held, offerings=offers, spent={w.name: already}, now=NOW)

    assert all(p.offering.price_per_instance_hour <= w.max_price_per_instance_hour for p in result.purchases)
    assert result.spend(w.name) == 0 or already + result.spend(w.name) <= w.budget
    assert len({p.offering.id for p in result.purchases}) == len(result.purchases)  # nothing bought twice

    bought = {p.occurrence for p in result.purchases}
    uncovered = {u.occurrence for u in result.uncovered}
    for occurrence in w.occurrences(NOW):
        assert [occurrence in bought, occurrence in uncovered, occurrence in result.covered].count(True) == 1
    by_id = {r.id: r for r in held}
    for occurrence in bought:
        have = [(r.start, r.end, r.count) for r in held] + [
            _interval(p.offering, by_id) for p in result.purchases if p.occurrence == occurrence
        ]
        assert shortfall(occurrence, w.instance_count, have) == []


@settings(max_examples=150, deadline=None)
@given(w=windows.map(lambda w: w.__class__(**{**w.__dict__, "repeat_every_days": None})), offers=offerings)
def test_no_cheaper_single_offering_that_covers_was_passed_over(w, offers):
    result = plan(windows=[w], reservations=[], offerings=offers, spent={}, now=NOW)
    for occurrence in w.occurrences(NOW):
        cost = sum(p.offering.upfront_fee for p in result.purchases if p.occurrence == occurrence)
        for o in offers:
            alone_covers = not shortfall(occurrence, w.instance_count, [(o.start, o.end, o.count)])
            eligible = (
                o.price_per_instance_hour <= w.max_price_per_instance_hour
                and o.upfront_fee <= w.budget
                and o.start >= NOW - timedelta(hours=1)
            )
            if alone_covers and eligible:
                assert occurrence not in {u.occurrence for u in result.uncovered}
                assert cost <= o.upfront_fee
