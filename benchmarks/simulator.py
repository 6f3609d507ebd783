"""How many jobs per second `gpu-governance simulate` replays, on a synthetic trace.

    python benchmarks/simulator.py --jobs 100000          # one policy run, prints jobs/s
    python benchmarks/simulator.py --jobs 1000000         # the one-million-job figure

The trace: Poisson arrivals at about 90 % of a 64-instance pool's capacity, three teams shaped
like examples/openb-governance.yaml (serving, platform, research), 1-4 instances per job,
exponential durations (mean 20 minutes). Times the policy run only (the baselines cost about
the same each).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from constructs_lib.loader import load_model  # noqa: E402
from constructs_lib.simulator import simulate
from constructs_lib.simulator.cli import pool_shares  # noqa: E402
from constructs_lib.simulator.traces import TraceJob  # noqa: E402
from gpu_governance_runtime.reclaim.planner import Settings  # noqa: E402

TEAMS = (("serving", 90, False, 0.5), ("platform", 50, False, 0.2), ("research", 10, True, 0.3))


def synthetic_trace(jobs: int, capacity: int, instance_type: str, seed: int = 11) -> list[TraceJob]:
    rng = random.Random(seed)
    mean_duration, mean_count = 1_200.0, 2.5
    arrival_rate = 0.9 * capacity / (mean_duration * mean_count)
    clock, trace = 0.0, []
    for n in range(jobs):
        clock += rng.expovariate(arrival_rate)
        team, priority, checkpointable, _ = rng.choices(TEAMS, weights=[t[3] for t in TEAMS])[0]
        trace.append(
            TraceJob(job_id=f"j{n}", team=team, submit_time=round(clock, 3), duration=round(rng.expovariate(1 / mean_duration), 3) + 1,
                     instance_type=instance_type, count=rng.choice((1, 1, 2, 4, 4)), priority=priority, checkpointable=checkpointable)
        )
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    shares, capacity = pool_shares(load_model(ROOT / "examples" / "openb-governance.yaml"), None)
    (instance_type, size), = capacity.items()
    trace = synthetic_trace(args.jobs, size, instance_type)
    started = time.perf_counter()
    result = simulate(trace, shares=shares, capacity=capacity, tick_s=60, settings=Settings())
    seconds = time.perf_counter() - started
    print(f"jobs={args.jobs} seconds={seconds:.1f} jobs_per_second={args.jobs / seconds:,.0f} "
          f"utilization={result.utilization:.3f} preemptions={result.preemptions} completed={result.jobs_completed}")


if __name__ == "__main__":
    main()
