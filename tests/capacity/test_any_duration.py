"""Offerings of any duration: blocks that last hours and minutes (they all end at 11:30 UTC) and
instant starts for windows that begin now, chosen by cost, then least unused time."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from botocore.stub import ANY
from moto import mock_aws

from gpu_governance_runtime.capacity import controller
from gpu_governance_runtime.planners.capacity import Offering, plan
from gpu_governance_runtime.planners.kinds import capacity_block
from gpu_governance_runtime.planners.kinds.capacity_block import block_offering as read_block_offering
from gpu_governance_runtime.planners.kinds.training_plan import training_plan_offering

from .builders import NOW, at, block, window
from .stubbed_aws import StubbedAws, block_offering, create_ledger_table

PER_HOUR = Decimal("31.464")


def short_block(
    id: str, start, end, *, per_hour: Decimal = PER_HOUR, count: int = 4, requested_hours: int | None = None
) -> Offering:
    """A block as AWS offers it: whatever start, ending at 11:30 UTC, lasting hours and minutes."""
    hours, rest = divmod(end - start, timedelta(hours=1))
    minutes = rest // timedelta(minutes=1)
    return Offering(
        id=id,
        kind="block",
        instance_type="p5.48xlarge",
        count=count,
        availability_zone="us-east-1a",
        start=start,
        end=end,
        duration_hours=hours,
        duration_minutes=minutes,
        upfront_fee=(per_hour * count * (hours + Decimal(minutes) / 60)).quantize(Decimal("0.01")),
        requested_hours=requested_hours,
    )


def run(windows, offerings, now=NOW):
    return plan(windows=windows, reservations=(), offerings=offerings, spent={}, now=now)


def test_four_hour_window_buys_the_four_hour_block_not_a_day():
    # The bug: a 4-hour workshop bought a 24-hour block (80 instance-hours unused) while a
    # 4-hour offering existed; the 4-hour one was ignored for not lasting whole days.
    workshop = window(name="workshop", start=at(10, 7, 30), duration_hours=4)
    four_hours = short_block("cbo-4h", at(10, 7, 30), at(10))
    day = block("cbo-24h", at(9), 1)
    result = run([workshop], [day, four_hours])
    assert [p.offering.id for p in result.purchases] == ["cbo-4h"]
    assert result.ignored_offerings == ()
    assert (
        result.purchases[0].offering.instance_hours == workshop.instance_count * workshop.duration_hours
    )  # nothing unused


def test_hours_and_minutes_count_in_price_and_unused_time():
    # 04:55 to 11:30 is 6 h 35 min: the price per instance-hour counts the minutes.
    offer = short_block("cbo-0655", at(10, 4, 55), at(10))
    assert (offer.duration_hours, offer.duration_minutes) == (6, 35)
    assert offer.instance_hours == Decimal(4) * (6 + Decimal(35) / 60)
    assert round(offer.price_per_instance_hour, 2) == round(PER_HOUR, 2)
    # The same fee for a longer block: the shorter one wastes less time and is chosen.
    w = window(start=at(10, 5, 0), duration_hours=6)
    longer = short_block("cbo-a-longer", at(10, 0, 30), at(10), per_hour=offer.upfront_fee / (4 * 11))
    assert longer.upfront_fee == offer.upfront_fee
    assert [p.offering.id for p in run([w], [longer, offer]).purchases] == ["cbo-0655"]


def test_cost_comes_before_unused_time():
    w = window(start=at(10, 8, 0), duration_hours=3)  # 08:00-11:00
    snug = short_block("cbo-snug", at(10, 8, 0), at(10), per_hour=Decimal("40"))  # 3.5 h: 560
    day = block("cbo-day", at(9), 1, per_hour="5")  # 24 h: 480, cheaper in total
    assert [p.offering.id for p in run([w], [snug, day]).purchases] == ["cbo-day"]


@pytest.mark.parametrize(
    "length, sound",
    [
        (timedelta(hours=4), True),
        (timedelta(hours=6, minutes=35), True),
        (timedelta(days=1, hours=23), True),
        (timedelta(days=14, hours=23, minutes=59), True),
        (timedelta(days=15), False),
        (timedelta(days=17, hours=12), False),
        (timedelta(days=20, hours=1), True),
        (timedelta(days=182, hours=23), True),
        (timedelta(days=183), False),
    ],
)
def test_a_block_lasts_within_a_day_of_a_duration_one_may_search_for(length, sound):
    end = at(20)
    start = end - length
    hours, rest = divmod(length, timedelta(hours=1))
    problem = capacity_block.block_offering_problem(
        start=start,
        end=end,
        duration_hours=hours,
        duration_minutes=rest // timedelta(minutes=1),
        count=4,
        now=start - timedelta(hours=1),
    )
    assert (problem is None) is sound, problem


def test_minutes_outside_an_hour_are_refused():
    problem = capacity_block.block_offering_problem(
        start=at(10, 4, 0), end=at(10), duration_hours=6, duration_minutes=90, count=4, now=NOW
    )
    assert problem.startswith("duration 6 h 90 min is not within a day")


def test_window_that_has_begun_is_covered_by_an_instant_start():
    # A spike at 04:00; the controller runs at 04:50 and finds a block starting 04:55.
    now = at(10, 4, 50)
    spike = window(name="spike", start=at(10, 4, 0), duration_hours=6)
    instant = short_block("cbo-instant", at(10, 4, 55), at(10))
    result = run([spike], [instant], now=now)
    assert [p.offering.id for p in result.purchases] == ["cbo-instant"]
    # A block starting later than the instant-start lead leaves the window's next half hour bare.
    late = short_block("cbo-late", at(10, 5, 30), at(10))
    assert run([spike], [late], now=now).purchases == ()


def test_future_windows_are_still_covered_from_their_start():
    w = window(start=at(10, 8, 0), duration_hours=3)
    starts_late = short_block("cbo-0815", at(10, 8, 15), at(10))
    assert run([w], [starts_late]).purchases == ()


def test_api_offering_with_minutes_is_read_with_them():
    offer = read_block_offering(
        {
            "CapacityBlockOfferingId": "cbo-1",
            "InstanceType": "p5.48xlarge",
            "AvailabilityZone": "us-east-1a",
            "InstanceCount": 4,
            "StartDate": "2026-12-10T04:55:00Z",
            "EndDate": "2026-12-10T11:30:00Z",
            "CapacityBlockDurationHours": 6,
            "CapacityBlockDurationMinutes": 35,
            "UpfrontFee": "828.89",
            "CurrencyCode": "USD",
        }
    )
    assert (offer.duration_hours, offer.duration_minutes, offer.end - offer.start) == (
        6,
        35,
        timedelta(hours=6, minutes=35),
    )
    plan_offer = training_plan_offering(
        {
            "TrainingPlanOfferingId": "tpo-1",
            "TargetResources": ["training-job"],
            "DurationHours": 30,
            "DurationMinutes": 15,
            "UpfrontFee": "100",
            "ReservedCapacityOfferings": [
                {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2, "StartTime": "2026-12-10T05:15:00Z"}
            ],
        }
    )
    assert plan_offer.end - plan_offer.start == timedelta(hours=30, minutes=15) and plan_offer.hours == Decimal("30.25")


@pytest.fixture
def aws():
    with mock_aws():
        yield StubbedAws(), create_ledger_table()


def test_controller_searches_whole_days_and_buys_the_short_block_it_found(aws):
    stubbed, ledger = aws
    workshop = window(name="workshop", start=at(10, 7, 30), duration_hours=4)
    four_hours = short_block("cbo-4h", at(10, 7, 30), at(10))
    stubbed.owned()
    stubbed.ec2_stub.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [block_offering(four_hours)]},
        {
            "InstanceType": "p5.48xlarge",
            "InstanceCount": 4,
            "CapacityDurationHours": 24,
            "StartDateRange": ANY,
            "EndDateRange": ANY,
        },
    )
    stubbed.purchase(four_hours, "workshop-202612100730-1", "workshop")
    report = controller.run(windows=[workshop], ledger=ledger, capacity=stubbed.market, notify=lambda *_: None, now=NOW)
    assert [i.offering.id for i in report.bought] == ["cbo-4h"]
    assert ledger.spent(workshop, NOW) == four_hours.upfront_fee
    stubbed.done()


def test_approved_short_block_is_searched_again_with_the_duration_that_found_it(aws):
    stubbed, ledger = aws
    workshop = window(name="workshop", start=at(10, 7, 30), duration_hours=4, mode="approval")
    four_hours = short_block("cbo-4h", at(10, 7, 30), at(10))
    stubbed.owned()
    stubbed.offerings(four_hours)
    controller.run(windows=[workshop], ledger=ledger, capacity=stubbed.market, notify=lambda *_: None, now=NOW)
    ledger.approve("workshop-202612100730-1", now=NOW)
    stubbed.owned()
    # 6 // 24 would search for 0 hours, which EC2 refuses: the intent remembers the 24 searched.
    stubbed.ec2_stub.add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [block_offering(four_hours)]},
        {
            "InstanceType": "p5.48xlarge",
            "InstanceCount": 4,
            "CapacityDurationHours": 24,
            "StartDateRange": ANY,
            "EndDateRange": ANY,
        },
    )
    stubbed.purchase(four_hours, "workshop-202612100730-1", "workshop")
    report = controller.run(
        windows=[workshop],
        ledger=ledger,
        capacity=stubbed.market,
        notify=lambda *_: None,
        now=NOW + timedelta(minutes=5),
    )
    assert [i.id for i in report.bought] == ["workshop-202612100730-1"]
    assert len(stubbed.purchase_attempts) == 1
    stubbed.done()
