"""The reclaim controller Lambda: one tick per scheduled invocation (reserved concurrency 1, so
ticks never overlap). Dry-run unless ``DRY_RUN=false``.

Environment:
  POLICY_PATH        compiled policy document (default: gpu_governance_runtime/policy.json in the asset)
  RECLAIM_TARGETS    JSON list, one entry per governed pool:
                     {"pool": NAME, "job_queue": ARN}                       batch_fair_share / batch_quota_share
                     {"pool": NAME, "instance_id": ID, "instance_type": T}  hyperpod_slurm (head node)
                     {"pool": NAME, "eks_cluster": NAME, "cluster_arn": ARN, "gpus_per_instance": {T: N}}  hyperpod_eks
                     (usage, and the teams' GPU-hour limits on their compute quotas: backends/kueue_usage.py, gpu_hours)
  LEDGER_TABLE       DynamoDB table of actions (partition key ``action_id``)
  DRY_RUN            "false" to act; anything else plans, logs and publishes metrics only
  METRICS_NAMESPACE  CloudWatch namespace (default GpuGovernance/Reclaim)
  MIN_RUN_TIME_S, MAX_PREEMPTIONS_PER_TICK   planner anti-thrash settings (a pool's re-borrow backoff and
                     borrow horizon are in the policy document, from the governance file's ``reclaim``)
  TICK_SECONDS       the schedule's interval: the time each tick's usage (instance-hours) covers (default 60)
  USAGE_TARGETS      JSON list of hyperpod_slurm pools whose usage is read hourly from Slurm accounting (the backend's usage observer):
                     {"pool": NAME, "instance_id": ID, "instance_type": T, "gpus_per_instance": N}
  RAISED_GUARANTEES_PARAMETER  optional: the SSM parameter of the guarantees the capacity controller has
                     raised (capacity/raised.py, read by raised_guarantees.py); each tick plans and reports with them added
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from .. import api_check, raised_guarantees
from ..backends import Invocation, ReclaimClients, UsageTick, backend_of
from ..backends.base import DEFAULT_TICK_SECONDS, NO_DEADLINE, Adapter
from ..common import metrics
from ..common.action_ledger import (
    ABANDONED,
    CAPPED,
    DONE,
    FAILED,
    IN_GRACE,
    NOTICE,
    SUBMITTING,
    TERMINATED,
    TERMINATING,
    ActionKey,
    Ledger,
)
from ..common.clients import SEND_ONCE, SUBMIT_ONCE, WITHIN_A_TICK
from ..common.handler import Environment, time_left as time_left_of
from ..common.log import write as log
from ..contract import (
    ENV_IN_VPC,
    ENV_LEDGER_TABLE,
    ENV_MAX_PREEMPTIONS_PER_TICK,
    ENV_METRICS_NAMESPACE,
    ENV_MIN_RUN_TIME_S,
    ENV_RAISED_GUARANTEES,
    ENV_RECLAIM_TARGETS,
    ENV_TICK_SECONDS,
    ENV_USAGE_TARGETS,
    POOL_ERRORS,
    RECLAIM_NAMESPACE,
)
from ..planners.reclaim import (
    Plan,
    PoolState,
    Preemption,
    Settings,
    comes_back,
    plan_tick,
    share_usage,
)
from ..policy import Policy, PoolPolicy, policy_path, read_policy_file
from ..usage import usage_records
from . import fair_share, gpu_hours, run_time
from .reports import promise_records, share_metrics

DEFERRED = "deferred"  # too little of the invocation left to start the action

batch = boto3.client("batch", config=WITHIN_A_TICK)
batch_submit = boto3.client("batch", config=SUBMIT_ONCE)  # a stopped job's copy: one request (common/batch_copy.py)
ssm = boto3.client("ssm", config=WITHIN_A_TICK)
eks = boto3.client("eks", config=WITHIN_A_TICK)
sagemaker = boto3.client("sagemaker", config=WITHIN_A_TICK)
events = boto3.client("events", config=SEND_ONCE)  # the GPU-hour notice: one request (common/clients.py)
dynamodb = boto3.resource("dynamodb", config=WITHIN_A_TICK)
# Checked against the runtime's boto3 at cold start (api_check); a test keeps it equal to the calls in the code.
REQUIRED_OPERATIONS = {
    "batch": (
        "DescribeJobs",
        "DescribeQuotaShare",
        "DescribeServiceJob",
        "GetJobQueueSnapshot",
        "ListJobs",
        "ListQuotaShares",
        "ListServiceJobs",
        "SubmitJob",
        "TerminateJob",
        "TerminateServiceJob",
        "UpdateQuotaShare",
    ),
    "ssm": ("CancelCommand", "GetCommandInvocation", "GetParameter", "SendCommand"),
    "dynamodb": ("GetItem", "PutItem", "UpdateItem"),
    "eks": ("DescribeCluster",),
    "sagemaker": ("DescribeComputeQuota", "ListComputeQuotas", "UpdateComputeQuota"),
    "events": ("PutEvents",),
}
if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
    api_check.require(
        {
            "batch": batch,
            "ssm": ssm,
            "dynamodb": dynamodb.meta.client,
            "eks": eks,
            "sagemaker": sagemaker,
            "events": events,
        },
        REQUIRED_OPERATIONS,
        namespace=Environment(os.environ).text(ENV_METRICS_NAMESPACE, RECLAIM_NAMESPACE),
    )


@dataclass(frozen=True, kw_only=True)
class ReclaimSettings:
    """The function's environment (the module docstring lists it), read once per invocation."""

    policy_path: Path
    ledger_table: str
    dry_run: bool
    namespace: str
    planner: Settings  # the anti-thrash limits; each pool's policy adds its own (``PoolPolicy.settings``)
    tick_seconds: float
    in_vpc: bool
    reclaim_targets: tuple[Mapping[str, Any], ...]
    usage_targets: tuple[Mapping[str, Any], ...]
    raised_guarantees: str | None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ReclaimSettings:
        read = Environment(environ)
        return cls(
            policy_path=policy_path(environ),
            ledger_table=read.text(ENV_LEDGER_TABLE, allowed="the DynamoDB table of actions"),
            dry_run=read.dry_run(),
            namespace=read.text(ENV_METRICS_NAMESPACE, RECLAIM_NAMESPACE),
            planner=Settings(
                min_run_time_s=read.number(ENV_MIN_RUN_TIME_S, Settings().min_run_time_s),
                max_preemptions_per_tick=read.whole(ENV_MAX_PREEMPTIONS_PER_TICK, Settings().max_preemptions_per_tick),
            ),
            tick_seconds=read.number(ENV_TICK_SECONDS, DEFAULT_TICK_SECONDS, above=True),
            in_vpc=read.switch(ENV_IN_VPC),
            reclaim_targets=tuple(read.json(ENV_RECLAIM_TARGETS, list, [])),
            usage_targets=tuple(read.json(ENV_USAGE_TARGETS, list, [])),
            raised_guarantees=read.text(ENV_RAISED_GUARANTEES, None),
        )


