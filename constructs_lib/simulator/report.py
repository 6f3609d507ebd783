"""What a replay prints: the JSON object, the text table and the optional chart."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from constructs_lib.core.errors import GovernanceError, Problem

from .engine import RunMetrics

COMPARED = "compared"  # the policy under the --compare governance file


def comparison_json(results: Mapping[str, RunMetrics]) -> dict[str, Any]:
    result = {
        "policy": results["policy"].as_json(with_breaches=True),
        "baselines": {name: results[name].as_json(with_breaches=False) for name in ("static", "pooled")},
    }
    if COMPARED in results:
        result[COMPARED] = results[COMPARED].as_json(with_breaches=True)
    return result


def table(results: Mapping[str, RunMetrics]) -> str:
    lines = [
        f"{'run':<8} {'util':>6} {'win_util':>8} {'goodput':>8} {'makespan_s':>12} {'done':>6} {'preempt':>8} {'lost_cap_s':>12}"
    ]
    for name, m in results.items():
        lines.append(
            f"{name:<8} {m.utilization:>6.3f} {m.window_utilization:>8.3f} {m.goodput:>8.3f} {m.makespan_s:>12.0f} {m.jobs_completed:>6} {m.preemptions:>8} {m.lost_work_capacity_s:>12.0f}"
        )
    lines.append("")
    lines.append(f"{'team':<12} " + " ".join(f"{name + ' p50/p95 wait s':>28}" for name in results))
    teams = sorted({t for m in results.values() for t in m.teams})
    for team in teams:
        cells = []
        for m in results.values():
            stats = m.teams.get(team)
            cells.append(f"{(f'{stats.wait_p50_s:.0f} / {stats.wait_p95_s:.0f}' if stats else '-'):>28}")
        lines.append(f"{team:<12} " + " ".join(cells))
    lines.append(f"\nguarantee breaches under the policy: {results['policy'].guarantee_breaches}")
    kept = results["policy"].guarantee_kept()
    if kept:
        lines.append(
            "guarantee kept under the policy: "
            + ", ".join(f"{team} {k['kept_percent']} % of {k['asked_h']} h asked" for team, k in kept.items())
        )
    if COMPARED in results:
        lines.append(f"guarantee breaches under the compared configuration: {results[COMPARED].guarantee_breaches}")
    policy = results["policy"]
    if policy.not_restartable:
        lines.append(
            f"{policy.not_restartable} jobs cannot be brought back once stopped (array jobs, jobs others depend on, multi-container jobs): "
            f"they count against their team's quota first; {policy.stopped_for_good} ran beyond it and were stopped for good"
        )
    for name, m in results.items():
        if m.never_runnable:
            lines.append(
                f"{name}: {len(m.never_runnable)} jobs can never run (larger than their team may hold), e.g. {', '.join(m.never_runnable[:3])}"
            )
    return "\n".join(lines)


def load_pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        raise GovernanceError(
            [
                Problem(
                    path="--plot",
                    wrong="matplotlib is not installed",
                    value="matplotlib",
                    allowed="pip install 'cdk-gpu-governance[plot]', or leave out --plot",
                )
            ]
        ) from None
    return pyplot


# Runs in shades of grey, so that they never look like a team (teams take the colour cycle).
RUN_COLOURS = ("#303030", "#808080", "#c0c0c0", "#ffffff")


def write_plot(
    pyplot, results: Mapping[str, RunMetrics], path: Path, *, pool: str, capacity: Mapping[str, int]
) -> None:
    """:func:`figure` as a PNG."""
    chart = figure(pyplot, results, pool=pool, capacity=capacity)
    try:
        chart.savefig(path, dpi=90)
    finally:
        pyplot.close(chart)


def figure(pyplot, results: Mapping[str, RunMetrics], *, pool: str, capacity: Mapping[str, int]):
    """One row per run, one column per instance type of the pool: the instances each team holds
    (stacked) under the pool's capacity, with the same y scale down a column; then each team's
    waiting times per run."""
    teams = sorted({team for m in results.values() for team in m.teams})
    types = sorted(capacity)
    team_colours = dict(
        zip(teams, pyplot.rcParams["axes.prop_cycle"].by_key()["color"] * (len(teams) // 10 + 1), strict=False)
    )
    chart = pyplot.figure(figsize=(max(10, 5.5 * len(types) + 1), 2.8 * (len(results) + 1)), layout="constrained")
    grid = chart.add_gridspec(len(results) + 1, len(types))
    column_axes: dict[str, object] = {}
    for row, (name, metrics) in enumerate(results.items()):
        hours = [t / 3600 for t, _ in metrics.usage_timeline]
        for column, kind in enumerate(types):
            axis = chart.add_subplot(grid[row, column], sharex=column_axes.get(types[0]), sharey=column_axes.get(kind))
            column_axes.setdefault(kind, axis)
            if hours:
                stacks = [[usage.get((team, kind), 0) for _, usage in metrics.usage_timeline] for team in teams]
                axis.stackplot(hours, stacks, labels=teams, colors=[team_colours[t] for t in teams], step="post")
            axis.axhline(
                capacity[kind], color="black", linestyle="--", linewidth=1, label=f"pool capacity ({capacity[kind]})"
            )
            axis.set_ylim(0, capacity[kind] * 1.15)
            axis.set_title(f"{name}: {kind} in use (utilization {metrics.utilization:.2f})", fontsize="medium")
            axis.set_ylabel(f"{kind} instances")
            axis.set_xlabel("hours since the first submission")
            if row == 0 and column == len(types) - 1:
                axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", title=f"pool {pool}")
    from matplotlib.patches import Patch

    waits = chart.add_subplot(grid[len(results), :])
    for offset, metrics in enumerate(results.values()):
        data = [[w / 60 for w in metrics.waits.get(team, ())] or [0.0] for team in teams]
        at = [i * (len(results) + 1) + offset for i in range(len(teams))]
        boxes = waits.boxplot(data, positions=at, widths=0.8, showfliers=False, patch_artist=True)
        for box in boxes["boxes"]:
            box.set_facecolor(RUN_COLOURS[offset % len(RUN_COLOURS)])
            box.set_edgecolor("black")
        for median in boxes["medians"]:
            median.set_color("#d62728" if offset == 0 else "black")
    waits.legend(
        handles=[
            Patch(facecolor=RUN_COLOURS[i % len(RUN_COLOURS)], edgecolor="black", label=name)
            for i, name in enumerate(results)
        ],
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize="small",
        title="run",
    )
    waits.set_xticks([i * (len(results) + 1) + (len(results) - 1) / 2 for i in range(len(teams))], teams)
    waits.set_xlabel("team")
    waits.set_ylabel("wait (minutes)")
    waits.set_title(
        "waiting time per team and run (box: p25-p75, whiskers 1.5 IQR, outliers hidden)", fontsize="medium"
    )
    return chart
