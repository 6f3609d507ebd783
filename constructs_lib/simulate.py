"""``gpu-governance simulate``: replay a job trace through the reclaim planner and two baselines.

A discrete-event simulation of one pool. Jobs arrive at their submit time and finish when their
remaining work is done; the planner runs on a fixed tick (as the controller does) whenever
something changed. The baselines run through the very same planner with transformed shares:

* ``static``: every team is a reserve share of exactly its quota, no in-share preemption.
* ``pooled``: everyone in one reserve share as large as the pool, no preemption; one queue,
  highest priority then oldest first, quotas ignored.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from gpu_governance_runtime.policy import parse_policy
from gpu_governance_runtime.reclaim.planner import (
    PendingJob,
    PoolState,
    Settings,
    Share,
    Strategy,
    apply_plan,
    plan_tick,
)

from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.model.loader import load_model
from .model import GovernanceModel
from constructs_lib.model.policy import compile_policy
from .traces import TRACE_COLUMNS, OpenbMapping, TraceJob, convert_openb, read_trace, write_trace

POOLED_SHARE = "everyone"


@dataclass(frozen=True, kw_only=True)
class TeamStats:
    jobs: int
    wait_p50_s: float
    wait_p95_s: float


@dataclass(frozen=True, kw_only=True)
class RunMetrics:
    utilization: float
    makespan_s: float
    jobs_completed: int
    jobs_unfinished: int  # jobs that can never start (larger than what their team may hold)
    preemptions: int
    lost_work_capacity_s: float
    guarantee_breaches: int
    teams: Mapping[str, TeamStats]
    usage_timeline: tuple[tuple[float, Mapping[str, int]], ...] = field(repr=False, default=())
    waits: Mapping[str, tuple[float, ...]] = field(repr=False, default_factory=dict)

    def as_json(self, *, with_breaches: bool) -> dict[str, Any]:
        result = {
            "utilization": round(self.utilization, 4),
            "makespan_s": self.makespan_s,
            "jobs_completed": self.jobs_completed,
            "jobs_unfinished": self.jobs_unfinished,
            "preemptions": self.preemptions,
            "lost_work_capacity_s": round(self.lost_work_capacity_s, 1),
            "teams": {name: vars(stats) for name, stats in sorted(self.teams.items())},
        }
        if with_breaches:
            result["guarantee_breaches"] = self.guarantee_breaches
        return result


def static_shares(shares: Sequence[Share]) -> tuple[Share, ...]:
    return tuple(Share(name=s.name, quota=s.quota, strategy=Strategy.RESERVE, fair_share_weight=s.fair_share_weight) for s in shares)


def pooled_share(capacity: Mapping[str, int]) -> tuple[Share, ...]:
    return (Share(name=POOLED_SHARE, quota=dict(capacity), strategy=Strategy.RESERVE),)


@dataclass
class _Progress:
    job: TraceJob
    remaining: float
    waiting_since: float
    waited: float = 0.0
    started_at: float = 0.0
    version: int = 0  # invalidates a completion event after a preemption


def simulate(
    jobs: Sequence[TraceJob],
    *,
    shares: Sequence[Share],
    capacity: Mapping[str, int],
    tick_s: float = 60.0,
    settings: Settings = Settings(),
    pooled: bool = False,
    record_timeline: bool = False,
) -> RunMetrics:
    """Replay ``jobs``; with ``pooled`` every job joins the single pooled share."""
    share_of = (lambda job: POOLED_SHARE) if pooled else (lambda job: job.team)
    arrivals = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
    progress: dict[str, _Progress] = {}
    state = PoolState(capacity=dict(capacity), shares=tuple(shares), running=(), pending=(), now=0.0)
    completions: list[tuple[float, int, str]] = []
    next_arrival = 0
    clock = 0.0
    work_done = lost = 0.0
    preemptions = breaches = 0
    first_submit = arrivals[0].submit_time if arrivals else 0.0
    last_finish = first_submit
    changed = False
    timeline: list[tuple[float, Mapping[str, int]]] = []
    guarantees = {s.name: s for s in shares}

    while True:
        # the next moment something happens: an arrival, a completion, or a follow-up tick
        candidates = []
        if next_arrival < len(arrivals):
            candidates.append(arrivals[next_arrival].submit_time)
        if completions:
            candidates.append(completions[0][0])
        if changed and state.pending:
            candidates.append(clock)
        if not candidates:
            break
        tick = _tick_at_or_after(min(candidates), tick_s)
        running = {j.job_id: j for j in state.running}
        pending = list(state.pending)
        while completions and completions[0][0] <= tick:
            finished_at, version, job_id = heapq.heappop(completions)
            entry = progress[job_id]
            if version != entry.version or job_id not in running:
                continue
            del running[job_id]
            work_done += entry.job.duration * entry.job.count
            last_finish = max(last_finish, finished_at)
            entry.remaining = 0.0
        while next_arrival < len(arrivals) and arrivals[next_arrival].submit_time <= tick:
            job = arrivals[next_arrival]
            next_arrival += 1
            progress[job.job_id] = _Progress(job=job, remaining=job.duration, waiting_since=job.submit_time)
            pending.append(
                PendingJob(
                    job_id=job.job_id, share=share_of(job), instance_type=job.instance_type, count=job.count,
                    priority=job.priority, submitted_at=job.submit_time, checkpointable=job.checkpointable,
                )
            )
        state = replace(state, running=tuple(running.values()), pending=tuple(pending), now=tick)
        plan = plan_tick(state, settings)
        changed = bool(plan.starts or plan.preemptions or plan.capped)
        for preemption in plan.preemptions:
            entry = progress[preemption.job_id]
            elapsed = tick - entry.started_at
            entry.version += 1
            entry.waiting_since = tick
            preemptions += 1
            if entry.job.checkpointable:
                entry.remaining -= elapsed
            else:
                lost += elapsed * entry.job.count
                entry.remaining = entry.job.duration
        state = apply_plan(state, plan)
        for start in plan.starts:
            entry = progress[start.job_id]
            entry.waited += tick - entry.waiting_since
            entry.started_at = tick
            entry.version += 1
            heapq.heappush(completions, (tick + entry.remaining, entry.version, start.job_id))
        if not pooled:
            breaches += _guarantee_breaches(state, guarantees, progress, tick - tick_s)
        if record_timeline:
            timeline.append((tick, _usage_by_team(state, progress)))
        clock = tick + tick_s if changed else tick
        if not changed and state.pending:
            # a victim protected by the minimum run time becomes preemptible later: look again then
            expiry = _next_protection_expiry(state, settings)
            if expiry is not None:
                clock, changed = max(tick + tick_s, expiry), True

    unfinished = [entry for entry in progress.values() if entry.remaining > 0]
    waits: dict[str, list[float]] = {}
    for entry in progress.values():
        if entry.remaining <= 0:
            waits.setdefault(entry.job.team, []).append(entry.waited)
    makespan = max(0.0, last_finish - first_submit)
    total_capacity = sum(capacity.values())
    return RunMetrics(
        utilization=work_done / (total_capacity * makespan) if makespan else 0.0,
        makespan_s=makespan,
        jobs_completed=len(progress) - len(unfinished),
        jobs_unfinished=len(unfinished) + len(arrivals) - next_arrival,
        preemptions=preemptions,
        lost_work_capacity_s=lost,
        guarantee_breaches=breaches,
        teams={team: _stats(values) for team, values in waits.items()},
        usage_timeline=tuple(timeline),
        waits={team: tuple(values) for team, values in waits.items()},
    )


def _next_protection_expiry(state: PoolState, settings: Settings) -> float | None:
    expiries = [
        job.started_at + settings.min_run_time_s
        for job in state.running
        if job.times_preempted and job.started_at + settings.min_run_time_s > state.now
    ]
    return min(expiries, default=None)


def _tick_at_or_after(time: float, tick_s: float) -> float:
    ticks = -(-time // tick_s)
    return ticks * tick_s


def _guarantee_breaches(state: PoolState, shares: Mapping[str, Share], progress: Mapping[str, _Progress], waited_before: float) -> int:
    """Teams with a job inside their guarantee that has waited longer than a tick while another
    team still runs on borrowed capacity of the same type: lent capacity not reclaimed in time."""
    usage: dict[tuple[str, str], int] = {}
    for job in state.running:
        usage[job.share, job.instance_type] = usage.get((job.share, job.instance_type), 0) + job.count
    borrowing = {t for (name, t), used in usage.items() if used > shares[name].quota.get(t, 0)}
    breached = set()
    for job in state.pending:
        if job.instance_type not in borrowing or progress[job.job_id].waiting_since > waited_before:
            continue
        quota = shares[job.share].quota.get(job.instance_type, 0)
        if usage.get((job.share, job.instance_type), 0) + job.count <= quota:
            breached.add(job.share)
    return len(breached)


def _usage_by_team(state: PoolState, progress: Mapping[str, _Progress]) -> dict[str, int]:
    usage: dict[str, int] = {}
    for job in state.running:
        team = progress[job.job_id].job.team
        usage[team] = usage.get(team, 0) + job.count
    return usage


def _stats(values: Sequence[float]) -> TeamStats:
    return TeamStats(jobs=len(values), wait_p50_s=_percentile(values, 50), wait_p95_s=_percentile(values, 95))


def _percentile(values: Sequence[float], percent: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, -(-len(ordered) * percent // 100) - 1))
    return float(ordered[int(index)])


# --- the comparison and the CLI ---------------------------------------------------------------


def compare(
    jobs: Sequence[TraceJob], *, shares: Sequence[Share], capacity: Mapping[str, int], tick_s: float, settings: Settings, record_timeline: bool = False
) -> dict[str, RunMetrics]:
    """The policy and both baselines over the same trace."""
    check_trace_fits_pool(jobs, shares, capacity)
    run = lambda **how: simulate(jobs, capacity=capacity, tick_s=tick_s, settings=settings, record_timeline=record_timeline, **how)  # noqa: E731
    return {
        "policy": run(shares=shares),
        "static": run(shares=static_shares(shares)),
        "pooled": run(shares=pooled_share(capacity), pooled=True),
    }


def comparison_json(results: Mapping[str, RunMetrics]) -> dict[str, Any]:
    return {
        "policy": results["policy"].as_json(with_breaches=True),
        "baselines": {name: results[name].as_json(with_breaches=False) for name in ("static", "pooled")},
    }


def check_trace_fits_pool(jobs: Sequence[TraceJob], shares: Sequence[Share], capacity: Mapping[str, int]) -> None:
    teams = {s.name for s in shares}
    problems: list[Problem] = []
    for job in jobs:
        if job.team not in teams:
            problems.append(Problem(path=f"job {job.job_id}.team", wrong="team has no quota in the pool", value=job.team, allowed=f"one of {sorted(teams)}"))
        if job.instance_type not in capacity:
            problems.append(Problem(path=f"job {job.job_id}.instance_type", wrong="not in the pool", value=job.instance_type, allowed=f"one of {sorted(capacity)}"))
        elif job.count > capacity[job.instance_type]:
            problems.append(Problem(path=f"job {job.job_id}.count", wrong="larger than the pool", value=job.count, allowed=f"at most {capacity[job.instance_type]}"))
        if len(problems) >= 20:
            break
    if problems:
        raise GovernanceError(problems)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``simulate`` and ``openb-trace`` to the gpu-governance CLI."""
    simulate_parser = subparsers.add_parser("simulate", help="replay a job trace through the reclaim policy and two baselines")
    simulate_parser.add_argument("--config", required=True, help="governance file (YAML or JSON)")
    simulate_parser.add_argument("--trace", required=True, help="trace CSV: " + ",".join(TRACE_COLUMNS))
    simulate_parser.add_argument("--pool", help="pool to simulate (default: the only pool, or the first)")
    simulate_parser.add_argument("--tick", type=_positive_float, default=60.0, help="controller tick in seconds (default 60)")
    simulate_parser.add_argument("--min-run-time", type=_positive_float, default=Settings().min_run_time_s, help="seconds a requeued job runs before it can be preempted again")
    simulate_parser.add_argument("--max-preemptions", type=int, default=Settings().max_preemptions_per_tick, help="preemptions per tick at most")
    simulate_parser.add_argument("--json", action="store_true", help="print one JSON object")
    simulate_parser.add_argument("--plot", metavar="PNG", help="write a chart of capacity in use and waiting times (needs matplotlib)")
    simulate_parser.set_defaults(handler=_run_simulate)

    openb_parser = subparsers.add_parser("openb-trace", help="convert an Alibaba openb pod list into a simulator trace")
    openb_parser.add_argument("source", help="openb_pod_list_*.csv")
    openb_parser.add_argument("output", help="trace CSV to write")
    openb_parser.add_argument("--instance-type", default=OpenbMapping().instance_type, help="one-GPU instance type for the jobs")
    openb_parser.set_defaults(handler=_run_openb)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def pool_shares(model: GovernanceModel, pool_name: str | None) -> tuple[tuple[Share, ...], dict[str, int]]:
    """The planner shares and capacity of one pool of a governance model, via the compiled policy."""
    policy = parse_policy(compile_policy(model))
    name = pool_name or policy.pools[0].name
    if name not in [p.name for p in policy.pools]:
        raise GovernanceError([Problem(path="--pool", wrong="no such pool", value=name, allowed=f"one of {[p.name for p in policy.pools]}")])
    pool = policy.pool(name)
    return pool.shares, pool.capacity