@dataclass(frozen=True, kw_only=True)
class TickResult:
    pool: str
    preemptions: int
    starts: int
    acted: int
    failed: int


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    environment = ReclaimSettings.from_environ(os.environ)
    policy = read_policy_file(environment.policy_path)
    ledger = Ledger(dynamodb.Table(environment.ledger_table))
    invocation = Invocation(time_left_of(context), environment.tick_seconds)
    raises = _read_once(environment.raised_guarantees)
    results = []
    for target in environment.reclaim_targets:
        try:
            result = _tick_target(target, policy, environment, ledger, invocation, raises)
            results += [result] if result is not None else []
        except Exception as error:  # noqa: BLE001 - one pool's bad day is its own: every other pool still gets its tick
            _pool_failed(target.get("pool", "?"), error, environment.namespace)
    for target in environment.usage_targets:
        try:
            _read_usage(target, policy, environment, ledger, invocation)
        except Exception as error:  # noqa: BLE001 - as above
            _pool_failed(target.get("pool", "?"), error, environment.namespace)
    return {"dry_run": environment.dry_run, "pools": [vars(r) for r in results]}


def _read_once(name: str | None) -> Callable[[float], list[Mapping[str, Any]]]:
    """The raised guarantees, read by the first pool's tick that needs them (a failed read fails
    that pool and is tried again by the next)."""
    read: list[list[Mapping[str, Any]]] = []

    def raises(now: float) -> list[Mapping[str, Any]]:
        if not read:
            read.append(
                raised_guarantees.read(ssm=ssm, name=name, now=datetime.fromtimestamp(now, UTC)) if name else []
            )
        return read[0]

    return raises


