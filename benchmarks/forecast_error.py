"""How far the start-time forecast of `gpu-governance status` is from the truth, on the openb trace
(alibaba/clusterdata, cluster-trace-gpu-v2023/csv: docs/simulator.md, "Getting the openb trace").

    python benchmarks/forecast_error.py --trace openb_pod_list_gpuspec33.csv --every 0.25   # day 115 on
    python benchmarks/forecast_error.py --trace openb_pod_list_gpuspec33.csv --every 1 --since-day 0

The trace (the project's openb importer, constructs_lib.simulator.traces.convert_openb) is
replayed once through the policy of benchmarks/openb-lend-and-borrow.yaml, recording every job's
runs: the truth. At many moments of that replay, every job waiting then is forecast from the pool
as it was then (``forecast.live_pool_at``: what runs, since when, and the queue), with no job
submitted later, and the forecast start is compared with the job's next start in the full replay.
Two kinds of user:

* ``declared``: every job declares its true run time (what is left of its work): the only error
  is the future, jobs submitted after the moment that go ahead (priority, guarantees, reclaim);
* ``history``: no job declares one: run times come from the jobs that finished before the moment
  (``forecast.RunTimes``: per team, the 25th / 50th / 75th percentile of what a job of that age
  still runs), as a real user's forecast has them. The range's coverage is measured too.

Errors are of the wait (start - moment); "within 25 %" is |forecast - actual| <= 25 % of the
actual wait. Prints one table per kind, overall and by the actual wait's length.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from constructs_lib.cli.simulate import pool_policy  # noqa: E402
from constructs_lib.model.loader import load_model  # noqa: E402
from constructs_lib.simulator.engine import simulate  # noqa: E402
from constructs_lib.simulator.forecast import RunTimes, forecast, live_pool_at, next_start  # noqa: E402
from constructs_lib.simulator.traces import convert_openb  # noqa: E402

CONFIG = ROOT / "benchmarks" / "openb-lend-and-borrow.yaml"
BUCKETS = (
    (0, 600, "< 10 min"),
    (600, 3_600, "10 min - 1 h"),
    (3_600, 21_600, "1 - 6 h"),
    (21_600, float("inf"), ">= 6 h"),
)


def percentile(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(-(-len(ordered) * percent // 100)) - 1))]


def measure(
    jobs, full, policy, moments, *, declared: bool, tick_s: float
) -> list[tuple[float, float | None, float, float | None, float | None]]:
    """(actual wait, likely, earliest, latest) per job waiting at each moment."""
    rows = []
    for moment in moments:
        live = live_pool_at(jobs, full, moment, declared=declared)
        targets = [j.job_id for j in live.jobs if not j.running and next_start(full, j.job_id, moment) is not None]
        if not targets:
            continue
        history = None
        if not declared:  # what had finished by then: the user's history
            finished = [j for j in jobs if (runs := full.runs.get(j.job_id)) and runs[-1][1] <= moment]
            history = RunTimes.from_trace(finished)
        found = forecast(policy, live, targets, history=history, tick_s=tick_s, alternatives=False)
        for job_id in targets:
            f = found[job_id]
            actual = next_start(full, job_id, moment) - moment
            rows.append((actual, f.likely_s, f.earliest_s, f.latest_s))
    return rows


def report(kind: str, rows) -> None:
    print(f"\n{kind}: {len(rows)} forecasts")
    print(
        f"{'actual wait':<14} {'n':>6} {'unknown':>8} {'median abs err':>15} {'p90 abs err':>12} {'median rel':>11} {'within 25 %':>12} {'in range':>9}"
    )
    for low, high, label in ((0, float("inf"), "all"), *BUCKETS):
        chosen = [r for r in rows if low <= r[0] < high]
        known = [r for r in chosen if r[1] is not None]
        if not chosen:
            continue
        errors = [abs(r[1] - r[0]) for r in known]
        relative = [abs(r[1] - r[0]) / max(r[0], 60.0) for r in known]
        within = sum(1 for r in known if abs(r[1] - r[0]) <= 0.25 * max(r[0], 60.0))
        in_range = sum(1 for r in known if (r[2] or 0) - 60 <= r[0] <= (float("inf") if r[3] is None else r[3] + 60))
        print(
            f"{label:<14} {len(chosen):>6} {100 * (len(chosen) - len(known)) / len(chosen):>7.1f}% "
            f"{_span(statistics.median(errors)) if errors else '-':>15} {_span(percentile(errors, 90)) if errors else '-':>12} "
            f"{100 * statistics.median(relative) if relative else 0:>10.0f}% "
            f"{100 * within / max(1, len(known)):>11.1f}% {100 * in_range / max(1, len(known)):>8.1f}%"
        )


def _span(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 600
        else f"{seconds / 60:.0f} min"
        if seconds < 7_200
        else f"{seconds / 3600:.1f} h"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True, help="an openb pod list (openb_pod_list_*.csv)")
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--since-day", type=float, default=115.0, help="keep the tasks created from this day on")
    parser.add_argument("--every", type=float, default=0.25, help="hours between two forecast moments")
    parser.add_argument("--tick", type=float, default=60.0)
    args = parser.parse_args()
    jobs = [j for j in convert_openb(args.trace) if j.submit_time >= args.since_day * 86_400]
    policy = pool_policy(load_model(args.config), None)
    started = time.perf_counter()
    full = simulate(
        jobs,
        shares=policy.shares,
        capacity=policy.capacity,
        tick_s=args.tick,
        settings=policy.settings(),
        record_runs=True,
        groups=policy.groups,
    )
    first, last = min(j.submit_time for j in jobs), max(j.submit_time for j in jobs)
    moments = [first + n * args.every * 3_600 + 0.5 for n in range(int((last - first) // (args.every * 3_600)) + 1)]
    print(
        f"{args.trace.name} from day {args.since_day:g}: {len(jobs)} jobs, {(last - first) / 86_400:.1f} days, "
        f"pool {policy.name} {policy.capacity}; replayed in {time.perf_counter() - started:.1f} s; "
        f"{len(moments)} moments, every {args.every:g} h"
    )
    for kind, declared in (("declared run times", True), ("history only", False)):
        started = time.perf_counter()
        rows = measure(jobs, full, policy, moments, declared=declared, tick_s=args.tick)
        report(kind, rows)
        print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
