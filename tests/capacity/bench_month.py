"""Benchmark: a simulated month of capacity windows (tests/capacity/simulated_month.py), with
faults at the purchase call, lost expiration warnings and a lagging listing. Prints the
invariants' findings and the paid-but-idle instance-hours per window.

    python -m tests.capacity.bench_month [--days 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time

from .simulated_month import Month, in_memory_ledger


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the controller's metric and log lines
        month = Month(ledger=in_memory_ledger(), days=args.days, seed=args.seed).play()
    seconds = time.perf_counter() - started
    print(f"{args.days} simulated days, {month.runs} controller runs, {len(month.sim.made)} purchases, {seconds:.0f} s")
    jobs = month.batch.jobs.values()
    on_block = sum(1 for j in jobs if j.get("_environment", "").endswith("-block"))
    print(
        f"Batch: {month.jobs_submitted} jobs submitted, {on_block} placed on a block, "
        f"{sum(1 for j in jobs if j['status'] == 'SUCCEEDED')} succeeded, {month.rotation_errors} rotation steps refused (retried)"
    )
    print(f"invariant violations: {month.check() or 'none'}")
    for name, (paid, idle) in sorted(month.paid_idle().items()):
        print(
            f"{name}: {paid:.0f} instance-hours paid, {idle:.0f} paid but idle ({(idle / paid * 100 if paid else 0):.0f} %)"
        )


if __name__ == "__main__":
    main()