def _tick_target(
    target: Mapping[str, Any],
    policy: Policy,
    environment: ReclaimSettings,
    ledger: Ledger,
    invocation: Invocation,
    raises: Callable[[float], list[Mapping[str, Any]]],
) -> TickResult | None:
    """One RECLAIM_TARGETS entry's tick: its usage only where the backend's scheduler reclaims
    natively, else read, plan and act through its adapter; None when it is not ticked now."""
    pool = policy.pool(target["pool"])
    time_left, tick_seconds, dry_run = invocation.time_left, environment.tick_seconds, environment.dry_run
    observe_usage = backend_of(pool).observe_usage
    if observe_usage is not None:  # usage only: the backend's scheduler reclaims natively
        now = time.time()
        observe_usage(
            target,
            pool,
            UsageTick(
                clients=_clients(),
                namespace=environment.namespace,
                now=now,
                tick_seconds=tick_seconds,
                time_left=time_left,
                in_vpc=environment.in_vpc,
                hour_limits=gpu_hour_limits(target, pool, ledger, now=now, tick_seconds=tick_seconds, dry_run=dry_run),
            ),
        )
        return None
    adapter = build_adapter(target, policy, invocation)
    if time_left() < adapter.action_seconds:
        log(
            {
                "event": "pool_deferred",
                "pool": target["pool"],
                "reason": f"{time_left():.0f} s left; the next tick reads it",
            }
        )
        return None
    now = time.time()
    # the pool's re-borrow backoff and borrow horizon come from the policy (governance file ``reclaim``)
    return run_tick(
        target["pool"],
        adapter,
        ledger,
        settings=pool.settings(environment.planner),
        dry_run=dry_run,
        namespace=environment.namespace,
        now=now,
        time_left=time_left,
        raises=raises(now),
        tick_seconds=tick_seconds,
        hour_limits=gpu_hour_limits(target, pool, ledger, now=now, tick_seconds=tick_seconds, dry_run=dry_run),
    )


def _read_usage(
    target: Mapping[str, Any], policy: Policy, environment: ReclaimSettings, ledger: Ledger, invocation: Invocation
) -> None:
    """One USAGE_TARGETS entry: its usage read from the backend's accounting through its head node."""
    pool = policy.pool(target["pool"])
    from_accounting = backend_of(pool).usage_from_accounting
    if from_accounting is None:
        raise ValueError(
            f"USAGE_TARGETS: pool {pool.name!r} has backend {pool.backend!r}; its usage is not read from accounting"
        )
    head_node = build_adapter(target, policy, invocation)
    time_left = invocation.time_left
    if time_left() < head_node.action_seconds:
        log(
            {
                "event": "usage_deferred",
                "pool": target["pool"],
                "reason": f"{time_left():.0f} s left; the next tick reads it",
            }
        )
        return
    from_accounting(target, pool, head_node, ledger=ledger, namespace=environment.namespace).observe(time.time())


