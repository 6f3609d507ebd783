"""GPU-hour limit periods: one calendar for every backend and for what a member is told.

Periods follow Slurm's PriorityUsageResetPeriod, which clears usage at 00:00 every day, every
Sunday and on the first of each month (https://slurm.schedmd.com/slurm.conf.html); the library
counts in UTC, the time HyperPod clusters keep.
"""

from __future__ import annotations

from datetime import datetime, timedelta

PERIODS = ("day", "week", "month")

# GPUs of one SageMaker training instance, for Batch quota-share pools (their capacity limits count
# instances and the governance file declares no GPUs there): the accelerated computing types of
# https://aws.amazon.com/sagemaker/ai/pricing/ (instance details). A pool's own ``gpus_per_instance`` wins.
TRAINING_INSTANCE_GPUS = {
    "ml.p3.2xlarge": 1,
    "ml.p3.8xlarge": 4,
    "ml.p3.16xlarge": 8,
    "ml.p3dn.24xlarge": 8,
    "ml.p4d.24xlarge": 8,
    "ml.p4de.24xlarge": 8,
    "ml.p5.48xlarge": 8,
    "ml.p5e.48xlarge": 8,
    "ml.p5en.48xlarge": 8,
    "ml.p6-b200.48xlarge": 8,
    **{
        f"ml.{family}.{size}": 1
        for family in ("g5", "g6", "g6e")
        for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")
    },
    **{f"ml.{family}.{size}": 4 for family in ("g5", "g6", "g6e") for size in ("12xlarge", "24xlarge")},
    **{f"ml.{family}.48xlarge": 8 for family in ("g5", "g6", "g6e")},
}


def next_reset(period: str, now: datetime) -> datetime:
    """When usage counted over ``period`` next starts again from 0, strictly after ``now``."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return midnight + timedelta(days=1)
    if period == "week":  # Sunday 00:00; datetime counts Monday as 0
        return midnight + timedelta(days=6 - now.weekday() or 7)
    if period == "month":
        first = midnight.replace(day=1)
        return (
            first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)
        )
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
