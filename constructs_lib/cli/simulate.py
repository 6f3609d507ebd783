"""``gpu-governance simulate`` and ``gpu-governance trace ...``: the simulator's commands."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from constructs_lib.cli.config import add_config_arguments, model_from
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.wording import counted
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import load_model
from constructs_lib.model.policy import compile_policy
from constructs_lib.simulator.engine import compare, simulate
from constructs_lib.simulator.importers import (
    SACCT_COMMAND,
    ImportOptions,
    from_batch,
    from_kueue,
    from_sacct,
    priorities,
)
from constructs_lib.simulator.report import COMPARED, comparison_json, load_pyplot, run_shares, table, write_plot
from constructs_lib.simulator.sweep import GRID_KEYS, parse_grid, run_sweep, sweep_json, sweep_table
from constructs_lib.simulator.traces import TRACE_COLUMNS, OpenbMapping, convert_openb, read_trace, write_trace
from gpu_governance_runtime.planners.reclaim import Settings, Share
from gpu_governance_runtime.policy import PoolPolicy, parse_policy


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``simulate``, ``openb-trace`` and ``trace from-sacct|from-batch|from-kueue``."""
    simulate_parser = subparsers.add_parser(
        "simulate", help="replay a job trace through the reclaim policy and two baselines"
    )
    add_config_arguments(simulate_parser)
    simulate_parser.add_argument(
        "--trace",
        required=True,
        help="trace CSV: "
        + ",".join(TRACE_COLUMNS)
        + "[,max_run_time[,restartable]]; times in seconds (submit_time from the trace's start), priority a "
        "number or one of the governance file's priority classes (docs/simulator.md, 'Trace format')",
    )
    simulate_parser.add_argument(
        "--skip-other-types",
        action="store_true",
        help="leave out the trace's jobs of instance types the pool does not have (counted on stderr) "
        "instead of refusing the trace",
    )
    simulate_parser.add_argument(
        "--pool", help="pool to simulate (default: the only pool, or the first, named on stderr)"
    )
    simulate_parser.add_argument(
        "--tick", type=_positive_float, default=60.0, help="controller tick in seconds (default 60)"
    )
    simulate_parser.add_argument(
        "--min-run-time",
        type=_positive_float,
        default=Settings().min_run_time_s,
        help="seconds a requeued job runs before it can be preempted again",
    )
    simulate_parser.add_argument(
        "--max-preemptions", type=int, default=Settings().max_preemptions_per_tick, help="preemptions per tick at most"
    )
    simulate_parser.add_argument(
        "--reborrow-backoff",
        type=_non_negative_float,
        help="seconds a preempted job that cannot checkpoint waits before it borrows again, doubled per preemption (default: the pool's reclaim.reborrow_backoff_seconds in --config)",
    )
    simulate_parser.add_argument(
        "--borrow-horizon",
        type=_positive_float,
        help="only jobs that checkpoint or declare a run time of at most this many seconds borrow (default: the pool's reclaim.borrow_horizon_seconds in --config; unset there: any job)",
    )
    simulate_parser.add_argument(
        "--grace",
        type=_non_negative_float,
        help="seconds a victim runs on after it is chosen, to checkpoint, before it stops (default: the pool's reclaim.grace_seconds in --config)",
    )
    simulate_parser.add_argument(
        "--declared-run-time",
        type=_positive_float,
        metavar="FACTOR",
        help="jobs without a declared run time declare FACTOR x their duration (what-if for traces without limits)",
    )
    simulate_parser.add_argument(
        "--compare",
        metavar="OLD",
        help="also replay the policy under this governance file (e.g. before a quota change): run 'compared'",
    )
    simulate_parser.add_argument(
        "--sweep",
        action="store_true",
        help="replay a grid of pool sizes, guarantee splits and reclaim settings in parallel (--grid); print goodput vs pooled, lost work and the frontier",
    )
    simulate_parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help=f"with --sweep, repeat: {', '.join(GRID_KEYS)} (e.g. size=32,40,48 split=50/20/30,40/30/30 grace=0,300); a key not given keeps the file's value",
    )
    simulate_parser.add_argument("--processes", type=int, help="with --sweep: worker processes (default: one per core)")
    simulate_parser.add_argument("--json", action="store_true", help="print one JSON object")
    simulate_parser.add_argument(
        "--plot", metavar="PNG", help="write a chart of capacity in use and waiting times (needs matplotlib)"
    )
    simulate_parser.set_defaults(handler=_run_simulate)

    openb_parser = subparsers.add_parser("openb-trace", help="convert an Alibaba openb pod list into a simulator trace")
    openb_parser.add_argument("source", help="openb_pod_list_*.csv")
    openb_parser.add_argument("output", help="trace CSV to write")
    openb_parser.add_argument(
        "--instance-type", default=OpenbMapping().instance_type, help="one-GPU instance type for the jobs"
    )
    openb_parser.add_argument(
        "--since-day",
        type=_non_negative_float,
        default=0.0,
        help="keep only tasks created on or after this day of the trace (default 0)",
    )
    openb_parser.set_defaults(handler=_run_openb)

    trace_parser = subparsers.add_parser("trace", help="make a simulator trace from a platform's own job history")
    sources = trace_parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
    for name, reader, text in (
        ("from-sacct", from_sacct, f"Slurm accounting: {SACCT_COMMAND} (run with TZ=UTC)"),
        (
            "from-batch",
            from_batch,
            "AWS Batch: ListJobs/DescribeJobs or ListServiceJobs/DescribeServiceJob JSON (one response or a list of pages)",
        ),
        ("from-kueue", from_kueue, "Kueue: kubectl get workloads -A -o json"),
    ):
        source = sources.add_parser(name, help=text, description=text)
        source.add_argument("file", help="the recorded output")
        source.add_argument("output", help="trace CSV to write")
        source.add_argument("--instance-type", required=True, help="instance type of jobs whose record names none")
        source.add_argument(
            "--priority",
            action="append",
            default=[],
            metavar="CLASS=N",
            help="priority of a priority class (Slurm QoS <team>.<class>, Kueue priorityClassName); repeat; records of a class not given are skipped and named (sacct's QoS Unknown: --priority Unknown=N)",
        )
        source.add_argument(
            "--checkpointable", action="append", default=[], metavar="TEAM", help="a team whose jobs checkpoint; repeat"
        )
        source.set_defaults(handler=_run_import, reader=reader)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def pool_policy(model: GovernanceModel, pool_name: str | None) -> PoolPolicy:
    """One pool of a governance model as the reclaim controller reads it: via the compiled policy."""
    policy = parse_policy(compile_policy(model))
    name = pool_name or policy.pools[0].name
    if pool_name is None and len(policy.pools) > 1:  # say so: a replay of the wrong pool looks just as plausible
        print(
            f"gpu-governance simulate: pool {name} (the first of {', '.join(p.name for p in policy.pools)}; choose with --pool)",
            file=sys.stderr,
        )
    if name not in [p.name for p in policy.pools]:
        raise GovernanceError(
            [
                Problem(
                    path="--pool", wrong="no such pool", value=name, allowed=f"one of {[p.name for p in policy.pools]}"
                )
            ]
        )
    return policy.pool(name)