def gpu_hour_limits(
    target: Mapping[str, Any], pool: PoolPolicy, ledger: Ledger, *, now: float, tick_seconds: float, dry_run: bool
) -> Callable[[Any], Any] | None:
    """The pool's GPU-hour limits: given what the tick read (the pool's state, or its usage rows),
    counts each limited team's GPU hours and switches its admissions as its backend declares
    (``Backend.gpu_hour_limits``). None when the backend has no switch or no team a limit."""
    limits = backend_of(pool).gpu_hour_limits
    if limits is None or not any(s.gpu_hour_limit or (s.paused and limits.queue) for s in pool.shares):
        return None
    clients = _clients()
    return lambda observed: gpu_hours.enforce(
        pool,
        limits.in_use(observed),
        ledger=ledger,
        switch=lambda team: limits.switch(clients, target, team),
        notify=gpu_hours.event_sender(clients.events),
        now=now,
        tick_seconds=tick_seconds,
        dry_run=dry_run,
        pool_gpus=limits.pool_gpus(target),
        queue=None if limits.queue is None else lambda team: limits.queue(clients, target, team),
    )


def _clients() -> ReclaimClients:
    # read when a tick begins, not at import: tests and the cold-start check see the module's clients
    return ReclaimClients(batch=batch, batch_submit=batch_submit, ssm=ssm, eks=eks, sagemaker=sagemaker, events=events)


def _pool_failed(pool: str, error: Exception, namespace: str) -> None:
    # One pool failing to read must not stop the others. The invocation still succeeds, so the
    # function's error alarm never sees this: the PoolErrors metric (alarmed) does.
    log({"event": "pool_failed", "pool": pool, "error": f"{type(error).__name__}: {error}"})
    metrics.publish(namespace, {"Pool": pool}, {POOL_ERRORS: (1, "Count")})


def build_adapter(target: Mapping[str, Any], policy: Policy, invocation: Invocation = NO_DEADLINE) -> Adapter:
    """The adapter a tick reads (and acts on) the target's pool through, as its backend builds it."""
    pool = policy.pool(target["pool"])
    backend = backend_of(pool)
    if backend.reclaim_adapter is None:
        raise ValueError(f"RECLAIM_TARGETS: pool {pool.name!r} has backend {pool.backend!r}; {backend.why_no_adapter}")
    return backend.reclaim_adapter(target, pool, policy, _clients(), invocation)


def run_tick(
    pool: str,
    adapter: Adapter,
    ledger: Ledger,
    *,
    settings: Settings,
    dry_run: bool,
    namespace: str,
    now: float,
    emit: Callable[[Mapping[str, Any]], None] = log,
    time_left: Callable[[], float] = lambda: float("inf"),
    raises: Iterable[Mapping[str, Any]] = (),
    tick_seconds: float = DEFAULT_TICK_SECONDS,
    hour_limits: Callable[[PoolState], Any] | None = None,
) -> TickResult:
    """``hour_limits``: given the pool as read, counts and enforces its teams' GPU-hour limits (reclaim.gpu_hours)."""
    tick = _Tick(pool, adapter, ledger, settings, now, adapter.acts and not dry_run, time_left, emit)
    if tick.acting:  # jobs earlier ticks stopped come back before anything else is stopped
        _resume(tick)
    state = _read(tick, raises, tick_seconds)
    plan = plan_tick(state, settings) if adapter.acts else Plan(starts=(), preemptions=(), capped=False)
    acted, failed, blocked = _preempt(tick, plan, state)
    _start(tick, plan, blocked)
    _report(tick, state, plan, namespace=namespace, tick_seconds=tick_seconds)
    if (
        hour_limits is not None
    ):  # after the tick's metrics: a limit that cannot be counted fails the pool, not its metrics
        hour_limits(state)
    return TickResult(pool=pool, preemptions=len(plan.preemptions), starts=len(plan.starts), acted=acted, failed=failed)


@dataclass(frozen=True)
class _Tick:
    """What one pool's tick reads and acts with."""

    pool: str
    adapter: Adapter
    ledger: Ledger
    settings: Settings
    now: float
    acting: bool  # the adapter acts and the function is not in dry run
    time_left: Callable[[], float]
    emit: Callable[[Mapping[str, Any]], None]


def _resume(tick: _Tick) -> None:
    for resumed in tick.adapter.resume(tick.ledger, tick.now):
        tick.emit(
            {
                "event": "preemption_resumed",
                "pool": tick.pool,
                "job_id": resumed.job_id,
                "outcome": resumed.outcome,
                "detail": resumed.detail,
                "copy": resumed.copy,
            }
        )


