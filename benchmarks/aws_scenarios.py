"""The controllers on the AWS model for a simulated month, faults injected at every call boundary,
invariants checked after every step (tests/aws_model/scenario.py, block_scenario.py,
slurm_scenario.py): `PYTHONPATH=.:lambda python benchmarks/aws_scenarios.py [backend ...] [--days N]`,
backends ``reclaim`` (Batch fair-share reclaim, one-minute ticks), ``block`` (Capacity Block
requeue on Batch), ``slurm`` (the Slurm window over SSM); all by default.

The ledgers are the in-memory DynamoDB model (tests/aws_model/dynamodb.py). Prints what happened
and simulated days per minute of wall time per backend. Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from tests.aws_model import block_scenario, scenario, slurm_scenario

SCENARIOS = {"reclaim": scenario.run, "block": block_scenario.run, "slurm": slurm_scenario.run}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backends", nargs="*", choices=list(SCENARIOS))
    parser.add_argument("--days", type=float, default=30.0)
    arguments = parser.parse_args()
    for backend in arguments.backends or SCENARIOS:
        started, cpu = time.perf_counter(), time.process_time()
        report = SCENARIOS[backend](days=arguments.days, seed=2026)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        print(
            f"{backend}: {arguments.days:g} simulated days, {report.summary()}, faults {dict(report.faults)}: every invariant held"
        )
        # the machine is shared: CPU time says what the run costs, wall time what it took under the load of the day
        print(
            f"{backend}: {seconds:.0f} s wall ({arguments.days / (seconds / 60):.2f} simulated days per minute), "
            f"{cpu:.0f} s CPU ({arguments.days / (cpu / 60):.2f} simulated days per CPU minute)",
            flush=True,
        )


if __name__ == "__main__":
    main()
