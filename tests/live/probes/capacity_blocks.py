"""EC2 Capacity Blocks for ML (register section ``ec2-cb.*``): what an ordinary offering search
answers now, read-only (``DescribeCapacityBlockOfferings`` buys nothing). The market the planner
plans against (``planners/market.py``) expects instant blocks, starting shortly after the search
and ending at an 11:30 UTC, and offerings of several ``CapacityBlockOfferingSegments``, each a
reservation of its own, which it never buys.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from gpu_governance_runtime.planners.market import BLOCK_END_TIME, INSTANT_START_LEAD  # plain Python

from ..framework import Cleanup, Context, Option, Probe, Verdict, inconclusive, passed

INSTANCE_TYPE = Option("--block-instance-type", "an instance type Capacity Blocks are sold for (p5.48xlarge)")
INSTANCES = Option("--block-instances", "instances per block to search for", int, 1)
HOURS = Option("--block-hours", "the block duration to search for, in hours", int, 24)
OPTIONS = [INSTANCE_TYPE, INSTANCES, HOURS]
# An offering starting within this of the search is an instant one (AWS's figure is "shortly";
# ParallelCluster's tests expect about 30 minutes).
INSTANT_WITHIN = timedelta(hours=2)


def _offerings(context: Context) -> list[dict[str, Any]]:
    args = context.args
    ec2 = context.client("ec2", None)
    pages = ec2.get_paginator("describe_capacity_block_offerings").paginate(
        InstanceType=args.block_instance_type,
        InstanceCount=args.block_instances,
        CapacityDurationHours=args.block_hours,
    )
    return [offering for page in pages for offering in page.get("CapacityBlockOfferings", [])]


def _search(context: Context) -> list[dict[str, Any]] | Verdict:
    try:
        found = _offerings(context)
    except ClientError as error:
        return inconclusive(f"DescribeCapacityBlockOfferings failed: {error}")
    if not found:
        return inconclusive(f"no offering of {context.args.block_instance_type} now: nothing to observe")
    return found


def _at_block_end(moment: datetime) -> bool:
    return moment.astimezone(UTC).timetz() == BLOCK_END_TIME


def instant_start(context: Context, cleanup: Cleanup) -> Verdict:
    found = _search(context)
    if isinstance(found, Verdict):
        return found
    now = datetime.now(UTC)
    instant = [o for o in found if o["StartDate"] - now <= INSTANT_WITHIN]
    if not instant:
        first = min(o["StartDate"] for o in found)
        return inconclusive(
            f"{len(found)} offerings, none starting within {INSTANT_WITHIN.total_seconds() / 3600:g} hours"
            f" (the first at {first:%Y-%m-%d %H:%M} UTC)"
        )
    leads = sorted(int((o["StartDate"] - now).total_seconds() // 60) for o in instant)
    ends = sorted({f"{o['EndDate'].astimezone(UTC):%Y-%m-%d %H:%M}" for o in instant})
    detail = f"{len(instant)} instant offerings starting {leads[0]}-{leads[-1]} minutes after the search, ending {', '.join(ends)} UTC"
    if not all(_at_block_end(o["EndDate"]) for o in instant):
        return inconclusive(f"{detail}: not all at {BLOCK_END_TIME:%H:%M} UTC")
    planner = int(INSTANT_START_LEAD.total_seconds() // 60)
    within = "within" if leads[0] <= planner else "later than"
    return passed(f"{detail}; the first {within} the planner's {planner} minutes (INSTANT_START_LEAD)")


def segments(context: Context, cleanup: Cleanup) -> Verdict:
    found = _search(context)
    if isinstance(found, Verdict):
        return found
    segmented = [o for o in found if o.get("CapacityBlockOfferingSegments")]
    if not segmented:
        return inconclusive(f"{len(found)} offerings, none of several segments in this search")
    shapes = sorted(
        {
            " + ".join(
                f"{s.get('InstanceCount', '?')}×{s.get('InstanceType', '?')}@{s.get('AvailabilityZone', '?')}"
                for s in o["CapacityBlockOfferingSegments"]
            )
            for o in segmented
        }
    )
    return passed(f"{len(segmented)} of {len(found)} offerings in segments: {'; '.join(shapes[:5])}")


def _read_only(args: argparse.Namespace) -> str:
    return "none: DescribeCapacityBlockOfferings only reads (nothing is bought)"


SEARCH = "searches Capacity Block offerings (DescribeCapacityBlockOfferings) for --block-instances × --block-instance-type for --block-hours"
PROBES = [
    Probe(
        name="instant-start-offerings",
        row="ec2-cb.instant-start",
        does=SEARCH,
        passes_when=(
            f"an offering starts within {INSTANT_WITHIN.total_seconds() / 3600:g} hours of the search and ends at "
            f"{BLOCK_END_TIME:%H:%M} UTC (its lead is printed, beside the planner's INSTANT_START_LEAD)"
        ),
        needs=(INSTANCE_TYPE.flag,),
        cost=_read_only,
        run=instant_start,
    ),
    Probe(
        name="offering-segments",
        row="ec2-cb.offering-segments",
        does=SEARCH,
        passes_when="an offering of several CapacityBlockOfferingSegments appears (its segments are printed)",
        needs=(INSTANCE_TYPE.flag,),
        cost=_read_only,
        run=segments,
    ),
]
