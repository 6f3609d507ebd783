"""The probes of the Capacity Block market, offline with botocore's Stubber: what they make of an
offering search, and that they only read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.live import framework
from tests.live.framework import INCONCLUSIVE, PASS
from tests.live.probes import capacity_blocks

from .test_batch_iam_probes import ARGS


def run(context, probe, **args):
    (found,) = [p for p in capacity_blocks.PROBES if p.name == probe]
    return framework.run_one(found, context(**{**ARGS, **args}))


def _offering(start: datetime, end: datetime, segments=None) -> dict:
    offering = {
        "CapacityBlockOfferingId": f"cbo-{start:%H%M}",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "InstanceCount": 1,
        "StartDate": start,
        "EndDate": end,
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "700.00",
        "CurrencyCode": "USD",
    }
    if segments:
        offering["CapacityBlockOfferingSegments"] = segments
    return offering


def _offerings(stubs, *offerings):
    stubs("ec2").add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": list(offerings)},
        {"InstanceType": "p5.48xlarge", "InstanceCount": 1, "CapacityDurationHours": 24},
    )


def _next_1130(after: datetime) -> datetime:
    moment = after.replace(hour=11, minute=30, second=0, microsecond=0)
    return moment if moment > after else moment + timedelta(days=1)


BLOCKS = dict(block_instance_type="p5.48xlarge")


@pytest.mark.parametrize(
    ("lead", "said"), [(12, "the first within the planner's 30 minutes"), (52, "the first later than the planner's")]
)
def test_an_instant_offering_ending_at_1130_passes_with_its_lead(stubs, context, lead, said):
    now = datetime.now(UTC)
    later = _next_1130(now) + timedelta(days=3)
    _offerings(
        stubs,
        _offering(now + timedelta(minutes=lead), _next_1130(now + timedelta(hours=1))),
        _offering(later, later + timedelta(days=1)),
    )
    verdict = run(context, "instant-start-offerings", **BLOCKS).verdict
    assert verdict.outcome == PASS and "1 instant offerings starting" in verdict.detail
    assert said in verdict.detail


def test_an_instant_offering_not_ending_at_1130_is_not_a_pass(stubs, context):
    now = datetime.now(UTC)
    _offerings(stubs, _offering(now + timedelta(minutes=20), _next_1130(now) + timedelta(minutes=15)))
    assert run(context, "instant-start-offerings", **BLOCKS).verdict.outcome == INCONCLUSIVE


def test_no_instant_offering_or_none_at_all_is_inconclusive_never_a_pass(stubs, context):
    now = datetime.now(UTC)
    later = _next_1130(now) + timedelta(days=3)
    _offerings(stubs, _offering(later, later + timedelta(days=1)))
    assert run(context, "instant-start-offerings", **BLOCKS).verdict.outcome == INCONCLUSIVE
    _offerings(stubs)
    assert run(context, "instant-start-offerings", **BLOCKS).verdict.outcome == INCONCLUSIVE


def test_an_offering_in_segments_passes_and_names_them(stubs, context):
    start = _next_1130(datetime.now(UTC)) + timedelta(days=1)
    segments = [
        {
            "InstanceType": "p5.48xlarge",
            "AvailabilityZone": zone,
            "InstanceCount": 1,
            "StartDate": start,
            "EndDate": start + timedelta(days=1),
        }
        for zone in ("us-east-1a", "us-east-1b")
    ]
    _offerings(
        stubs, _offering(start, start + timedelta(days=1)), _offering(start, start + timedelta(days=1), segments)
    )
    verdict = run(context, "offering-segments", **BLOCKS).verdict
    assert verdict.outcome == PASS and "1×p5.48xlarge@us-east-1a + 1×p5.48xlarge@us-east-1b" in verdict.detail
    _offerings(stubs, _offering(start, start + timedelta(days=1)))
    assert run(context, "offering-segments", **BLOCKS).verdict.outcome == INCONCLUSIVE


def test_the_offering_probes_buy_nothing(stubs, context):
    """Only DescribeCapacityBlockOfferings is called: another call would find no scripted answer,
    and the probe would say it raised."""
    for probe in ("offering-segments", "instant-start-offerings"):
        _offerings(stubs)
        verdict = run(context, probe, **BLOCKS).verdict
        assert verdict.detail == "no offering of p5.48xlarge now: nothing to observe"
    assert list(stubs.clients) == [("ec2", None)]
