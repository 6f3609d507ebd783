"""Planner speed on realistic market sizes: `python -m tests.capacity.bench_planner`.

The search is exhaustive over combinations of up to three offerings per occurrence, so its cost
grows with the cube of the offerings that overlap one occurrence; this prints how far that goes.
"""

import random
import time
from decimal import Decimal

from gpu_governance_runtime.planners.capacity import plan

from .builders import NOW, at, block, window


def main() -> None:
    rng = random.Random(7)
    w = window(start=at(2, 12, 0), duration_hours=20 * 24, budget=Decimal("10000000"), repeat_every_days=None)
    print("offerings  seconds  purchases")
    for size in (10, 20, 40, 60):
        offerings = [
            block(
                f"cbo-{i:03d}",
                at(rng.randint(1, 12)),
                rng.choice([1, 2, 7, 14, 21]),
                per_hour=str(rng.randint(25, 39)),
                count=rng.choice([2, 4]),
                zone=rng.choice(["us-east-1a", "us-east-1b"]),
            )
            for i in range(size)
        ]
        started = time.perf_counter()
        result = plan(windows=[w], reservations=[], offerings=offerings, spent={}, now=NOW)
        print(f"{size:9d}  {time.perf_counter() - started:7.3f}  {len(result.purchases):9d}")


if __name__ == "__main__":
    main()
