"""GPU-hour limit periods: one calendar for every backend and for what a member is told.

Periods follow Slurm's PriorityUsageResetPeriod, which clears usage at 00:00 every day, every
Sunday and on the first of each month (https://slurm.schedmd.com/slurm.conf.html); the library
counts in UTC, the time HyperPod clusters keep.
"""

from __future__ import annotations

from datetime import datetime, timedelta

PERIODS = ("day", "week", "month")


def next_reset(period: str, now: datetime) -> datetime:
    """When usage counted over ``period`` next starts again from 0, strictly after ``now``."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return midnight + timedelta(days=1)
    if period == "week":  # Sunday 00:00; datetime counts Monday as 0
        return midnight + timedelta(days=6 - now.weekday() or 7)
    if period == "month":
        first = midnight.replace(day=1)
        return first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)
    raise ValueError(f"period {period!r}: one of {', '.join(PERIODS)}")


def period_start(period: str, now: datetime) -> datetime:
    """When the ``period`` holding ``now`` began: the last reset at or before ``now``."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return midnight
    if period == "week":  # the Sunday 00:00 at or before now
        return midnight - timedelta(days=(now.weekday() + 1) % 7)
    if period == "month":
        return midnight.replace(day=1)
    raise ValueError(f"period {period!r}: one of {', '.join(PERIODS)}")
