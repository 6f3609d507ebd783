"""The controllers on the AWS model, faults injected at every call boundary, invariants checked after
every step (tests/aws_model/scenario.py, gpu_hours_scenario.py, block_scenario.py, slurm_scenario.py,
guard_scenario.py):

    PYTHONPATH=.:lambda python benchmarks/aws_scenarios.py [SCENARIO ...] [--days N] [--seeds N]

Every scenario by default (`make bench`). The month-long ones (``reclaim``: Batch fair-share reclaim on
the steady workload, ``block``: Capacity Block requeue on Batch, ``slurm``: the Slurm window over SSM)
run 30 days on seed 2026; the others run many seeds (``--seeds``, 20 by default) of their own span, the
span `make test` runs on three seeds or fewer: ``reclaim-busy`` (6 hours of contention), ``reclaim-grace``
(the same with a 5-minute grace), ``reclaim-dry-run`` (an hour acting, then dry run with a preemption
open), ``gpu-hours-quota-share`` and ``gpu-hours-compute-quota`` (2 days of GPU-hour limits), ``guard``
and ``guard-dry-run`` (6 hours of service jobs past the submission guard, acting and in dry run),
``capacity-purchase`` (4 days of Capacity Block purchases, auto and with approval: purchase_scenario.py).

The ledgers are the in-memory DynamoDB model (tests/aws_model/dynamodb.py). Prints what happened, the
faults drawn, and simulated days per CPU minute per scenario. Figures go to docs/testing.md and
docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from tests.aws_model import (
    block_scenario,
    gpu_hours_scenario,
    guard_scenario,
    purchase_scenario,
    scenario,
    slurm_scenario,
)


@dataclass(frozen=True)
class Scenario:
    run: Any
    days: float
    options: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] | None = None  # None: --seeds of them, from 1


SCENARIOS = {
    "reclaim": Scenario(scenario.run, 30.0, seeds=(2026,)),
    "block": Scenario(block_scenario.run, 30.0, seeds=(2026,)),
    "slurm": Scenario(slurm_scenario.run, 30.0, seeds=(2026,)),
    "reclaim-busy": Scenario(scenario.run, 0.25, {"workload": scenario.BUSY}),
    "reclaim-grace": Scenario(scenario.run, 0.25, {"workload": scenario.BUSY, "grace_s": 300.0}),
    "reclaim-dry-run": Scenario(scenario.run, 0.25, {"workload": scenario.BUSY, "dry_run_after": 1 / 24}),
    "gpu-hours-quota-share": Scenario(gpu_hours_scenario.run, 2.0, {"backend": "quota_share"}),
    "gpu-hours-compute-quota": Scenario(gpu_hours_scenario.run, 2.0, {"backend": "compute_quota"}),
    "guard": Scenario(guard_scenario.run, 0.25),
    "guard-dry-run": Scenario(guard_scenario.run, 0.25, {"dry_run": True}),
    "capacity-purchase": Scenario(purchase_scenario.run, 4.0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"any of {', '.join(SCENARIOS)} (all)")
    parser.add_argument("--days", type=float, help="simulated days of each run (each scenario's own span)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds of the many-seed scenarios (20)")
    arguments = parser.parse_args()
    unknown = [s for s in arguments.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"scenario {unknown[0]!r}: one of {', '.join(SCENARIOS)}")
    for name in arguments.scenarios or SCENARIOS:
        chosen = SCENARIOS[name]
        days = arguments.days or chosen.days
        seeds = chosen.seeds or tuple(range(1, arguments.seeds + 1))
        started, cpu = time.perf_counter(), time.process_time()
        total = scenario.summed(_run(name, chosen, days, seed) for seed in seeds)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        faults = Counter(f if isinstance(f, str) else f[-1] for f in total.faults.elements())  # the kind of fault
        # the machine is shared: CPU time says what the runs cost, wall time what they took under the load of the day
        print(
            f"{name}: {len(seeds)} seeds x {days:g} days, in all {total.summary()}, faults {dict(faults)}: every "
            f"invariant held; {seconds:.0f} s wall, {cpu:.0f} s CPU "
            f"({days * len(seeds) / (cpu / 60):.2f} simulated days per CPU minute)",
            flush=True,
        )


def _run(name: str, chosen: Scenario, days: float, seed: int) -> Any:
    report = chosen.run(days=days, seed=seed, **chosen.options)
    print(f"{name} seed {seed}: {days:g} simulated days, {report.summary()}", flush=True)
    return report


if __name__ == "__main__":
    main()