def pool_shares(model: GovernanceModel, pool_name: str | None) -> tuple[tuple[Share, ...], dict[str, int]]:
    """The planner shares and capacity of one pool of a governance model, via the compiled policy."""
    pool = pool_policy(model, pool_name)
    return pool.shares, pool.capacity


def _settings(pool: PoolPolicy, args: argparse.Namespace) -> Settings:
    """The pool's settings as the controller plans with them; options given override them."""
    settings = pool.settings(Settings(min_run_time_s=args.min_run_time, max_preemptions_per_tick=args.max_preemptions))
    if args.reborrow_backoff is not None:
        settings = replace(settings, reborrow_backoff_s=args.reborrow_backoff)
    if args.borrow_horizon is not None:
        settings = replace(settings, borrow_horizon_s=args.borrow_horizon)
    if args.grace is not None:
        settings = replace(settings, grace_s=args.grace)
    return settings


def _run_simulate(args: argparse.Namespace) -> int:
    if args.max_preemptions < 0:
        raise GovernanceError(
            [Problem(path="--max-preemptions", wrong="negative", value=args.max_preemptions, allowed="0 or more")]
        )
    if not args.sweep:
        for option, given in (("--grid", args.grid), ("--processes", args.processes is not None)):
            if given:
                raise GovernanceError.single(option, "only with --sweep", option, "--sweep --grid KEY=V1,V2 ...")
    model = model_from(args)
    pool = pool_policy(model, args.pool)
    classes = {c.name: c.weight for c in model.priority_classes}  # a trace may name the file's classes
    if args.sweep:
        return _run_sweep(args, pool, classes)
    jobs = read_trace(args.trace, classes)
    if args.skip_other_types:
        others = sorted({job.instance_type for job in jobs if job.instance_type not in pool.capacity})
        kept = [job for job in jobs if job.instance_type in pool.capacity]
        if others:
            print(
                f"gpu-governance simulate: left out {counted(len(jobs) - len(kept), 'job')} of instance types "
                f"pool {pool.name} does not have: {', '.join(others)}",
                file=sys.stderr,
            )
        jobs = kept
    if args.declared_run_time:
        jobs = [
            job if job.max_run_time else replace(job, max_run_time=job.duration * args.declared_run_time)
            for job in jobs
        ]
    pyplot = load_pyplot() if args.plot else None  # fail before a long run, not after
    results = compare(
        jobs,
        shares=pool.shares,
        capacity=pool.capacity,
        tick_s=args.tick,
        settings=_settings(pool, args),
        record_timeline=bool(args.plot),
        groups=pool.groups,
    )
    old = pool_policy(load_model(args.compare), pool.name) if args.compare else None  # the same pool, other file
    if old is not None:
        results[COMPARED] = simulate(
            jobs,
            shares=old.shares,
            capacity=old.capacity,
            tick_s=args.tick,
            settings=_settings(old, args),
            record_timeline=bool(args.plot),
            groups=old.groups,
        )
    if pyplot is not None:
        shares = run_shares(pool.shares, old.shares if old is not None else None)
        write_plot(pyplot, results, Path(args.plot), pool=pool.name, capacity=pool.capacity, shares=shares)
    if args.json:
        print(json.dumps(comparison_json(results), indent=2))
    else:
        print(table(results))
    return 0


