"""The rules every kind of capacity shares (times in UTC, the horizon, the states of a reservation,
when instances end), and the calendar of EC2 Capacity Blocks that windows and guarantees are
measured against (durations, the 11:30 UTC end, the instances of one block).

Source: EC2 User Guide, "Capacity Blocks for ML" (durations, lead time, end time, states). Each
kind's own rules (how it is searched, what an offering must look like) are its module's
(``kinds/``).
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

# Blocks run in 1-day steps up to 14 days, then in 7-day steps up to 182 days.
ALLOWED_DURATION_DAYS: tuple[int, ...] = tuple(range(1, 15)) + tuple(range(21, 183, 7))
MAX_START_AHEAD = timedelta(weeks=8)
MAX_INSTANCES_PER_BLOCK = 64
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


def utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"datetime {value.isoformat()} has no time zone; give it in UTC (e.g. ...Z)")
    return value.astimezone(UTC)


def next_block_end(moment: datetime) -> datetime:
    """The first 11:30 UTC at or after ``moment``."""
    moment = utc(moment)
    end = datetime.combine(moment.date(), BLOCK_END_TIME)
    return end if end >= moment else end + timedelta(days=1)


def instant_start_cover_from(occurrence_start: datetime, now: datetime) -> datetime:
    """From when an occurrence can still be covered: its start, or, for one that has begun or
    begins within ``INSTANT_START_LEAD``, that long after ``now`` (an instant-start offering
    starts minutes after it is found; the time already past cannot be bought)."""
    return max(occurrence_start, now + INSTANT_START_LEAD)
