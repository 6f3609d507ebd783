"""What ordering borrowers by decayed usage changes for each team, on the openb trace
(alibaba/clusterdata, cluster-trace-gpu-v2023/csv: docs/simulator.md, "Getting the openb trace").

    gpu-governance openb-trace openb_pod_list_gpuspec33.csv /tmp/openb115.csv --since-day 115
    python benchmarks/fair_share.py --trace /tmp/openb115.csv --half-life-hours 24 168

The policy of benchmarks/openb-lend-and-borrow.yaml is replayed (60 s ticks, its reclaim settings)
once as the file orders borrowers (by what each borrows now) and once per half-life with
``reclaim.fair_share: {by: usage, half_life_hours: H}`` (docs/governance-file.md#fair-share). Per
team: the instance-hours its jobs held (each ml.g5.xlarge has one GPU: GPU-hours), its wait p50 /
p95, the work it lost to preemptions and the hours its guarantee was breached; then the pool's
goodput, preemptions and lost work.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from constructs_lib.cli.simulate import pool_policy  # noqa: E402
from constructs_lib.model.loader import load_model  # noqa: E402
from constructs_lib.simulator.engine import RunMetrics, simulate  # noqa: E402
from constructs_lib.simulator.traces import read_trace  # noqa: E402

CONFIG = ROOT / "benchmarks" / "openb-lend-and-borrow.yaml"


def _wait(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:,.0f}"


def rows(name: str, run: RunMetrics) -> list[str]:
    lines = []
    for team, stats in sorted(run.teams.items()):
        used = run.team_used_capacity_s.get(team, 0.0) / 3600
        lost = run.team_lost_capacity_s.get(team, 0.0) / 3600
        breached = run.guarantee_breached_s.get(team, 0.0) / 3600
        lines.append(
            f"| {name} | {team} | {used:,.0f} | {_wait(stats.wait_p50_s)} / {_wait(stats.wait_p95_s)} "
            f"| {lost:,.0f} | {breached:,.1f} |"
        )
    lines.append(
        f"| {name} | (pool) | goodput {run.goodput:.3f} | {run.preemptions} preemptions "
        f"| {run.lost_work_capacity_s / 3600:,.0f} | {run.guarantee_breaches} breach ticks |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True, help="a trace from gpu-governance openb-trace")
    parser.add_argument("--half-life-hours", type=float, nargs="+", default=[168.0])
    parser.add_argument("--tick", type=float, default=60.0)
    args = parser.parse_args()
    model = load_model(CONFIG)
    pool = pool_policy(model, None)
    jobs = read_trace(args.trace, {c.name: c.weight for c in model.priority_classes})
    runs = {"by borrowed now": pool.settings()}
    for hours in args.half_life_hours:
        runs[f"by usage, half-life {hours:g} h"] = replace(pool.settings(), usage_half_life_s=hours * 3600)
    print("| order | team | instance-hours held | wait p50 / p95 (s) | lost instance-hours | guarantee breached (h) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, settings in runs.items():
        run = simulate(jobs, shares=pool.shares, capacity=pool.capacity, tick_s=args.tick, settings=settings)
        print("\n".join(rows(name, run)), flush=True)


if __name__ == "__main__":
    main()