def _run_sweep(args: argparse.Namespace, pool: PoolPolicy, classes: dict[str, int]) -> int:
    for option, given in (
        ("--compare", args.compare),
        ("--plot", args.plot),
        ("--skip-other-types", args.skip_other_types),
        ("--declared-run-time", args.declared_run_time),
    ):
        if given:
            raise GovernanceError.single(option, "not with --sweep", given, "a single simulate run")
    if args.processes is not None and args.processes < 1:
        raise GovernanceError.single("--processes", "not a number of processes", args.processes, "1 or more")
    grid = parse_grid(
        args.grid, teams=[s.name for s in pool.shares], size=sum(pool.capacity.values()), base=_settings(pool, args)
    )
    outcomes = run_sweep(
        args.trace,
        grid,
        shares=pool.shares,
        capacity=pool.capacity,
        tick_s=args.tick,
        groups=pool.groups,
        processes=args.processes,
        classes=classes,
    )
    print(json.dumps(sweep_json(outcomes), indent=2) if args.json else sweep_table(outcomes))
    return 0


def _run_import(args: argparse.Namespace) -> int:
    options = ImportOptions(
        instance_type=args.instance_type,
        priorities=priorities(args.priority),
        checkpointable_teams=frozenset(args.checkpointable),
    )
    imported = args.reader(args.file, options)
    written = write_trace(imported.jobs, args.output)
    warning = imported.warning()
    print(f"wrote {counted(written, 'job')} to {args.output}" + (f"; {warning}" if warning else ""), file=sys.stderr)
    return 0


def _run_openb(args: argparse.Namespace) -> int:
    mapping = OpenbMapping(instance_type=args.instance_type)
    since = args.since_day * 86_400
    written = write_trace((job for job in convert_openb(args.source, mapping) if job.submit_time >= since), args.output)
    print(f"wrote {counted(written, 'job')} to {args.output}", file=sys.stderr)
    return 0
