from datetime import timedelta
from decimal import Decimal

import pytest

from gpu_governance_runtime.planners import market
from gpu_governance_runtime.planners.capacity import Occurrence, plan, shortfall
from gpu_governance_runtime.planners.kinds import capacity_block

from .builders import NOW, at, block, reservation, window


def run(windows, offerings=(), reservations=(), spent=None, now=NOW):
    return plan(windows=windows, reservations=reservations, offerings=offerings, spent=spent or {}, now=now)


def test_buys_the_cheapest_block_that_spans_a_six_hour_validation_window():
    w = window()  # 10 Dec 14:00-20:00: the block must start 10 Dec 11:30 and end 11 Dec 11:30
    result = run(
        [w],
        [
            block("cbo-one-day", at(10), 1, per_hour="31.464"),
            block("cbo-two-days", at(9), 2, per_hour="30.00"),  # cheaper per hour, dearer in total
            block("cbo-too-late", at(11), 1, per_hour="20.00"),  # starts after the window
        ],
    )
    assert [p.offering.id for p in result.purchases] == ["cbo-one-day"]
    assert result.uncovered == ()


def test_offering_that_does_not_end_at_1130_utc_is_ignored_with_the_reason():
    result = run([window()], [block("cbo-noon", at(10), 1, end=at(11, 12, 0))])
    assert result.purchases == ()
    assert result.ignored_offerings == (("cbo-noon", "ends 12:00 UTC, but blocks end at 11:30 UTC"),)
    assert "no offering" in result.uncovered[0].reason


def test_window_crossing_1130_needs_two_days():
    assert capacity_block.shortest_block_days(at(10, 10, 0), at(10, 13, 0)) == 2
    assert capacity_block.shortest_block_days(at(10, 12, 0), at(10, 18, 0)) == 1
    assert capacity_block.shortest_block_days(at(1), at(16)) == 21  # 15 days rounds up to the 7-day step
    assert capacity_block.shortest_block_days(at(1, month=1), at(1, month=9)) is None  # beyond 182 days


@pytest.mark.parametrize("days, allowed", [(14, True), (15, False), (21, True), (22, False), (182, True), (189, False)])
def test_duration_rules(days, allowed):
    problem = capacity_block.block_offering_problem(
        start=at(10), end=at(10) + timedelta(days=days), duration_hours=days * 24, count=1, now=NOW
    )
    assert (problem is None) is allowed


def test_start_more_than_eight_weeks_ahead_is_refused():
    start = NOW + timedelta(weeks=8, days=1)
    start = market.next_block_end(start)
    assert "8 weeks" in capacity_block.block_offering_problem(
        start=start, end=start + timedelta(days=1), duration_hours=24, count=1, now=NOW
    )


def test_twenty_day_window_is_covered_by_a_chain_of_blocks_when_cheaper():
    w = window(start=at(2, 12, 0), duration_hours=20 * 24, budget=Decimal("100000"))  # 2-22 Dec 12:00
    chain = [block("cbo-14d", at(2), 14, per_hour="30"), block("cbo-7d", at(16), 7, per_hour="30")]
    single = block("cbo-21d", at(2), 21, per_hour="32")
    result = run([w], chain + [single])
    assert sorted(p.offering.id for p in result.purchases) == ["cbo-14d", "cbo-7d"]
    cheaper_single = block("cbo-21d", at(2), 21, per_hour="29")
    assert [p.offering.id for p in run([w], chain + [cheaper_single]).purchases] == ["cbo-21d"]


def test_equal_cost_prefers_least_unused_time():
    w = window(instance_count=2)
    exact = block("cbo-b-exact", at(10), 1, count=2, per_hour="40")
    bigger = block("cbo-a-bigger", at(10), 1, count=4, per_hour="20")  # same fee, twice the hours
    assert exact.upfront_fee == bigger.upfront_fee
    assert [p.offering.id for p in run([w], [bigger, exact]).purchases] == ["cbo-b-exact"]


def test_price_cap_leaves_window_uncovered_with_reason():
    result = run([window(max_price_per_instance_hour=Decimal("25"))], [block("cbo", at(10), 1, per_hour="31.464")])
    assert result.purchases == ()
    assert result.uncovered[0].reason.startswith(
        "price cap: covering offerings cost from 31.46 per instance-hour, cap is 25"
    )


def test_price_cap_reason_names_only_prices_of_offerings_that_cover_the_window():
    # A cheap 2-instance block overlaps the window but cannot cover 4 instances alone or with the
    # 4-instance block (a cover needs only that one); the reason names the covering price.
    cheap_partial = block("cbo-cheap", at(10), 1, per_hour="5", count=2, zone="us-east-1b")
    covering = block("cbo-cover", at(10), 1, per_hour="31.464")
    result = run([window(max_price_per_instance_hour=Decimal("25"), instance_count=4)], [cheap_partial, covering])
    assert result.uncovered[0].reason == "price cap: covering offerings cost from 31.46 per instance-hour, cap is 25"


