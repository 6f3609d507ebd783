"""The capacity planner on 1,000 windows against 10,000 offerings:
`PYTHONPATH=.:lambda python benchmarks/capacity_planner.py`.

Windows of 2 to 72 hours (a third recurring weekly) for 8 instance types start anywhere in the
next 8 weeks; offerings of the same types start anywhere in that time, end at 11:30 UTC and last
from a few hours (instant starts and same-day blocks) to 14 days, as AWS shapes them. Figures
go to docs/performance.md.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpu_governance_runtime.planners import market
from gpu_governance_runtime.planners.capacity import Offering, Window, plan

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TYPES = (
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p4d.24xlarge",
    "p6-b200.48xlarge",
    "g6e.48xlarge",
    "trn2.48xlarge",
    "g5.48xlarge",
)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def windows(rng: random.Random, count: int) -> list[Window]:
    return [
        Window(
            name=f"w{i:04d}",
            team=f"team-{i % 40}",
            market="capacity_block",
            instance_type=rng.choice(TYPES),
            instance_count=rng.choice((1, 2, 4, 8)),
            start=NOW + timedelta(hours=rng.randint(0, 55 * 24)),
            duration_hours=rng.choice((2, 4, 6, 8, 12, 24, 48, 72)),
            repeat_every_days=7 if i % 3 == 0 else None,
            availability_zones=(),
            max_price_per_instance_hour=Decimal(rng.randint(28, 40)),
            budget=Decimal(rng.randint(5, 60) * 1000),
            budget_period="month",
            buy_ahead_days=56,
            prefer_extension=False,
            mode="dry_run",
        )
        for i in range(count)
    ]


def offerings(rng: random.Random, count: int) -> list[Offering]:
    found = []
    for i in range(count):
        end = market.next_block_end(NOW + timedelta(hours=rng.randint(3, 56 * 24)))
        length = rng.choice(
            (timedelta(hours=rng.randint(2, 23), minutes=rng.choice((0, 5, 35))), timedelta(days=rng.randint(1, 14)))
        )
        start = max(end - length, NOW + timedelta(minutes=5))
        hours, rest = divmod(end - start, timedelta(hours=1))
        instances = rng.choice((1, 2, 4, 8))
        fee = (
            Decimal(rng.randint(25, 39)) * instances * (hours + Decimal(rest // timedelta(minutes=1)) / 60)
        ).quantize(Decimal("0.01"))
        found.append(
            Offering(
                id=f"cbo-{i:05d}",
                kind="block",
                instance_type=rng.choice(TYPES),
                count=instances,
                availability_zone=rng.choice(ZONES),
                start=start,
                end=end,
                duration_hours=hours,
                duration_minutes=rest // timedelta(minutes=1),
                upfront_fee=fee,
            )
        )
    return found


def main() -> None:
    print("windows  offerings  occurrences  cpu seconds  purchases  uncovered")
    for window_count, offering_count in ((100, 1000), (1000, 10000)):
        rng = random.Random(14)
        ws, os_ = windows(rng, window_count), offerings(rng, offering_count)
        occurrences = sum(len(w.occurrences(NOW)) for w in ws)
        started = time.process_time()  # CPU time: the machine running it may be shared
        result = plan(windows=ws, reservations=[], offerings=os_, spent={}, now=NOW)
        seconds = time.process_time() - started
        print(
            f"{window_count:7d}  {offering_count:9d}  {occurrences:11d}  {seconds:11.2f}  {len(result.purchases):9d}  {len(result.uncovered):9d}"
        )


if __name__ == "__main__":
    main()
