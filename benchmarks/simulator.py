"""How fast `gpu-governance simulate` replays: all three replays (policy, static, pooled) in one
process over one parsed trace, as the command runs them.

    python benchmarks/simulator.py --jobs 100000          # jobs/s and peak memory
    python benchmarks/simulator.py --jobs 1000000         # the one-million-job figure

The trace: Poisson arrivals at about 90 % of a 64-instance pool's capacity, three teams shaped
like examples/openb-governance.yaml (serving, platform, research), 1-4 instances per job,
exponential durations (mean 20 minutes). Peak memory is the process's maximum resident set size
(trace generation included). Also prints the openb replay time when given --openb TRACE.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from constructs_lib.cli.simulate import pool_shares  # noqa: E402
from constructs_lib.model.loader import load_model  # noqa: E402
from constructs_lib.simulator import compare, read_trace  # noqa: E402
from constructs_lib.simulator.traces import TraceJob  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Settings  # noqa: E402

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
            TraceJob(
                job_id=f"j{n}",
                team=team,
                submit_time=round(clock, 3),
                duration=round(rng.expovariate(1 / mean_duration), 3) + 1,
                instance_type=instance_type,
                count=rng.choice((1, 1, 2, 4, 4)),
                priority=priority,
                checkpointable=checkpointable,
            )
        )
    return trace


def replay(label: str, trace, config: Path) -> None:
    shares, capacity = pool_shares(load_model(config), None)
    started, cpu = time.perf_counter(), time.process_time()
    results = compare(trace, shares=shares, capacity=capacity, tick_s=60, settings=Settings())
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    policy = results["policy"]
    print(
        f"{label}: jobs={len(trace)} three_replays_s={seconds:.1f} cpu_s={cpu:.1f} jobs_per_second_per_replay={3 * len(trace) / seconds:,.0f} "
        f"policy_window_utilization={policy.window_utilization:.3f} preemptions={policy.preemptions} "
        f"peak_rss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} load_average={os.getloadavg()[0]:.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--openb", metavar="TRACE", help="also replay this trace with --openb-config")
    parser.add_argument("--openb-config", default=str(ROOT / "benchmarks" / "openb-lend-and-borrow.yaml"))
    args = parser.parse_args()
    if args.openb:
        replay("openb", read_trace(args.openb), Path(args.openb_config))
    if args.jobs:
        config = ROOT / "examples" / "openb-governance.yaml"
        _, capacity = pool_shares(load_model(config), None)
        ((instance_type, size),) = capacity.items()
        replay("synthetic", synthetic_trace(args.jobs, size, instance_type), config)


if __name__ == "__main__":
    main()
