"""The rules of the EC2 Capacity Block and SageMaker training plan market, in one place.

Source: EC2 User Guide, "Capacity Blocks for ML" (durations, lead time, end time, states), and
the ``CapacityBlockOffering`` shape of the EC2 API (``CapacityBlockDurationHours`` plus
``CapacityBlockDurationMinutes``).

A search asks for a duration in whole days (``CapacityDurationHours``: 1-14 days, then 7-day
steps up to 182 days). What comes back does not last exactly that long: every block ends at
11:30 UTC, so blocks starting at other times of day last a little less or a little more than
asked (AWS: "one block will have a duration that is slightly less than your desired duration,
while the other will have a duration slightly greater"), down to hours and minutes (an instant
start at 04:55 that ends at 11:30 the same day lasts 6 h 35 min). An offering is sound when it
ends at 11:30 UTC and lasts less than a day more or less than a duration one may ask for.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, time, timedelta

# Blocks run in 1-day steps up to 14 days, then in 7-day steps up to 182 days.
ALLOWED_DURATION_DAYS: tuple[int, ...] = tuple(range(1, 15)) + tuple(range(21, 183, 7))
MAX_START_AHEAD = timedelta(weeks=8)
MAX_INSTANCES_PER_BLOCK = 64
# "Each Capacity Block can have up to 64 instances, and you can have up to 256 instances across Capacity Blocks"
# [aws: ec2-cb.instance-limits]. Read strictly: every block not yet ended counts, whether or not it overlaps.
MAX_INSTANCES_ACROSS_BLOCKS = 256
# Extensions [aws: ec2-cb.extension-rules]: requested "up to a minimum of 1 hour or a maximum of 56 days before it
# expires" (the latter is the 8 weeks an offering may start ahead, block_offering_problem), in the durations of a
# block, "up to 182 days (26 weeks) total".
EXTENSION_LATEST = timedelta(hours=1)
MAX_BLOCK_TOTAL = timedelta(days=182)
# Training plans [aws: sm-plan.search-in-hours]: searched in hours (DurationHours 1-87,600), of 1, 2, 4, 8, 16, 32 or
# 64 instances [aws: sm-plan.instance-counts].
TRAINING_PLAN_MAX_HOURS = 87_600
TRAINING_PLAN_COUNTS = (1, 2, 4, 8, 16, 32, 64)
# Every block ends at 11:30 UTC; instances are terminated 30 minutes before that.
BLOCK_END_TIME = time(11, 30, tzinfo=UTC)
TERMINATION_LEAD = timedelta(minutes=30)
# Offerings for a window that begins now start a few minutes after the search ("instant start",
# e.g. 04:55 for a search at 04:50): such a window is covered from this long after now
# [aws: ec2-cb.instant-start].
INSTANT_START_LEAD = timedelta(minutes=30)
# EC2 sends the expiration warning this long before the end.
WARNING_LEAD = timedelta(minutes=40)
# The longest schedule of the capacity controller while a window's instances near their end: two
# runs land between requeue.STOP_LEAD and TERMINATION_LEAD, so one failed run leaves the next to
# stop and requeue the jobs (Batch copies, Slurm requeues). The construct runs it at least this often.
SCHEDULE_LIMIT = timedelta(minutes=5)

# Reservation states that hold (or will hold) capacity.
COVERING_STATES = frozenset({"payment-pending", "scheduled", "active"})
# Extensions are sold only for blocks that still run or are about to.
EXTENDABLE_STATES = frozenset({"scheduled", "active"})

# Training plan statuses mapped onto the reservation states above.
TRAINING_PLAN_STATES = {
    "Pending": "payment-pending",
    "Scheduled": "scheduled",
    "Active": "active",
    "Expired": "expired",
    "Failed": "payment-failed",
}


def utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"datetime {value.isoformat()} has no time zone; give it in UTC (e.g. ...Z)")
    return value.astimezone(UTC)


def next_block_end(moment: datetime) -> datetime:
    """The first 11:30 UTC at or after ``moment``."""
    moment = utc(moment)
    end = datetime.combine(moment.date(), BLOCK_END_TIME)
    return end if end >= moment else end + timedelta(days=1)


def ends_at_block_time(moment: datetime) -> bool:
    moment = utc(moment)
    return (moment.hour, moment.minute, moment.second, moment.microsecond) == (11, 30, 0, 0)


def shortest_block_days(gap_start: datetime, gap_end: datetime) -> int | None:
    """Fewest allowed whole days of a block that ends at 11:30 UTC and spans the gap, or None
    when no single block is long enough."""
    end = next_block_end(gap_end)
    needed = math.ceil((end - utc(gap_start)) / timedelta(days=1))
    return next((days for days in ALLOWED_DURATION_DAYS if days >= needed), None)


def block_search_days(gap_start: datetime, gap_end: datetime, now: datetime) -> int | None:
    """The whole days to search for a block covering the gap: the fewest that span it to the next 11:30 UTC
    (``shortest_block_days``), or, for a gap that starts now, the fewest for which an instant block covers it: a
    search answers a block "slightly less" and one "slightly greater" than the days asked, ending at an 11:30 UTC
    [aws: ec2-cb.instant-start], the greater at the first 11:30 after its start plus those days. So a page at 06:30
    until 15:00 is searched for 1 day (a block until 11:30 the next day), not 2 (one a day longer)."""
    if utc(gap_start) > utc(now) + INSTANT_START_LEAD:
        return shortest_block_days(gap_start, gap_end)
    return next((d for d in ALLOWED_DURATION_DAYS if next_block_end(gap_start + timedelta(days=d)) >= gap_end), None)


def searchable_duration(length: timedelta) -> bool:
    """Whether a block of ``length`` can answer a search for an allowed whole-day duration:
    strictly less than a day shorter or longer than one."""
    return length > timedelta(0) and any(
        abs(length - timedelta(days=days)) < timedelta(days=1) for days in ALLOWED_DURATION_DAYS
    )


def block_offering_problem(
    *, start: datetime, end: datetime, duration_hours: int, count: int, now: datetime, duration_minutes: int = 0
) -> str | None:
    """Why an EC2 Capacity Block offering breaks the market rules, or None when it is sound.

    Offerings come from the API or from a file a person typed; an offering that breaks the
    rules is a sign of a bad input, and buying it would not give what the planner assumed."""
    if not ends_at_block_time(end):
        return f"ends {utc(end):%H:%M} UTC, but blocks end at 11:30 UTC"
    if not 0 <= duration_minutes < 60 or not searchable_duration(
        timedelta(hours=duration_hours, minutes=duration_minutes)
    ):
        return (
            f"duration {duration_hours} h {duration_minutes} min is not within a day of 1-14 days or of 7-day steps "
            "up to 182 days"
        )
    if utc(start) - utc(now) > MAX_START_AHEAD:
        return f"starts {utc(start):%Y-%m-%d}, more than 8 weeks ahead"
    if not 1 <= count <= MAX_INSTANCES_PER_BLOCK:
        return f"{count} instances; a block holds 1-{MAX_INSTANCES_PER_BLOCK}"
    if utc(end) <= utc(start):
        return "ends before it starts"
    return None


def extension_offering_problem(
    *, block_start: datetime, block_end: datetime, end: datetime, now: datetime
) -> str | None:
    """Why a Capacity Block extension cannot be bought now, or None (the block's own rules aside)."""
    if utc(block_end) - utc(now) < EXTENSION_LATEST:
        return f"the block ends {utc(block_end):%Y-%m-%d %H:%M} UTC: extensions are sold until 1 hour before its end"
    if utc(end) - utc(block_start) > MAX_BLOCK_TOTAL:
        return f"the block would last {(utc(end) - utc(block_start)).days} days with it: at most 182 in all"
    return None


def training_plan_search(gap_start: datetime, gap_end: datetime, missing: int) -> tuple[int, int] | None:
    """(DurationHours, InstanceCount) of the search for a training plan covering the gap: its whole hours, and the
    fewest instances a plan offers that cover ``missing``; None when no plan can (over 87,600 hours or 64 instances)."""
    hours = max(1, math.ceil((utc(gap_end) - utc(gap_start)) / timedelta(hours=1)))
    count = next((c for c in TRAINING_PLAN_COUNTS if c >= missing), None)
    return None if hours > TRAINING_PLAN_MAX_HOURS or count is None else (hours, count)


def instant_start_cover_from(occurrence_start: datetime, now: datetime) -> datetime:
    """From when an occurrence can still be covered: its start, or, for one that has begun or
    begins within ``INSTANT_START_LEAD``, that long after ``now`` (an instant-start offering
    starts minutes after it is found; the time already past cannot be bought)."""
    return max(occurrence_start, now + INSTANT_START_LEAD)


def training_plan_offering_problem(*, start: datetime, end: datetime, now: datetime) -> str | None:
    """Training plans have no 11:30 rule (SageMaker aligns them itself) but share the horizon."""
    if utc(start) - utc(now) > MAX_START_AHEAD:
        return f"starts {utc(start):%Y-%m-%d}, more than 8 weeks ahead"
    if utc(end) <= utc(start):
        return "ends before it starts"
    return None