def _run_simulate(args: argparse.Namespace) -> int:
    if args.max_preemptions < 0:
        raise GovernanceError([Problem(path="--max-preemptions", wrong="negative", value=args.max_preemptions, allowed="0 or more")])
    shares, capacity = pool_shares(load_model(args.config), args.pool)
    jobs = read_trace(args.trace)
    settings = Settings(min_run_time_s=args.min_run_time, max_preemptions_per_tick=args.max_preemptions)
    pyplot = _load_pyplot() if args.plot else None  # fail before a long run, not after
    results = compare(jobs, shares=shares, capacity=capacity, tick_s=args.tick, settings=settings, record_timeline=bool(args.plot))
    if pyplot is not None:
        _write_plot(pyplot, results, Path(args.plot))
    if args.json:
        print(json.dumps(comparison_json(results), indent=2))
    else:
        print(_table(results))
    return 0


def _table(results: Mapping[str, RunMetrics]) -> str:
    lines = [f"{'run':<8} {'util':>6} {'makespan_s':>12} {'done':>6} {'preempt':>8} {'lost_cap_s':>12}"]
    for name, m in results.items():
        lines.append(f"{name:<8} {m.utilization:>6.3f} {m.makespan_s:>12.0f} {m.jobs_completed:>6} {m.preemptions:>8} {m.lost_work_capacity_s:>12.0f}")
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
    return "\n".join(lines)


def _load_pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        raise GovernanceError([Problem(path="--plot", wrong="matplotlib is not installed", value="matplotlib", allowed="pip install 'cdk-gpu-governance[plot]', or leave out --plot")]) from None
    return pyplot


def _write_plot(pyplot, results: Mapping[str, RunMetrics], path: Path) -> None:
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


def _run_openb(args: argparse.Namespace) -> int:
    mapping = OpenbMapping(instance_type=args.instance_type)
    written = write_trace(convert_openb(args.source, mapping), args.output)
    print(f"wrote {written} jobs to {args.output}", file=sys.stderr)
    return 0
