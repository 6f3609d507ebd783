"""``simulate --sweep``: one trace replayed over a grid of pool sizes, guarantee splits and reclaim
settings, in parallel on the machine's cores, to choose reclaim settings that hold across them
rather than on one configuration (docs/simulator.md, docs/performance.md).

Each grid point is one policy replay (``engine.simulate``, exactly as a single ``simulate`` run
with those quotas and settings); the pooled baseline is replayed once per pool size. Points are
independent, so a process pool runs them side by side."""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.model.pools import MAX_GRACE_SECONDS
from gpu_governance_runtime.planners.reclaim import Settings, Share, ShareGroup

from .engine import RunMetrics, pooled_share, simulate
from .traces import TraceJob, read_trace

# --grid KEY=V1,V2,...: what each key sets, and the planner setting it overrides
SETTING_KEYS = {
    "reborrow_backoff": "reborrow_backoff_s",
    "min_run_time": "min_run_time_s",
    "grace": "grace_s",
    "usage_half_life": "usage_half_life_s",
}
BY_BORROWED = "none"  # usage_half_life=none: borrowers ordered by what they borrow now
GRID_KEYS = ("size", "split", *SETTING_KEYS)
_ALLOWED = {
    "size": "whole numbers of instances >= 1, e.g. size=32,40,48",
    "split": "percent of the pool per team, in the pool's team order, '/'-separated, adding up to at most 100, e.g. split=50/20/30,40/30/30",
    "reborrow_backoff": "seconds >= 0",
    "min_run_time": "seconds > 0",
    "grace": f"seconds from 0 to {MAX_GRACE_SECONDS}",
    "usage_half_life": "seconds > 0 (fair share by decayed usage), or none (by what each team borrows now)",
}


@dataclass(frozen=True, kw_only=True)
class Point:
    """One configuration of the grid: the pool's size, each team's quota in percent of it (None:
    the governance file's quotas, scaled to the size) and the reclaim settings."""

    size: int
    split: tuple[int, ...] | None
    settings: Settings

    def label(self) -> str:
        return "/".join(map(str, self.split)) if self.split is not None else "file"


@dataclass(frozen=True, kw_only=True)
class Grid:
    sizes: tuple[int, ...]
    splits: tuple[tuple[int, ...] | None, ...]
    settings: tuple[Settings, ...]

    def points(self) -> list[Point]:
        return [
            Point(size=size, split=split, settings=settings)
            for size, split, settings in itertools.product(self.sizes, self.splits, self.settings)
        ]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    point: Point
    policy: RunMetrics
    pooled: RunMetrics
    total_work: float  # capacity-seconds of the whole trace

    @property
    def goodput_vs_pooled(self) -> float:
        return self.policy.goodput / self.pooled.goodput if self.pooled.goodput else 0.0

    @property
    def lost_percent(self) -> float:
        return 100 * self.policy.lost_work_capacity_s / self.total_work if self.total_work else 0.0


def parse_grid(entries: Sequence[str], *, teams: Sequence[str], size: int, base: Settings) -> Grid:
    """``--grid KEY=V1,V2`` entries (each key at most once); a key not given keeps the governance
    file's value (``size``: the pool's, ``split``: its quotas, settings: ``base``)."""
    problems: list[Problem] = []
    given: dict[str, list[Any]] = {}
    for entry in entries:
        key, separator, text = entry.partition("=")
        path = f"--grid {key}" if separator else "--grid"
        if not separator or key not in GRID_KEYS:
            problems.append(
                Problem(
                    path=path,
                    wrong="not KEY=VALUES with a known key",
                    value=entry,
                    allowed=f"one of {', '.join(GRID_KEYS)}, e.g. size=32,40,48",
                )
            )
            continue
        if key in given:
            problems.append(
                Problem(
                    path=path, wrong="given twice", value=entry, allowed="each key once, its values comma-separated"
                )
            )
            continue
        values = [_value(key, word.strip(), len(teams)) for word in text.split(",")]
        bad = [word for word, value in zip(text.split(","), values, strict=True) if value is None]
        if bad or not values:
            problems.append(
                Problem(path=path, wrong="not a valid value", value=",".join(bad) or text, allowed=_ALLOWED[key])
            )
            continue
        given[key] = list(dict.fromkeys(values))  # a value twice is one configuration
    if problems:
        raise GovernanceError(problems)
    settings = [base]
    for key, field_name in SETTING_KEYS.items():
        if key in given:
            settings = [
                replace(s, **{field_name: None if value == BY_BORROWED else value})
                for s in settings
                for value in given[key]
            ]
    return Grid(
        sizes=tuple(given.get("size", [size])), splits=tuple(given.get("split", [None])), settings=tuple(settings)
    )


