"""What a replay prints: the JSON object, the text table and the optional chart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from constructs_lib.core.errors import GovernanceError, Problem
from gpu_governance_runtime.planners.reclaim import Share

from .engine import RunMetrics, TeamStats, static_shares

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
    lines.append(f"{'team':<12} " + " ".join(f"{name + ' p50/p95 wait s':>32}" for name in results))
    teams = sorted({t for m in results.values() for t in m.teams})
    for team in teams:
        lines.append(f"{team:<12} " + " ".join(f"{_wait_cell(m.teams.get(team)):>32}" for m in results.values()))
    lines.append(
        "(percentiles over all of a team's jobs; a job that never finished waits for ever, so a percentile among them is 'never')"
    )
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


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f}"


def _wait_cell(stats: TeamStats | None) -> str:
    if stats is None:
        return "-"
    cell = f"{_seconds(stats.wait_p50_s)} / {_seconds(stats.wait_p95_s)}"
    return cell + (f" ({stats.jobs_unfinished}/{stats.jobs} never ran)" if stats.jobs_unfinished else "")


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
NEVER_COLOUR = "#d62728"
# What each run is, on the chart itself.
RUNS_EXPLAINED = {
    "policy": "the governance file: shares lend, borrow and are reclaimed",
    "static": "each team its own quota only, nothing lent",
    "pooled": "one queue for the whole pool, quotas ignored",
    COMPARED: "the policy under the --compare governance file",
}


def run_shares(policy: Sequence[Share], compared: Sequence[Share] | None = None) -> dict[str, tuple[Share, ...]]:
    """The shares each run replays (pooled: none of the teams'), for the chart's guarantees."""
    shares = {"policy": tuple(policy), "static": static_shares(policy), "pooled": ()}
    return shares | ({COMPARED: tuple(compared)} if compared is not None else {})


def write_plot(
    pyplot,
    results: Mapping[str, RunMetrics],
    path: Path,
    *,
    pool: str,
    capacity: Mapping[str, int],
    shares: Mapping[str, Sequence[Share]],
) -> None:
    """:func:`figure` as a PNG."""
    chart = figure(pyplot, results, pool=pool, capacity=capacity, shares=shares)
    try:
        chart.savefig(path, dpi=90)
    finally:
        pyplot.close(chart)


def figure(
    pyplot,
    results: Mapping[str, RunMetrics],
    *,
    pool: str,
    capacity: Mapping[str, int],
    shares: Mapping[str, Sequence[Share]],
):
    """One row per run, one column per instance type of the pool: the instances each team holds
    (stacked) under the pool's capacity, with the same y scale down a column; above them, hatched,
    the idle quota that reserving shares never lend; each team's guarantee as a dotted line in its
    colour. Then every job's wait per team and run, the table's p50 and p95, and the jobs that
    never ran."""
    teams = sorted({team for m in results.values() for team in m.teams})
    types = sorted(capacity)
    with_shares = sorted({*teams, *(share.name for run in shares.values() for share in run)})  # idle teams too
    team_colours = dict(
        zip(
            with_shares,
            pyplot.rcParams["axes.prop_cycle"].by_key()["color"] * (len(with_shares) // 10 + 1),
            strict=False,
        )
    )
    chart = pyplot.figure(figsize=(max(10, 5.5 * len(types) + 1), 3.0 * (len(results) + 1.5)), layout="constrained")
    grid = chart.add_gridspec(len(results) + 1, len(types), height_ratios=[1] * len(results) + [1.5])
    column_axes: dict[str, object] = {}
    legend: dict[str, object] = {}
    for row, (name, metrics) in enumerate(results.items()):
        run = {s.name: s for s in shares.get(name, ())}
        for column, kind in enumerate(types):
            axis = chart.add_subplot(grid[row, column], sharex=column_axes.get(types[0]), sharey=column_axes.get(kind))
            column_axes.setdefault(kind, axis)
            _usage_panel(axis, name, metrics, kind, capacity[kind], teams, run, team_colours)
            handles, labels = axis.get_legend_handles_labels()
            legend |= dict(zip(labels, handles, strict=True))
    chart.axes[len(types) - 1].legend(  # the first row's last panel: one legend for every panel
        legend.values(),
        legend.keys(),
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize="small",
        title=f"pool {pool}",
    )
    _waits_panel(chart.add_subplot(grid[len(results), :]), results, teams)
    return chart


def _usage_panel(
    axis,
    name: str,
    metrics: RunMetrics,
    kind: str,
    capacity: int,
    teams: Sequence[str],
    run: Mapping[str, Share],
    team_colours: Mapping[str, str],
) -> None:
    """One run's instances of one type: each team's (stacked), the idle quota reserving shares
    hold (hatched), each guarantee (dotted) and the pool's capacity (dashed)."""
    hours = [t / 3600 for t, _ in metrics.usage_timeline]
    if hours:
        stacks = [[usage.get((team, kind), 0) for _, usage in metrics.usage_timeline] for team in teams]
        held = [
            sum(share.held_idle(kind, usage.get((share.name, kind), 0)) for share in run.values())
            for _, usage in metrics.usage_timeline
        ]
        axis.stackplot(hours, stacks, labels=teams, colors=[team_colours[t] for t in teams], step="post")
        used = [sum(column) for column in zip(*stacks, strict=True)] if stacks else [0] * len(hours)
        if any(held):
            axis.fill_between(
                hours,
                used,
                [u + h for u, h in zip(used, held, strict=True)],
                step="post",
                facecolor="none",
                edgecolor="#606060",
                hatch="///",
                linewidth=0,
                label="reserved, idle: never lent",
                gid=f"{name}/{kind}/held-idle",
            )
    for share in run.values():
        if share.quota.get(kind):
            axis.axhline(
                share.quota[kind],
                color=team_colours[share.name],
                linestyle=":",
                linewidth=1.5,
                label=f"guarantee of {share.name}",
                gid=f"{name}/{kind}/guarantee/{share.name}",
            )
    axis.axhline(capacity, color="black", linestyle="--", linewidth=1, label=f"pool capacity ({capacity})")
    axis.set_ylim(0, capacity * 1.15)
    axis.set_title(
        f"{name}: {kind} in use (utilization {metrics.utilization:.2f})\n{RUNS_EXPLAINED.get(name, '')}",
        fontsize="medium",
    )
    axis.set_ylabel(f"{kind} instances")
    axis.set_xlabel("hours since the first submission")


def _waits_panel(waits, results: Mapping[str, RunMetrics], teams: Sequence[str]) -> None:
    """Every finished job's wait (hours) per team and run, the table's p50 and p95 as marks, and
    the jobs that never ran on a row of their own above: nothing the table reports is hidden."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    top = max((w for m in results.values() for values in m.waits.values() for w in values), default=0.0) / 3600
    top = max(top, 1.0) * 1.1
    never = top * 1.12
    width = len(results) + 1
    for offset, (name, metrics) in enumerate(results.items()):
        colour = RUN_COLOURS[offset % len(RUN_COLOURS)]
        for index, team in enumerate(teams):
            at = index * width + offset
            values = sorted(w / 3600 for w in metrics.waits.get(team, ()))
            if values:
                spread = [at - 0.3 + 0.6 * i / max(1, len(values) - 1) for i in range(len(values))]
                waits.scatter(
                    spread, values, s=10, color=colour, edgecolor="black", linewidth=0.4, gid=f"{name}/{team}/waits"
                )
            stats = metrics.teams.get(team)
            if stats is None:
                continue
            for value, marker in ((stats.wait_p50_s, "p50"), (stats.wait_p95_s, "p95")):
                y = never if value is None else value / 3600
                waits.plot(
                    [at - 0.4, at + 0.4],
                    [y, y],
                    color=NEVER_COLOUR if marker == "p95" else "black",
                    linewidth=2,
                    gid=f"{name}/{team}/{marker}",
                )
            if stats.jobs_unfinished:
                waits.scatter([at], [never], marker="X", s=60, color=NEVER_COLOUR, gid=f"{name}/{team}/never")
                waits.annotate(
                    f"{stats.jobs_unfinished}/{stats.jobs}",
                    (at, never),
                    textcoords="offset points",
                    xytext=(0, 6),
                    ha="center",
                    fontsize="small",
                    color=NEVER_COLOUR,
                    gid=f"{name}/{team}/never-count",
                )
    waits.axhline((top + never) / 2, color="grey", linewidth=0.5)
    ticks = [t for t in waits.get_yticks() if 0 <= t <= top]
    waits.set_yticks([*ticks, never], [*(f"{t:g}" for t in ticks), "never ran"])
    waits.set_ylim(-top * 0.03, never * 1.08)
    waits.legend(
        handles=[
            *(
                Patch(facecolor=RUN_COLOURS[i % len(RUN_COLOURS)], edgecolor="black", label=name)
                for i, name in enumerate(results)
            ),
            Line2D([], [], color="black", linewidth=2, label="p50 (the table's)"),
            Line2D([], [], color=NEVER_COLOUR, linewidth=2, label="p95 (the table's)"),
            Line2D([], [], marker="X", linestyle="", color=NEVER_COLOUR, label="never ran (count/jobs)"),
        ],
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize="small",
        title="run",
    )
    waits.set_xticks([i * width + (len(results) - 1) / 2 for i in range(len(teams))], teams)
    waits.set_xlim(-0.8, len(teams) * width - 1.2)
    waits.set_xlabel("team")
    waits.set_ylabel("wait (hours)")
    waits.set_title(
        "each job's wait per team and run (dots), p50 and p95 over all the team's jobs; a job that never ran waits for ever",
        fontsize="medium",
    )
