"""`gpu-governance status --team TEAM`: why is my job waiting, per backend, in plain words.

Batch quota-share pools are read with AWS credentials (the team's submission role is enough:
``batch:GetJobQueueSnapshot``, ``batch:ListServiceJobs``, ``batch:DescribeServiceJob``,
``batch:ListQuotaShares`` for a team with a GPU-hour limit, and
``ssm:GetParameter`` on the team's training plans parameter when a window of the team feeds
training jobs).
HyperPod EKS pools are read from `kubectl get workloads -n hyperpod-ns-TEAM -o json` and
`kubectl get clusterqueues -o json`, run here or given as files; Slurm pools from `squeue`, run
here or given as a file. Exit codes: 0 shown, 1 the backend could not be read (AWS refused, no
credentials, command failed), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from constructs_lib.backends import backend_of
from constructs_lib.cli import status_forecast
from constructs_lib.cli.config import add_config_arguments, model_from
from constructs_lib.core.errors import GovernanceError

EXIT_OK, EXIT_UNREADABLE, EXIT_BAD_INPUT = 0, 1, 2


class Unreadable(Exception):
    """A backend could not be read; the message names what is missing (each backend's ``status``
    module raises it)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    status = subparsers.add_parser("status", help="your team's use and jobs per pool, and why each waiting job waits")
    status.add_argument("--team", required=True, help="the team (quota share, HyperPod namespace, Slurm account)")
    status.add_argument("--pool", help="one pool (default: every pool the team has a quota in)")
    status.add_argument("--job", help="show this job (and the team's waiting jobs ahead of it)")
    status.add_argument("--json", action="store_true", help="print one JSON list: an object per pool read")
    add_config_arguments(status)
    status.add_argument(
        "--workloads",
        help="HyperPod EKS: JSON of `kubectl get workloads -n hyperpod-ns-TEAM -o json` (default: run it)",
    )
    status.add_argument(
        "--cluster-queues", help="HyperPod EKS: JSON of `kubectl get clusterqueues -o json` (default: run it)"
    )
    status.add_argument(
        "--squeue",
        help="Slurm: output of `TZ=UTC SLURM_TIME_FORMAT=standard squeue --noheader --array "
        "--states=PENDING,RUNNING -o '...'` (default: run it; see docs/status.md)",
    )
    status.add_argument("--region", help="AWS region of the capacity account (default: from the model)")
    status_forecast.add_arguments(status)
    status.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    from constructs_lib.member.waiting import explain, render
    from constructs_lib.model.policy import compile_policy
    from constructs_lib.simulator.forecast import with_forecasts
    from gpu_governance_runtime.policy import parse_policy

    model = model_from(args)
    team = next((t for t in model.teams if t.name == args.team), None)
    if team is None:
        raise GovernanceError.single(
            "--team", "no such team", args.team, f"one of {', '.join(t.name for t in model.teams)}"
        )
    pools = [p for p in model.pools if p.name in team.quotas and _reader(p)]
    if args.pool is not None:
        pools = [p for p in pools if p.name == args.pool]
        if not pools:
            allowed = [p.name for p in model.pools if p.name in team.quotas and _reader(p)]
            raise GovernanceError.single(
                "--pool",
                f"not a pool team {team.name} has a quota in that status reads",
                args.pool,
                f"one of {', '.join(allowed) or '(none)'}",
            )
    policy = parse_policy(compile_policy(model))
    asked = status_forecast.hypothetical(args, model, team, [policy.pool(p.name) for p in pools])
    history = status_forecast.history_of(args)
    now = datetime.now(UTC)
    statuses = []
    for pool in pools:
        try:
            observation = _reader(pool).read(args, policy.pool(pool.name), model)
        except Unreadable as error:
            print(f"gpu-governance status: pool {pool.name}: {error}", file=sys.stderr)
            return EXIT_UNREADABLE
        status = explain(
            policy.pool(pool.name),
            team.name,
            observation,
            windows=policy.capacity_windows,
            now=now,
            preset=team.preset.value if team.preset else None,
            gpu_hour_limit=(team.gpu_hour_limit.hours, team.gpu_hour_limit.period.value)
            if team.gpu_hour_limit
            else None,
        )
        if asked is not None:
            found = status_forecast.if_submitted(
                policy.pool(pool.name), observation, status, asked, team=team.name, now=now.timestamp(), history=history
            )
            print(json.dumps(found, indent=2) if args.json else status_forecast.render_if_submitted(found))
            return EXIT_OK
        statuses.append(
            with_forecasts(policy.pool(pool.name), observation, status, now=now.timestamp(), history=history)
        )
    if args.job is not None:
        statuses = [_only_job(s, args.job) for s in statuses]
        if not any(s.jobs for s in statuses):
            raise GovernanceError.single(
                "--job",
                f"no job of team {team.name} with this id or name in the pools read",
                args.job,
                "a running or waiting job of the team",
            )
    print(json.dumps([asdict(s) for s in statuses], indent=2, default=str) if args.json else render(statuses))
    return EXIT_OK


def _reader(pool):
    """The ``status`` module of ``pool``'s backend (None: status does not read its pools)."""
    return backend_of(pool).part("status")


def _only_job(status, job: str):
    return replace(status, jobs=tuple(j for j in status.jobs if job in (j.job_id, j.name)))


def text_of(path: str | None, option: str, command: tuple[str, ...], env: dict | None = None) -> str:
    """A file's text, or the command's output when no file is given."""
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise GovernanceError.single(
                option, "cannot read the file", path, f"a readable file ({error.strerror})"
            ) from None
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Unreadable(f"`{' '.join(command)}` could not run ({error}); give its output with {option} FILE") from None
    if result.returncode != 0:
        raise Unreadable(f"`{' '.join(command)}` failed: {result.stderr.strip()[:300]}")
    return result.stdout


def kueue_status(args: argparse.Namespace, pool, tenants):
    """How a backend whose teams queue with Kueue is read (its ``status`` part): `kubectl get
    workloads -n <the team's namespace> -o json` and `kubectl get clusterqueues -o json`, run here
    or given as files; ``tenants`` names the namespaces and ClusterQueues (tenancy.kubernetes)."""
    from constructs_lib.member.kueue import kueue_observation
    from constructs_lib.member.status import read_json

    namespace = tenants.namespace(args.team)
    workloads = text_of(args.workloads, "--workloads", ("kubectl", "get", "workloads", "-n", namespace, "-o", "json"))
    try:
        queues = text_of(args.cluster_queues, "--cluster-queues", ("kubectl", "get", "clusterqueues", "-o", "json"))
    except Unreadable:
        queues = None  # cluster-scoped: a namespace-level member may not list them; the jobs still explain
    try:
        return kueue_observation(
            read_json(workloads, "workloads"), queues and read_json(queues, "cluster queues"), pool, args.team, tenants
        )
    except (ValueError, KeyError, TypeError) as error:
        raise GovernanceError.single(
            "--workloads/--cluster-queues",
            "not Kueue objects as kubectl prints them",
            str(error)[:200],
            "`kubectl get workloads|clusterqueues -o json` output",
        ) from None