def _value(key: str, word: str, teams: int) -> Any:
    """One grid value, or None when it is not one of ``_ALLOWED[key]``."""
    try:
        if key == "size":
            number = int(word)
            return number if number >= 1 else None
        if key == "split":
            percents = tuple(int(part) for part in word.split("/"))
            return (
                percents if len(percents) == teams and all(p >= 0 for p in percents) and sum(percents) <= 100 else None
            )
        if key == "usage_half_life" and word == BY_BORROWED:
            return BY_BORROWED
        number = float(word)
    except ValueError:
        return None
    if key == "grace":
        return number if 0 <= number <= MAX_GRACE_SECONDS else None
    if key in ("min_run_time", "usage_half_life"):
        return number if number > 0 and math.isfinite(number) else None
    return number if number >= 0 else None


def shares_at(
    point: Point, shares: Sequence[Share], capacity: Mapping[str, int]
) -> tuple[tuple[Share, ...], dict[str, int]]:
    """The pool at ``point``: its one instance type at ``size``, each team's quota its split
    percent of it (rounded down) or, without a split, its quota in the file scaled to the size."""
    ((instance_type, pool_size),) = capacity.items()
    quotas = (
        [point.size * percent // 100 for percent in point.split]
        if point.split is not None
        else [share.quota.get(instance_type, 0) * point.size // pool_size for share in shares]
    )
    return tuple(replace(share, quota={instance_type: quota}) for share, quota in zip(shares, quotas, strict=True)), {
        instance_type: point.size
    }


def groups_at(
    point: Point, groups: Sequence[ShareGroup], shares: Sequence[Share], capacity: Mapping[str, int]
) -> tuple[ShareGroup, ...]:
    """The pool's group tree at ``point``: each group's quota and limits of the pool's one type
    scaled to the size (rounded down), and a quota at least its children's there (``shares``:
    the teams at ``point``, a split may give them more than the file)."""
    ((instance_type, pool_size),) = capacity.items()
    scale = lambda n: n * point.size // pool_size  # noqa: E731
    quotas = {s.name: s.quota.get(instance_type, 0) for s in shares}
    scaled: dict[str, ShareGroup] = {}
    for group in reversed(groups):  # children (listed after their parents) first
        if instance_type not in group.quota:
            scaled[group.name] = group
            continue
        children = sum(quotas[name] for name in group.shares) + sum(
            g.quota.get(instance_type, 0) for g in scaled.values() if g.parent == group.name
        )
        scaled[group.name] = replace(
            group,
            quota={instance_type: max(scale(group.quota[instance_type]), children)},
            borrowing_limit=None
            if group.borrowing_limit is None
            else {t: scale(n) for t, n in group.borrowing_limit.items()},
            lending_limit={t: scale(n) for t, n in group.lending_limit.items()},
        )
    return tuple(scaled[g.name] for g in groups)


# --- the parallel run -------------------------------------------------------------------------

_jobs: Sequence[TraceJob] = ()  # the trace, read once per worker process


def _load(trace: str, classes: Mapping[str, int] | None) -> None:
    global _jobs
    _jobs = read_trace(trace, classes)


def _replay(
    task: tuple[Point | int, tuple[Share, ...], dict[str, int], float, tuple[ShareGroup, ...]],
) -> RunMetrics:
    what, shares, capacity, tick_s, groups = task
    if isinstance(what, int):  # the pooled baseline of one pool size
        return simulate(_jobs, shares=shares, capacity=capacity, tick_s=tick_s, pooled=True)
    return simulate(_jobs, shares=shares, capacity=capacity, tick_s=tick_s, settings=what.settings, groups=groups)


def process_pool(processes: int, trace: str, classes: Mapping[str, int] | None = None) -> Any:
    """The worker processes, each with the trace read once (``classes``: priority class name ->
    weight, for a trace that names the file's classes)."""
    return multiprocessing.get_context().Pool(processes, initializer=_load, initargs=(trace, classes))


def run_sweep(
    trace: str,
    grid: Grid,
    *,
    shares: Sequence[Share],
    capacity: Mapping[str, int],
    tick_s: float,
    groups: Sequence[ShareGroup] = (),
    processes: int | None = None,
    classes: Mapping[str, int] | None = None,
    pool_factory: Callable[[int, str, Mapping[str, int] | None], Any] = process_pool,
) -> list[Outcome]:
    """Every point of ``grid`` and each size's pooled baseline, ``processes`` at a time (default:
    one per core), in grid order; the pool's ``groups`` (its tree) planned at each point."""
    if len(capacity) != 1:
        raise GovernanceError.single(
            "--pool",
            "has several instance types; a sweep varies one pool size",
            sorted(capacity),
            "a pool of one instance type",
        )
    jobs = read_trace(trace, classes)  # a bad trace fails here, once, not in every worker
    points = grid.points()
    (instance_type,) = capacity
    tasks: list[tuple[Any, ...]] = []
    for point in points:
        at, pool = shares_at(point, shares, capacity)
        tasks.append((point, at, pool, tick_s, groups_at(point, groups, at, capacity)))
    tasks += [(size, pooled_share({instance_type: size}), {instance_type: size}, tick_s, ()) for size in grid.sizes]
    total_work = sum(job.duration * job.count for job in jobs)
    with pool_factory(processes or os.cpu_count() or 1, trace, classes) as workers:
        results = workers.map(_replay, tasks, chunksize=1)
    pooled = dict(zip(grid.sizes, results[len(points) :], strict=True))
    return [
        Outcome(point=point, policy=metrics, pooled=pooled[point.size], total_work=total_work)
        for point, metrics in zip(points, results, strict=False)
    ]


# --- reading the results ----------------------------------------------------------------------


def frontier(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The outcomes no other beats on both goodput vs pooled (higher) and lost work (lower)."""
    return [
        o
        for o in outcomes
        if not any(
            (p.goodput_vs_pooled >= o.goodput_vs_pooled and p.lost_percent <= o.lost_percent)
            and (p.goodput_vs_pooled > o.goodput_vs_pooled or p.lost_percent < o.lost_percent)
            for p in outcomes
        )
    ]


@dataclass(frozen=True, kw_only=True)
class SettingSummary:
    """One reclaim setting over every pool size and split of the grid: its worst and mean case."""

    settings: Settings
    worst_goodput_vs_pooled: float
    mean_goodput_vs_pooled: float
    worst_lost_percent: float
    mean_lost_percent: float
    breaches: int


def by_setting(outcomes: Sequence[Outcome]) -> list[SettingSummary]:
    groups: dict[Settings, list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.point.settings, []).append(outcome)
    return [
        SettingSummary(
            settings=settings,
            worst_goodput_vs_pooled=min(o.goodput_vs_pooled for o in group),
            mean_goodput_vs_pooled=sum(o.goodput_vs_pooled for o in group) / len(group),
            worst_lost_percent=max(o.lost_percent for o in group),
            mean_lost_percent=sum(o.lost_percent for o in group) / len(group),
            breaches=sum(o.policy.guarantee_breaches for o in group),
        )
        for settings, group in groups.items()
    ]


def settings_frontier(summaries: Sequence[SettingSummary]) -> list[SettingSummary]:
    """The settings no other beats on both worst-case goodput vs pooled and worst-case lost work."""
    return [
        s
        for s in summaries
        if not any(
            (o.worst_goodput_vs_pooled >= s.worst_goodput_vs_pooled and o.worst_lost_percent <= s.worst_lost_percent)
            and (o.worst_goodput_vs_pooled > s.worst_goodput_vs_pooled or o.worst_lost_percent < s.worst_lost_percent)
            for o in summaries
        )
    ]


def _setting_cells(settings: Settings) -> list[str]:
    half_life = BY_BORROWED if settings.usage_half_life_s is None else f"{settings.usage_half_life_s:g}"
    return [f"{settings.reborrow_backoff_s:g}", f"{settings.min_run_time_s:g}", f"{settings.grace_s:g}", half_life]


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def sweep_table(outcomes: Sequence[Outcome]) -> str:
    """Every configuration, the frontier marked, then each reclaim setting across sizes and splits."""
    best = {id(o) for o in frontier(outcomes)}
    rows = [
        [
            str(o.point.size),
            o.point.label(),
            *_setting_cells(o.point.settings),
            f"{o.policy.goodput:.4f}",
            f"{o.pooled.goodput:.4f}",
            f"{o.goodput_vs_pooled:.3f}",
            f"{o.lost_percent:.2f}",
            str(o.policy.preemptions),
            str(o.policy.guarantee_breaches),
            f"{max(o.policy.reclaim_waits, default=0):g}",
            "*" if id(o) in best else "",
        ]
        for o in outcomes
    ]
    configurations = _table(
        [
            "size",
            "split %",
            "backoff s",
            "min run s",
            "grace s",
            "half-life s",
            "goodput",
            "pooled",
            "x pooled",
            "lost %",
            "preemptions",
            "breaches",
            "reclaim wait max s",
            "frontier",
        ],
        rows,
    )
    summaries = by_setting(outcomes)
    chosen = {id(s) for s in settings_frontier(summaries)}
    setting_rows = [
        [
            *_setting_cells(s.settings),
            f"{s.worst_goodput_vs_pooled:.3f}",
            f"{s.mean_goodput_vs_pooled:.3f}",
            f"{s.worst_lost_percent:.2f}",
            f"{s.mean_lost_percent:.2f}",
            str(s.breaches),
            "*" if id(s) in chosen else "",
        ]
        for s in sorted(summaries, key=lambda s: (-s.worst_goodput_vs_pooled, s.worst_lost_percent))
    ]
    settings_table = _table(
        [
            "backoff s",
            "min run s",
            "grace s",
            "half-life s",
            "worst x pooled",
            "mean x pooled",
            "worst lost %",
            "mean lost %",
            "breaches",
            "frontier",
        ],
        setting_rows,
    )
    return f"{configurations}\n\nacross sizes and splits (frontier: no setting beats it on both worst cases):\n{settings_table}"


def sweep_json(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    best = {id(o) for o in frontier(outcomes)}
    return {
        "configurations": [
            {
                "size": o.point.size,
                "split_percent": list(o.point.split) if o.point.split is not None else None,
                "reborrow_backoff_s": o.point.settings.reborrow_backoff_s,
                "min_run_time_s": o.point.settings.min_run_time_s,
                "grace_s": o.point.settings.grace_s,
                "usage_half_life_s": o.point.settings.usage_half_life_s,
                "goodput": round(o.policy.goodput, 4),
                "pooled_goodput": round(o.pooled.goodput, 4),
                "goodput_vs_pooled": round(o.goodput_vs_pooled, 4),
                "lost_percent": round(o.lost_percent, 3),
                "preemptions": o.policy.preemptions,
                "guarantee_breaches": o.policy.guarantee_breaches,
                "frontier": id(o) in best,
            }
            for o in outcomes
        ],
        "settings": [
            {
                "reborrow_backoff_s": s.settings.reborrow_backoff_s,
                "min_run_time_s": s.settings.min_run_time_s,
                "grace_s": s.settings.grace_s,
                "usage_half_life_s": s.settings.usage_half_life_s,
                "worst_goodput_vs_pooled": round(s.worst_goodput_vs_pooled, 4),
                "mean_goodput_vs_pooled": round(s.mean_goodput_vs_pooled, 4),
                "worst_lost_percent": round(s.worst_lost_percent, 3),
                "mean_lost_percent": round(s.mean_lost_percent, 3),
                "breaches": s.breaches,
            }
            for s in by_setting(outcomes)
        ],
    }