def _read(tick: _Tick, raises: Iterable[Mapping[str, Any]], tick_seconds: float) -> PoolState:
    """The pool as read, raised by the capacity controller, its jobs past their run-time limit
    stopped, with its decayed past usage."""
    settings = tick.settings
    state = raised_guarantees.with_raises(tick.adapter.read(tick.now), tick.pool, raises)
    state = run_time.enforce(  # jobs past their team's run-time limit: noticed, then stopped, before planning
        tick.pool,
        state,
        tick.adapter,
        tick.ledger,
        grace_s=settings.grace_s,
        acting=tick.acting,
        emit=tick.emit,
        act=lambda job_id, action, reason, call: _act(
            tick.ledger, tick.adapter, tick.pool, job_id, action, reason, tick.now, tick.acting, call, tick.time_left
        ),
    )
    if settings.usage_half_life_s is not None:  # recorded in dry run too: it is a reading, not an action
        past = fair_share.advance(
            tick.ledger, tick.pool, state, half_life_s=settings.usage_half_life_s, tick_seconds=tick_seconds
        )
        state = replace(state, past_usage=past)
        tick.emit(
            {
                "event": "decayed_usage",
                "pool": tick.pool,
                "half_life_s": settings.usage_half_life_s,
                "instance_hours": past,
            }
        )
    return state


def _preempt(tick: _Tick, plan: Plan, state: PoolState) -> tuple[int, int, set[str]]:
    """The plan's preemptions: (victims stopped, failed, the jobs they were for that must not start)."""
    acted = failed = 0
    blocked: set[str] = set()  # jobs whose victims were not all preempted: do not start them
    victims = {j.job_id: j for j in state.running}
    grace, now = tick.settings.grace_s, tick.now
    for preemption in plan.preemptions:
        stop_after = (
            _grace_ends(tick.ledger, tick.adapter, tick.pool, preemption, grace, now) if tick.acting and grace else now
        )
        if now < stop_after:
            outcome = IN_GRACE  # recorded; the tick at or after stop_after stops it, if the plan still needs it
        else:
            outcome = _act(
                tick.ledger,
                tick.adapter,
                tick.pool,
                preemption.job_id,
                "preempt",
                preemption.reason,
                now,
                tick.acting,
                lambda progress: tick.adapter.preempt(preemption, progress),
                tick.time_left,
                cap=tick.settings.max_preemptions_per_tick,
            )
        tick.emit(
            {
                "event": "preemption",
                "pool": tick.pool,
                "job_id": preemption.job_id,
                "share": preemption.share,
                "kind": preemption.kind,
                "count": preemption.count,
                "instance_type": preemption.instance_type,
                "for_job": preemption.for_job,
                "reason": preemption.reason,
                # no copy follows (planner.comes_back): its work is lost, its owner reads why on the job
                "stopped_for_good": not comes_back(victims[preemption.job_id]),
                "dry_run": not tick.acting,
                "outcome": outcome,
                "grace_s": grace,
                **({"stop_after": stop_after} if outcome == IN_GRACE else {}),
            }
        )
        acted += outcome in (
            DONE,
            TERMINATED,
            SUBMITTING,
        )  # the victim stopped; its copy, if still owed, comes next tick
        failed += outcome == FAILED
        if outcome in (FAILED, ABANDONED, CAPPED, TERMINATING, "already_claimed", DEFERRED, IN_GRACE):
            blocked.add(preemption.for_job)
    return acted, failed, blocked


def _start(tick: _Tick, plan: Plan, blocked: set[str]) -> None:
    """The plan's starts: a borrowing start where the adapter re-routes borrowers, else the scheduler's."""
    for start in plan.starts:
        if start.job_id in blocked:
            outcome = "blocked"
        elif tick.acting and start.borrowed and tick.adapter.reroutes_borrowers:
            outcome = _act(
                tick.ledger,
                tick.adapter,
                tick.pool,
                start.job_id,
                "start",
                f"borrowing start of {start.job_id}",
                tick.now,
                True,
                lambda progress: tick.adapter.start(start, progress),
                tick.time_left,
            )
        else:
            outcome = "left_to_scheduler" if tick.acting else "planned"
        tick.emit(
            {
                "event": "start",
                "pool": tick.pool,
                "job_id": start.job_id,
                "share": start.share,
                "count": start.count,
                "instance_type": start.instance_type,
                "borrowed": start.borrowed,
                "dry_run": not tick.acting,
                "outcome": outcome,
            }
        )


