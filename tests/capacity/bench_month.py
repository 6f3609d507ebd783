"""Benchmark: a simulated month of capacity windows (tests/capacity/simulated_month.py) measured by the jobs on each
block (issue 40), with faults at the purchase call, throttled Batch updates and a lagging listing; work sized to the
windows (each window's and request's own jobs, background at ``--load`` of the on-demand pool). Prints per window and
in all the instance-hours paid, with a job, cut at a block's end, idle while work waited or ran elsewhere, idle with no
work; what was declined for yield; the invariants' findings; and, for each seed, the offline optimum for the same
work and offerings beside it (tests/capacity/offline_optimum.py).

    python -m tests.capacity.bench_month [--days 30] [--seeds 0 1 2] [--load 0.8] [--on-demand 4] [--min-yield 0]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

from .builders import NOW
from .offline_optimum import optimum, schedule
from .simulated_month import BlockHours, Month, in_memory_ledger, windows


def line(name: str, h: BlockHours) -> str:
    share = (lambda x: f"{x / h.paid * 100:5.1f} %") if h.paid else (lambda x: "    -  ")
    return (
        f"  {name:<22} paid {h.paid:7.1f}  with a job {h.with_job:7.1f}  cut {h.cut:6.1f} ({share(h.cut)})  "
        f"idle, work waited/elsewhere {h.idle_waited:6.1f} ({share(h.idle_waited)})  "
        f"idle, no work {h.idle_none:6.1f} ({share(h.idle_none)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--on-demand", type=int, default=4)
    parser.add_argument(
        "--min-yield", type=Decimal, help="every window's min_yield (default: the governance file's, 0.5)"
    )
    args = parser.parse_args()
    for seed in args.seeds:
        started, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):  # the controller's metric and log lines
            declared = windows()
            if args.min_yield is not None:
                declared = [replace(w, min_yield=args.min_yield) for w in declared]
            month = Month(
                ledger=in_memory_ledger(),
                days=args.days,
                seed=seed,
                load=args.load,
                on_demand=args.on_demand,
                declared_windows=declared,
            ).play()
        print(
            f"seed {seed}: {args.days} simulated days, {month.runs} controller runs, {len(month.sim.made)} purchases, "
            f"{len(month.jobs)} jobs ({sum(j.hours for j in month.jobs):.0f} instance-hours of work), "
            f"{time.perf_counter() - started:.0f} s ({time.process_time() - cpu:.0f} s CPU)"
        )
        figures = month.figures()
        for name, hours in sorted(figures.items()):
            print(line(name, hours))
        total = BlockHours()
        for hours in figures.values():
            total = total.add(hours)
        print(line("all blocks", total))
        end = NOW + timedelta(days=args.days)
        for declined in month.declined():  # recorded once per occurrence; the month's own, not those beyond it
            if datetime.strptime(declined["occurrence"].split("@")[1], "%Y%m%dT%H%M%z") < end:
                print(f"  declined {declined['occurrence']}: {declined['reason']}")
        print(
            f"  jobs lost with their instance: {len(month.lost_jobs)}; invariant violations: {month.check() or 'none'}"
        )
        needs = month.needs()
        pools = {"on_demand": args.on_demand, "eks_on_demand": month.eks_on_demand}
        chosen = optimum(month.jobs, needs, **pools, start=NOW, end=end)
        best = sum(schedule(month.jobs, chosen, **pools, start=NOW, end=end).values())
        controller = total.idle_waited + total.idle_none
        print(
            f"  offline optimum for the same {len(needs)} need(s): "
            + "; ".join(f"{b.need}: {b.count} x {b.start:%m-%d %H:%M}-{b.end:%m-%d %H:%M} ({b.how})" for b in chosen)
        )
        print(
            f"  idle block instance-hours: controller {controller:.1f}, offline optimum {best:.1f}"
            + (f", ratio {controller / best:.2f}" if best else "")
        )


if __name__ == "__main__":
    main()
