"""The start-time forecast of `gpu-governance status` (constructs_lib/simulator/forecast.py):
each waiting job's, and with ``--if-submitted`` a job's before it is submitted. No aws_cdk import."""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict, dataclass, replace

from constructs_lib.core.errors import GovernanceError, Problem

IF_SUBMITTED = "if-submitted"  # the job id the hypothetical job carries in the replay
JOB_OPTIONS = ("instance_type", "count", "priority", "run_time")
_RUN_TIME = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3_600, "d": 86_400}


def add_arguments(status: argparse.ArgumentParser) -> None:
    status.add_argument(
        "--history",
        metavar="TRACE",
        help="past jobs (a simulator trace: `gpu-governance trace from-batch|from-sacct|from-kueue`): "
        "run times of jobs that declare none, for the forecast",
    )
    status.add_argument(
        "--if-submitted",
        action="store_true",
        help="forecast when a job would start if submitted now: --instance-type, --count, --priority, --run-time",
    )
    status.add_argument("--instance-type", help="with --if-submitted: the job's instance type")
    status.add_argument("--count", help="with --if-submitted: instances (Slurm: nodes)")
    status.add_argument(
        "--priority",
        help="with --if-submitted: a priority class (its weight) or a number, as the scheduler orders jobs (default 0)",
    )
    status.add_argument("--run-time", help="with --if-submitted: declared run time, seconds or 90m, 3h, 2d")


@dataclass(frozen=True, kw_only=True)
class Hypothetical:
    pool: str
    instance_type: str
    count: int
    priority: int
    run_time_s: float | None


def hypothetical(args: argparse.Namespace, model, team, pools) -> Hypothetical | None:
    """The job ``--if-submitted`` asks about, every bad option named at once (None: not asked)."""
    given = {f"--{o.replace('_', '-')}": getattr(args, o) for o in JOB_OPTIONS if getattr(args, o) is not None}
    if not args.if_submitted:
        if given:
            raise GovernanceError(
                [
                    Problem(
                        path=option, wrong="only with --if-submitted", value=value, allowed=f"--if-submitted {option}"
                    )
                    for option, value in given.items()
                ]
            )
        return None
    problems: list[Problem] = []
    if args.job is not None:
        problems.append(Problem(path="--job", wrong="not with --if-submitted", value=args.job, allowed="one of them"))
    if len(pools) != 1:
        problems.append(
            Problem(
                path="--pool",
                wrong="needed with --if-submitted: the team has a quota in several pools",
                value=args.pool,
                allowed=f"one of {', '.join(p.name for p in pools)}",
            )
        )
        raise GovernanceError(problems)
    [pool] = pools
    capacity = pool.capacity
    if args.instance_type not in capacity:
        problems.append(
            Problem(
                path="--instance-type",
                wrong=f"not an instance type of pool {pool.name}",
                value=args.instance_type,
                allowed=f"one of {', '.join(sorted(capacity))}",
            )
        )
    count = _whole(args.count)
    share = next(s for s in pool.shares if s.name == team.name)
    ceiling = (
        share.ceiling(args.instance_type, capacity[args.instance_type]) if args.instance_type in capacity else None
    )
    if count is None or count < 1 or (ceiling is not None and count > ceiling):
        problems.append(
            Problem(
                path="--count",
                wrong="not a number of instances the team may hold here"
                if ceiling is None or count is None or count < 1
                else f"more than team {team.name} can ever hold of {args.instance_type} in pool {pool.name}",
                value=args.count,
                allowed=f"a whole number 1 to {ceiling}" if ceiling else "a whole number >= 1",
            )
        )
    priority = _priority(args.priority, model, problems)
    run_time = _run_time(args.run_time, problems)
    if problems:
        raise GovernanceError(problems)
    return Hypothetical(
        pool=pool.name, instance_type=args.instance_type, count=count, priority=priority, run_time_s=run_time
    )


def _whole(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _priority(text: str | None, model, problems: list[Problem]) -> int:
    if text is None:
        return 0
    classes = {c.name: c.weight for c in model.priority_classes}
    if text in classes:
        return classes[text]
    try:
        return int(text)
    except ValueError:
        problems.append(
            Problem(
                path="--priority",
                wrong="not a priority class of the governance file, nor a number",
                value=text,
                allowed=f"one of {', '.join(classes) or '(none)'}, or an integer",
            )
        )
        return 0


def _run_time(text: str | None, problems: list[Problem]) -> float | None:
    if text is None:
        return None
    match = _RUN_TIME.fullmatch(text.strip())
    seconds = float(match[1]) * _SECONDS[match[2]] if match else 0.0
    if seconds <= 0:
        problems.append(
            Problem(
                path="--run-time",
                wrong="not a run time",
                value=text,
                allowed="seconds > 0, or a number with m, h or d (90m, 3h, 2d)",
            )
        )
        return None
    return seconds


def history_of(args: argparse.Namespace):
    """The run times ``--history`` gives (None: no history)."""
    from constructs_lib.simulator.forecast import RunTimes
    from constructs_lib.simulator.traces import read_trace

    return None if args.history is None else RunTimes.from_trace(read_trace(args.history))


def if_submitted(pool, observation, status, asked: Hypothetical, *, team: str, now: float, history) -> dict:
    """The forecast of the job ``--if-submitted`` describes, as one JSON object."""
    from constructs_lib.simulator.forecast import LiveJob, forecast, live_pool, why_no_forecast

    why_not = why_no_forecast(observation)
    if why_not is not None:
        raise GovernanceError.single("--if-submitted", why_not, pool.name, "a Batch quota-share or Slurm pool")
    live = live_pool(pool, observation, status, now)
    job = LiveJob(
        job_id=IF_SUBMITTED,
        team=team,
        instance_type=asked.instance_type,
        count=asked.count,
        priority=asked.priority,
        submitted_at=now,
        running=False,
        run_time_s=asked.run_time_s,
    )
    found = forecast(pool, replace(live, jobs=(*live.jobs, job)), [IF_SUBMITTED], history=history)[IF_SUBMITTED]
    return {
        "team": team,
        "pool": pool.name,
        "job": asdict(asked),
        "forecast": found.as_json(),
        "notes": [*status.notes, *live.notes],
    }


def render_if_submitted(found: dict) -> str:
    job = found["job"]
    declared = f", declared run time {job['run_time_s']:.0f} s" if job["run_time_s"] else ""
    lines = [
        f"{found['team']} in pool {found['pool']}: a job of {job['count']} x {job['instance_type']} at priority "
        f"{job['priority']}{declared}, submitted now, {found['forecast']['words']}"
    ]
    return "\n".join([*lines, *(f"  note: {n}" for n in found["notes"])])
