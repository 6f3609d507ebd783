"""The reclaim figures on the openb trace with usage-based fair share and with a two-level group
tree (issue 43): goodput against pooled, lost work, breaches (alibaba/clusterdata,
cluster-trace-gpu-v2023/csv: docs/simulator.md, "Getting the openb trace").

    gpu-governance openb-trace openb_pod_list_gpuspec33.csv /tmp/openb115.csv --since-day 115
    python benchmarks/tree_replay.py --trace /tmp/openb115.csv

The pool of benchmarks/openb-lend-and-borrow.yaml (40 x ml.g5.xlarge, serving / platform /
research 20 / 8 / 12, 60 s ticks, its reclaim settings) is replayed flat, as the file declares
it, and with a two-level tree on the same quotas: platform in the group infra (8), infra and
research in the group lab (20), serving outside. ``--headroom`` gives the groups headroom of their
own instead (platform 6, research 10: infra 2 and lab 2 beyond their members'). The tree is added
to the policy document the library compiles from the file and read by the controller's policy
reader (``parse_policy``), the tree ``simulate`` plans. Each runs ordered by what teams borrow now
and by decayed usage (``--half-life-hours``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from constructs_lib.model.loader import load_model  # noqa: E402
from constructs_lib.model.policy import compile_policy  # noqa: E402
from constructs_lib.simulator.engine import compare  # noqa: E402
from constructs_lib.simulator.traces import read_trace  # noqa: E402
from gpu_governance_runtime.policy import PoolPolicy, parse_policy  # noqa: E402

CONFIG = ROOT / "benchmarks" / "openb-lend-and-borrow.yaml"
G5 = "ml.g5.xlarge"
HEADROOM_QUOTAS = {"serving": 20, "platform": 6, "research": 10}
TREE = [
    {"name": "lab", "shares": ["research"], "quota": {G5: 20}},
    {"name": "infra", "shares": ["platform"], "quota": {G5: 8}, "parent": "lab"},
]


def pool(document: dict, *, quotas: dict[str, int] | None = None, groups: list[dict] | None = None) -> PoolPolicy:
    """The openb pool of the compiled document, with other team quotas and a group tree, as the
    controller's reader reads it."""
    entry = document["pools"][0]
    for share in entry["shares"]:
        if quotas:
            share["quota"] = {G5: quotas[share["name"]]}
    if groups is not None:
        entry["groups"] = groups
    return parse_policy(document).pool(entry["name"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True, help="a trace from gpu-governance openb-trace")
    parser.add_argument("--half-life-hours", type=float, default=168.0)
    parser.add_argument("--tick", type=float, default=60.0)
    parser.add_argument("--headroom", action="store_true", help="team quotas 20/6/10 under the same tree")
    args = parser.parse_args()
    model = load_model(CONFIG)
    jobs = read_trace(args.trace, {c.name: c.weight for c in model.priority_classes})
    quotas = HEADROOM_QUOTAS if args.headroom else None
    label = "20/6/10" if args.headroom else "20/8/12"
    pools = {
        f"flat, {label}": pool(compile_policy(model), quotas=quotas),
        f"tree, {label}": pool(compile_policy(model), quotas=quotas, groups=TREE),
    }
    print(
        "| pool | order | goodput | x pooled | preemptions | lost capacity-s (% of all work) | breaches "
        "| platform / research / serving lost h | platform wait p95 (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    total = sum(job.duration * job.count for job in jobs)
    for name, policy in pools.items():
        for order, half_life in (("by borrowed now", None), (f"by usage, {args.half_life_hours:g} h", 1)):
            settings = policy.settings()
            if half_life is not None:
                settings = replace(settings, usage_half_life_s=args.half_life_hours * 3600)
            runs = compare(
                jobs,
                shares=policy.shares,
                capacity=policy.capacity,
                tick_s=args.tick,
                settings=settings,
                groups=policy.groups,
            )
            run, pooled = runs["policy"], runs["pooled"]
            lost = "/".join(
                f"{run.team_lost_capacity_s.get(t, 0) / 3600:,.0f}" for t in ("platform", "research", "serving")
            )
            p95 = run.teams["platform"].wait_p95_s
            print(
                f"| {name} | {order} | {run.goodput:.3f} | {run.goodput / pooled.goodput:.3f} | {run.preemptions} "
                f"| {run.lost_work_capacity_s / 1e6:.2f} M ({100 * run.lost_work_capacity_s / total:.2f} %) "
                f"| {run.guarantee_breaches} | {lost} | {p95:,.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