def _report(tick: _Tick, state: PoolState, plan: Plan, *, namespace: str, tick_seconds: float) -> None:
    """The guarantee jobs kept waiting, and the tick's metrics (reclaim/reports.py, usage records)."""
    for wait in plan.waits:  # a guarantee job kept waiting by an anti-thrash limit: its team is starved
        tick.emit(
            {
                "event": "guarantee_wait",
                "pool": tick.pool,
                "job_id": wait.job_id,
                "share": wait.share,
                "count": wait.count,
                "instance_type": wait.instance_type,
                "reason": wait.reason,
                "dry_run": not tick.acting,
            }
        )
    pool, now, seen = tick.pool, tick.now, tick.adapter.preemptions_seen
    for record in share_metrics(pool, state, plan, namespace=namespace, now=now, seen=seen):
        tick.emit(record)
    for record in promise_records(pool, state, tick.settings, tick_seconds=tick_seconds, namespace=namespace):
        tick.emit(record)
    if tick.adapter.usage_from_queue:
        for record in usage_records(pool, share_usage(state), tick_seconds=tick_seconds, namespace=namespace, now=now):
            tick.emit(record)


def _grace_ends(ledger: Ledger, adapter: Adapter, pool: str, preemption: Preemption, grace: float, now: float) -> float:
    """When the victim's grace ends: the first tick that chose it records a notice, later ticks
    read it. Batch has no call that signals a running job short of stopping it
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_TerminateJob.html), so the notice
    is the ledger item and the ``preemption`` event with ``stop_after``."""
    key = ActionKey(pool=pool, job_id=preemption.job_id, attempt=adapter.attempt_of(preemption.job_id), action=NOTICE)
    return ledger.give_notice(key, now=now, grace=grace, reason=preemption.reason) + grace


def _act(
    ledger: Ledger,
    adapter: Adapter,
    pool: str,
    job_id: str,
    action: str,
    reason: str,
    now: float,
    acting: bool,
    call,
    time_left: Callable[[], float] = lambda: float("inf"),
    cap: int | None = None,
) -> str:
    """Claim, act, record. ``cap``: the pool's preemptions per minute, counted in the ledger."""
    if not acting:
        return "planned"
    if time_left() < adapter.action_seconds:
        return DEFERRED  # not claimed: the next tick plans it afresh
    key = ActionKey(pool=pool, job_id=job_id, attempt=adapter.attempt_of(job_id), action=action)
    if not ledger.claim(key, now=now, reason=reason):
        return "already_claimed"
    if cap is not None and not ledger.take_preemption(pool, now=now, cap=cap):
        ledger.record(
            key, status=FAILED, detail=f"{cap} preemptions of pool {pool} this minute already (a retried tick)"
        )
        return CAPPED
    ledger.mark_open(
        key, now=now
    )  # until it is settled, every tick looks at it (a stopped job must come back, a command's outcome be read)
    steps: list[str] = []

    def progress(status: str, **fields: Any) -> None:
        ledger.record(key, status=status, **fields)
        steps.append(status)

    try:
        result = call(progress)
    except (ClientError, BotoCoreError, RuntimeError) as error:
        # After a step that stopped the job, the action stays open at that step: the next tick finishes it.
        ledger.record(key, status=steps[-1] if steps else FAILED, detail=str(error))
        if not steps:
            ledger.close(key)
        return steps[-1] if steps else FAILED
    ledger.record(key, status=result.outcome, detail=result.detail, **({"new_job": result.copy} if result.copy else {}))
    if result.outcome not in (TERMINATED, SUBMITTING):
        ledger.close(key)
    return result.outcome
