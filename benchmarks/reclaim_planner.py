"""How long one reclaim planner tick takes, from 1,000 to 60,000 jobs, over 20 and 1,000 shares.

    python benchmarks/reclaim_planner.py            # the table in docs/performance.md
    python benchmarks/reclaim_planner.py --quick    # smaller sizes, a few seconds

One sixth of the jobs run, the rest wait. The pool is full (so pending jobs within their
guarantee must reclaim) and every share has a quota, half lend-and-borrow with in-share
preemption. Prints the best of three runs, measured with time.perf_counter on one core.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lambda"))

from gpu_governance_runtime.planners.reclaim import (  # noqa: E402
    PendingJob,
    PoolState,
    RunningJob,
    Settings,
    Share,
    Strategy,
    plan_tick,
)

TYPES = ("ml.p5.48xlarge", "ml.g6e.12xlarge")


def make_state(jobs: int, shares: int, seed: int = 7) -> PoolState:
    rng = random.Random(seed)
    running_count, pending_count = jobs // 6, jobs - jobs // 6
    capacity = {t: running_count * 2 for t in TYPES}  # mean job size 2 -> full when all run
    quota_each = {t: capacity[t] * 3 // (4 * shares) for t in TYPES}
    team_shares = tuple(
        Share(
            name=f"team{i:04d}",
            quota=dict(quota_each),
            strategy=Strategy.LEND_AND_BORROW if i % 2 else Strategy.LEND,
            in_share_preemption=bool(i % 2),
            fair_share_weight=1 + i % 10,
        )
        for i in range(shares)
    )
    used = dict.fromkeys(TYPES, 0)
    usage: dict[tuple[str, str], int] = {}
    running = []
    for n in range(running_count):
        t = TYPES[n % 2]
        # borrowers (odd shares) hold most of the pool so that lenders' jobs must reclaim
        share = team_shares[rng.randrange(shares // 2) * 2 + 1] if shares > 1 else team_shares[0]
        count = rng.choice((1, 2, 3))
        if used[t] + count > capacity[t]:
            continue
        used[t] += count
        usage[share.name, t] = usage.get((share.name, t), 0) + count
        running.append(
            RunningJob(
                job_id=f"r{n}",
                share=share.name,
                instance_type=t,
                count=count,
                priority=rng.randrange(4),
                started_at=rng.uniform(0, 9_000),
                checkpointable=rng.random() < 0.5,
            )
        )
    pending = [
        PendingJob(
            job_id=f"p{n}",
            share=team_shares[rng.randrange(shares)].name,
            instance_type=TYPES[n % 2],
            count=rng.choice((1, 2, 4, 8)),
            priority=rng.randrange(4),
            submitted_at=rng.uniform(0, 10_000),
        )
        for n in range(pending_count)
    ]
    return PoolState(
        capacity=capacity, shares=team_shares, running=tuple(running), pending=tuple(pending), now=10_000.0
    )


def measure(jobs: int, shares: int) -> tuple[float, int, int]:
    state = make_state(jobs, shares)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        plan = plan_tick(state, Settings())
        best = min(best, time.perf_counter() - started)
    return best, len(plan.starts), len(plan.preemptions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = (1_000, 6_000) if args.quick else (1_000, 6_000, 15_000, 30_000, 60_000)
    print(f"{'jobs':>7} {'running':>8} {'pending':>8} {'shares':>7} {'tick_ms':>9} {'starts':>7} {'preempt':>8}")
    for shares in (20, 1_000):
        for jobs in sizes:
            seconds, starts, preemptions = measure(jobs, shares)
            print(
                f"{jobs:>7} {jobs // 6:>8} {jobs - jobs // 6:>8} {shares:>7} {seconds * 1000:>9.1f} {starts:>7} {preemptions:>8}",
                flush=True,
            )


if __name__ == "__main__":
    main()
