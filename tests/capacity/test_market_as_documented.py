"""The market's rules as AWS documents them (issue 37 rows 9 and 10, item 5): training plans are
searched in hours and sold in 1, 2, 4 ... 64 instances; an offering of several segments makes one
reservation per segment; 256 instances across Capacity Blocks; extensions only from 56 days to 1
hour before a block's end, 182 days in all. Each test fails on the market and planner before issue 37."""

from datetime import timedelta
from decimal import Decimal

import boto3
from botocore.stub import Stubber

from gpu_governance_runtime.capacity.aws import CapacityMarket
from gpu_governance_runtime.planners.capacity import plan
from gpu_governance_runtime.planners.kinds.capacity_block import block_offering

from .builders import NOW, at, block, reservation, window
from .stubbed_aws import block_offering as offering_as_listed

TRAINING = window(
    name="finetune",
    market="training_plan",
    instance_type="ml.p5.48xlarge",
    instance_count=3,
    start=at(10, 14, 0),
    duration_hours=15,
    consumer={"kind": "sagemaker_training_jobs", "pool": None},
)


def test_a_training_plan_is_searched_for_the_hours_asked_and_a_plan_size_that_holds_them():
    """[aws: sm-plan.search-in-hours]: DurationHours 1-87,600, the guide's example searches 15 hours; [aws:
    sm-plan.instance-counts]: plans of 1, 2, 4, 8, 16, 32 or 64 instances. Before: 24 hours (a whole day), 3 instances."""
    sagemaker = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(sagemaker) as stub:
        stub.add_response(
            "search_training_plan_offerings",
            {"TrainingPlanOfferings": []},
            {
                "InstanceType": "ml.p5.48xlarge",
                "InstanceCount": 4,
                "DurationHours": 15,
                "StartTimeAfter": at(9, 14, 0),
                "EndTimeBefore": at(12, 5, 0),
                "TargetResources": ["training-job"],
            },
        )
        market = CapacityMarket(ec2=None, sagemaker=sagemaker, controller_id="c")
        assert market.for_planning(TRAINING, [], NOW) == (TRAINING, [])
        stub.assert_no_pending_responses()


def test_an_offering_of_several_segments_is_never_bought():
    """[aws: ec2-cb.offering-segments]: "When a Capacity Block offering contains multiple segments, a separate
    Capacity Reservation is created for each segment", each with its own zone, type and schedule; a consumer that
    launches into one reservation at a time would strand the others. Before: read as one block and bought."""
    listed = {
        **offering_as_listed(block("cbo-seg", at(10), 1)),
        "CapacityBlockOfferingSegments": [
            {"InstanceType": "p5.48xlarge", "AvailabilityZone": zone, "InstanceCount": 2}
            for zone in ("us-east-1a", "us-east-1b")
        ],
    }
    segmented = block_offering(listed)
    assert segmented.segments == 2
    single = block_offering({**listed, "CapacityBlockOfferingSegments": listed["CapacityBlockOfferingSegments"][:1]})
    for consumer in ({"kind": "batch_compute_environment"}, {"kind": "eks_node_group"}):
        result = plan(windows=[window(consumer=consumer)], reservations=[], offerings=[segmented], spent={}, now=NOW)
        assert result.purchases == () and result.ignored_offerings[0][1].startswith(
            "one purchase would create 2 reservations (segments"
        )
    assert [
        p.offering.id
        for p in plan(windows=[window()], reservations=[], offerings=[single], spent={}, now=NOW).purchases
    ] == ["cbo-seg"]


def test_no_cover_takes_the_account_past_256_instances_across_blocks():
    """[aws: ec2-cb.instance-limits]: "up to 64 instances, and you can have up to 256 instances across Capacity
    Blocks". Every block not yet ended counts, whichever window bought it; a purchase past the limit would be
    refused and strand the pieces bought before it. Before: bought."""
    held = [
        reservation(f"cr-{n:017x}", at(20), 1, count=count, window_name="other")
        for n, count in enumerate((64, 64, 64, 61))
    ]
    offer = block("cbo-1", at(10), 1)
    result = plan(windows=[window()], reservations=held, offerings=[offer], spent={}, now=NOW)
    assert result.purchases == () and result.uncovered[0].reason == (
        "at most 256 instances across Capacity Blocks: 253 held or being bought, this cover adds 4"
    )
    ended = [*held[:3], reservation("cr-old", at(1) - timedelta(days=2), 1, count=61, state="expired")]
    assert len(plan(windows=[window()], reservations=ended, offerings=[offer], spent={}, now=NOW).purchases) == 1


def test_extensions_are_bought_only_from_56_days_to_an_hour_before_the_end_and_182_days_in_all():
    """[aws: ec2-cb.extension-rules]. Before: an extension was planned whenever the block was scheduled or active."""
    w = window(start=at(10, 14, 0), duration_hours=30, prefer_extension=True, budget=Decimal("500000"))
    held = reservation("cr-0123456789abcdef0", at(10), 1, state="active")  # ends 11 Dec 11:30
    extension = block("cbe-1", at(11), 1, kind="extension", reservation_id=held.id)
    assert [
        p.offering.id
        for p in plan(windows=[w], reservations=[held], offerings=[extension], spent={}, now=NOW).purchases
    ] == ["cbe-1"]
    late = at(11, 10, 45)  # 45 minutes before the block's end
    late_window = window(start=at(11, 11, 0), duration_hours=4, prefer_extension=True)
    result = plan(windows=[late_window], reservations=[held], offerings=[extension], spent={}, now=late)
    assert result.purchases == () and (
        "cbe-1",
        "the block ends 2026-12-11 11:30 UTC: extensions are sold until 1 hour before its end",
    ) in (result.ignored_offerings)
    long_held = reservation("cr-0aaaaaaaaaaaaaaa1", at(10), 175, state="scheduled")  # 10 Dec + 175 days
    too_long = block("cbe-2", long_held.end, 14, kind="extension", reservation_id=long_held.id)
    found = plan(
        windows=[w], reservations=[long_held], offerings=[too_long], spent={}, now=long_held.end - timedelta(days=10)
    )
    assert ("cbe-2", "the block would last 189 days with it: at most 182 in all") in found.ignored_offerings
    early = plan(windows=[w], reservations=[long_held], offerings=[too_long], spent={}, now=NOW)
    assert ("cbe-2", "starts 2027-06-03, more than 8 weeks ahead") in early.ignored_offerings  # 56 days before its end
