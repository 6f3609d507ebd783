"""What a replay prints: the JSON object, the text table and the optional chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

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
    lines = [f"{'run':<8} {'util':>6} {'win_util':>8} {'goodput':>8} {'makespan_s':>12} {'done':>6} {'preempt':>8} {'lost_cap_s':>12}"]
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
    if COMPARED in results:
        lines.append(f"guarantee breaches under the compared configuration: {results[COMPARED].guarantee_breaches}")
    for name, m in results.items():
        if m.never_runnable:
            lines.append(f"{name}: {len(m.never_runnable)} jobs can never run (larger than their team may hold), e.g. {', '.join(m.never_runnable[:3])}")
    return "\n".join(lines)


def load_pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        raise GovernanceError([Problem(path="--plot", wrong="matplotlib is not installed", value="matplotlib", allowed="pip install 'cdk-gpu-governance[plot]', or leave out --plot")]) from None
    return pyplot


def write_plot(pyplot, results: Mapping[str, RunMetrics], path: Path) -> None:
    """Capacity in use over time per team for each run, then each team's waiting times."""
    teams = sorted({team for m in results.values() for team in m.teams})
    figure, axes = pyplot.subplots(len(results) + 1, 1, figsize=(11, 3.2 * (len(results) + 1)))
    for axis, (name, metrics) in zip(axes, results.items()):
        times = [t / 3600 for t, _ in metrics.usage_timeline]
        stacks = [[usage.get(team, 0) for _, usage in metrics.usage_timeline] for team in teams]
        if times:
            axis.stackplot(times, stacks, labels=teams, step="post")
        axis.set_title(f"{name}: capacity in use (utilization {metrics.utilization:.2f})")
        axis.set_ylabel("instances")
        axis.legend(loc="upper right", fontsize="small")
    from matplotlib.patches import Patch

    waits = axes[-1]
    colours = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
    for offset, (name, metrics) in enumerate(results.items()):
        data = [[w / 60 for w in metrics.waits.get(team, ())] or [0.0] for team in teams]
        at = [i * (len(results) + 1) + offset for i in range(len(teams))]
        boxes = waits.boxplot(data, positions=at, widths=0.8, showfliers=False, patch_artist=True)
        for box in boxes["boxes"]:
            box.set_facecolor(colours[offset % len(colours)])
    waits.legend(handles=[Patch(color=colours[i % len(colours)], label=name) for i, name in enumerate(results)], fontsize="small")
    waits.set_xticks([i * (len(results) + 1) + 1 for i in range(len(teams))], teams)
    waits.set_ylabel("wait (minutes)")
    waits.set_title("waiting time per team (box: p25-p75, whiskers 1.5 IQR) for " + ", ".join(results))
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