def test_budget_is_shared_by_recurring_occurrences_and_never_exceeded():
    # Weekly 6-hour validation; each block costs 4 x 24 x 30 = 2880; 6000 allows two.
    w = window(repeat_every_days=7, budget=Decimal("6000"), start=at(3, 14, 0), buy_ahead_days=24)
    offerings = [block(f"cbo-{d}", at(d), 1, per_hour="30") for d in (3, 10, 17, 24)]
    result = run([w], offerings)
    assert [p.offering.id for p in result.purchases] == ["cbo-3", "cbo-10"]
    assert result.spend("launch-load-test") == Decimal("5760")
    assert [u.occurrence.start for u in result.uncovered] == [at(17, 14, 0), at(24, 14, 0)]
    assert all(u.reason.startswith("budget: cheapest cover costs 2880") for u in result.uncovered)
    # what earlier runs spent counts too
    assert len(run([w], offerings, spent={"launch-load-test": Decimal("3000")}).purchases) == 1
    assert run([w], offerings, spent={"launch-load-test": Decimal("3200")}).purchases == ()


def test_existing_block_covers_and_payment_failed_one_does_not():
    w = window()
    held = reservation("cr-held", at(10), 1)
    assert run([w], [block("cbo", at(10), 1)], [held]).purchases == ()
    assert run([w], [], [held]).covered[0].start == at(10, 14, 0)
    failed = reservation("cr-failed", at(10), 1, state="payment-failed")
    assert [p.offering.id for p in run([w], [block("cbo", at(10), 1)], [failed]).purchases] == ["cbo"]


def test_partial_count_held_buys_only_the_missing_instances():
    w = window(instance_count=6)
    result = run(
        [w],
        [block("cbo-4", at(10), 1, count=4), block("cbo-2", at(10), 1, count=2)],
        [reservation("cr", at(10), 1, count=4)],
    )
    assert [p.offering.id for p in result.purchases] == ["cbo-2"]


def test_prefers_extension_of_the_current_block_when_declared():
    w = window(start=at(2, 12, 0), duration_hours=3 * 24, prefer_extension=True)  # until 5 Dec 12:00
    held = reservation("cr-1", at(2), 2, state="active")  # ends 4 Dec 11:30
    extension = block("cbe-2d", at(2), 2, per_hour="35", kind="extension", reservation_id="cr-1", end=at(6))
    fresh = block("cbo-2d", at(4), 2, per_hour="30")
    assert [p.offering.id for p in run([w], [extension, fresh], [held]).purchases] == ["cbe-2d"]
    cheaper_first = window(start=at(2, 12, 0), duration_hours=3 * 24, prefer_extension=False)
    assert [p.offering.id for p in run([cheaper_first], [extension, fresh], [held]).purchases] == ["cbo-2d"]


def test_extension_of_a_block_that_is_not_ours_is_ignored():
    extension = block("cbe", at(2), 2, kind="extension", reservation_id="cr-someone-else", end=at(6))
    assert (
        run([window()], [extension]).ignored_offerings[0][1]
        == "extends cr-someone-else, which this controller did not buy"
    )


def test_availability_zones_restrict_offerings():
    w = window(availability_zones=("us-east-1b",))
    result = run(
        [w], [block("cbo-a", at(10), 1, zone="us-east-1a", per_hour="1"), block("cbo-b", at(10), 1, zone="us-east-1b")]
    )
    assert [p.offering.id for p in result.purchases] == ["cbo-b"]


def test_occurrences_outside_the_buying_horizon_wait():
    w = window(start=at(20, 14, 0), buy_ahead_days=7)
    assert w.occurrences(NOW) == ()
    assert len(w.occurrences(at(14, 9, 0))) == 1


def test_recurring_window_skips_finished_occurrences():
    w = window(start=at(1, 14, 0, month=1), repeat_every_days=7, buy_ahead_days=14)
    starts = [o.start for o in w.occurrences(NOW)]
    assert starts == [at(3, 14, 0), at(10, 14, 0)]  # Thursdays after 1 Dec, within 14 days


def test_shortfall_reports_missing_pieces():
    occ = Occurrence(window="w", start=at(1), end=at(5))
    assert shortfall(occ, 4, [(at(1), at(3), 4), (at(3), at(5), 2)]) == [(at(3), at(5), 2)]
    assert shortfall(occ, 4, [(at(1), at(5), 4)]) == []
