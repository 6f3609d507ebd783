"""Why is my job waiting: the reasoning behind `gpu-governance status`, pure and backend-neutral.

Inputs are plain data: the pool's compiled policy (quotas, sharing strategies, borrow limits),
what a backend reader observed (use per share and the jobs, each with the reason the backend
itself gave, already sorted into a :data:`REASONS` code where the backend's words are clear) and
the capacity windows. Output: the team's use against its guarantee per instance type, and one
plain-words explanation per job. Readers live in ``constructs_lib.member.status``; the reasons
table is docs/status.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpu_governance_runtime.contract import SharingStrategy, lendable
from gpu_governance_runtime.limits import next_reset
from gpu_governance_runtime.planners.capacity import Window
from gpu_governance_runtime.planners.reclaim import is_guarantee_job, preemptible_in_share
from gpu_governance_runtime.policy import PoolPolicy

RUNNING, WAITING = "running", "waiting"
NOT_STARTABLE = frozenset(
    {"held", "dependency", "begin_time", "misconfigured", "too_large", "paused", "gpu_hour_limit"}
)

# Reason code -> what it means, in the words a member reads (docs/status.md says what to do).
REASONS = {
    "running": "running",
    "next": "next in line: it fits now and the scheduler should start it shortly",
    "lower_priority": "behind {ahead} higher-priority or older job(s) of your team",
    "share_at_limit": "your team uses {used} of its {quota} guaranteed {unit} and its sharing strategy ({strategy}) does not borrow",
    "borrow_limit": "borrowing at its limit: {limit}",
    "own_partition_full": (
        "your team uses {used} of its {quota} guaranteed {unit}, all its own partition {own_partition} holds; "
        "idle {unit} other teams lend are reached only through partition {borrow_partition} with QoS {borrow_qos}"
    ),
    "pool_full": "the pool is full ({in_use} of {capacity} {unit} in use); no idle capacity to borrow",
    "reclaiming": "inside your guarantee, but the pool is full: capacity is being reclaimed from teams that borrowed it",
    "making_way": "inside your guarantee once your team's lower-priority jobs make way: they are preempted for it (and capacity reclaimed from teams that borrowed it)",
    "window_not_active": "needs {instance_type}, which capacity window {window} supplies from {start}",
    "too_large": "asks for {count} {unit}, more than your team can ever hold here ({ceiling})",
    "held": "held: release it (or ask an administrator) before it can start",
    "paused": "team paused: no new job of your team starts until the platform team resumes it (`gpu-governance team resume`); running jobs finish. "
    "A Batch quota share still starts jobs queued before it was disabled, so the reclaim controller terminates them (submit again once resumed); "
    "on HyperPod EKS queued tasks may still start (a disabled compute quota's effect is not documented)",
    "gpu_hour_limit": "team reached its GPU-hour limit for the {period} ({hours} GPU hours): too few are left for this job; the count starts again at {resets}. "
    "On a Batch quota share the reclaim controller terminates the team's queued jobs meanwhile (submit again then)",
    "dependency": "waits for another job it depends on",
    "begin_time": "not allowed to start before its begin time (a requeued job waits about two minutes)",
    "preempted": "was preempted and is queued again",
    "misconfigured": "cannot run as submitted",
    "backend": "the scheduler says",
}


@dataclass(frozen=True, kw_only=True)
class ObservedJob:
    job_id: str
    team: str
    state: str  # RUNNING, WAITING, or the backend's own word for any other state
    instance_type: str | None = None
    count: int = 0
    priority: int = 0
    priority_known: bool = True  # False where the backend's listing does not give it (a running Batch service job)
    submitted_at: float = 0.0
    name: str = ""
    reason: str | None = None  # a REASONS code when the backend's words say it plainly
    backend_reason: str = ""  # the backend's own words, always shown
    details: Mapping[str, object] = field(default_factory=dict)  # figures in the backend's own units (Kueue's GPUs)
    training_plan: str | None = (
        None  # the SageMaker training plan a Batch service job asked for (ResourceConfig.TrainingPlanArn)
    )
    # the reclaim planner's RunningJob.restartable: status reads pools whose backend brings every
    # job back (quota-share, HyperPod EKS, Slurm), so in-share preemption may set any of them aside
    restartable: bool = True
    # what the start-time forecast reads (constructs_lib/simulator/forecast.py), where the backend says
    started_at: float | None = None  # a running job's start
    run_time_s: float | None = None  # its declared run time (time limit)


@dataclass(frozen=True, kw_only=True)
class Observation:
    backend: str
    pool: str
    unit: str  # what quotas count: "instances", "nodes", "GPUs"
    in_use: Mapping[str, Mapping[str, int]]  # share -> instance type -> units held
    jobs: tuple[ObservedJob, ...]
    notes: tuple[str, ...] = ()  # what the reader could not see
    guaranteed: Mapping[str, int] | None = None  # the team's quota in ``unit`` where it is not the policy's (Kueue)
    # The team's active training plans as its training plans parameter lists them (None: not read)
    training_plans: tuple[Mapping[str, str], ...] | None = None
    # the team's quota share or compute quota admits nothing now (disabled at its GPU-hour limit, reclaim/gpu_hours.py)
    admission_off: bool = False


@dataclass(frozen=True, kw_only=True)
class Usage:
    instance_type: str
    in_use: int
    guaranteed: int
    borrowed: int
    lent: int  # idle guarantee others may be using (none for a reserve share, at most its lending limit)


@dataclass(frozen=True, kw_only=True)
class Explanation:
    job_id: str
    name: str
    state: str
    reason: str
    text: str
    position: int | None = None
    backend_reason: str = ""
    training_plan: str = ""  # a running training job: on the team's plan or not (``on_plan``)
    # a waiting job's start: constructs_lib/simulator/forecast.py's StartForecast.as_json()
    forecast: Mapping[str, object] | None = None


@dataclass(frozen=True, kw_only=True)
class Status:
    team: str
    pool: str
    backend: str
    unit: str
    usage: tuple[Usage, ...]
    jobs: tuple[Explanation, ...]
    notes: tuple[str, ...] = field(default=())


def explain(
    policy: PoolPolicy,
    team: str,
    observation: Observation,
    *,
    windows: Iterable[Window] = (),
    now: datetime,
    preset: str | None = None,
    gpu_hour_limit: tuple[int, str] | None = None,
) -> Status:
    """``gpu_hour_limit``: the team's (hours, period), which a job waiting for it is told with its reset."""
    share = next(s for s in policy.shares if s.name == team)
    waiting = sorted(
        (j for j in observation.jobs if j.team == team and j.state == WAITING),
        key=lambda j: (-j.priority, j.submitted_at, j.job_id),
    )
    position = {j.job_id: i + 1 for i, j in enumerate(waiting)}
    strategy = share.strategy.value + (f", preset {preset}" if preset else "")
    explanations = []
    for job in sorted(
        (j for j in observation.jobs if j.team == team),
        key=lambda j: (j.state != RUNNING, position.get(j.job_id, 0), j.job_id),
    ):
        if job.state != WAITING:
            explanations.append(_not_waiting(job, observation, now))
            continue
        # only jobs that could start count as ahead: a held or impossible job holds no one back
        ahead = [
            a
            for a in waiting[: position[job.job_id] - 1]
            if a.instance_type == job.instance_type and a.reason not in NOT_STARTABLE
        ]
        code, details = _waiting_reason(policy, share, observation, job, ahead, windows, now, gpu_hour_limit)
        details.update(
            unit=observation.unit, strategy=strategy, ahead=len(ahead), count=job.count, instance_type=job.instance_type
        )
        explanations.append(
            Explanation(
                job_id=job.job_id,
                name=job.name,
                state=job.state,
                reason=code,
                text=_waiting_text(code, details, job, observation, now, gpu_hour_limit),
                position=position[job.job_id],
                backend_reason=job.backend_reason,
            )
        )
    return Status(
        team=team,
        pool=observation.pool,
        backend=observation.backend,
        unit=observation.unit,
        usage=_usage(share, observation),
        jobs=tuple(explanations),
        notes=observation.notes,
    )


def _usage(share, observation: Observation) -> tuple[Usage, ...]:
    """The team's instances per type: in use, guaranteed, borrowed and lent."""
    mine = observation.in_use.get(share.name, {})
    quota = share.quota if observation.guaranteed is None else observation.guaranteed
    # Kueue's figures are GPUs, and no lending limit holds there (HyperPod compute quotas have none)
    lending_limit = share.lending_limit if observation.guaranteed is None else None
    return tuple(
        Usage(
            instance_type=t,
            in_use=mine.get(t, 0),
            guaranteed=quota.get(t, 0),
            borrowed=max(0, mine.get(t, 0) - quota.get(t, 0)),
            lent=min(
                max(0, quota.get(t, 0) - mine.get(t, 0)), lendable(share.strategy, quota.get(t, 0), lending_limit)
            ),
        )
        for t in sorted({*quota, *mine})
    )


def _not_waiting(job: ObservedJob, observation: Observation, now: datetime) -> Explanation:
    """A running job (and the training plan it runs on), or one in a state only the backend explains."""
    code = "running" if job.state == RUNNING else "backend"
    return Explanation(
        job_id=job.job_id,
        name=job.name,
        state=job.state,
        reason=code,
        text=REASONS[code] if job.state == RUNNING else job.backend_reason or job.state.lower(),
        backend_reason=job.backend_reason,
        training_plan=on_plan(job, observation.training_plans, now) if job.state == RUNNING else "",
    )


def _waiting_reason(
    policy: PoolPolicy,
    share,
    observation: Observation,
    job: ObservedJob,
    ahead: list[ObservedJob],
    windows: Iterable[Window],
    now: datetime,
    gpu_hour_limit: tuple[int, str] | None,
) -> tuple[str, dict]:
    """Why a waiting job waits: the backend's reason, else the GPU-hour limit, else what the
    policy and the pool's figures say (_computed); with the figures its text quotes."""
    code, details = job.reason, _figures(policy, share, observation, job)
    if code is None and observation.admission_off and gpu_hour_limit and not share.paused:
        code = "gpu_hour_limit"  # the share was disabled at the limit: nothing else matters until it resets
    if code is None:
        code, found = _computed(policy, share, observation, job, ahead, windows, now)
        details.update(found)
    return code, details


def _waiting_text(
    code: str,
    details: dict,
    job: ObservedJob,
    observation: Observation,
    now: datetime,
    gpu_hour_limit: tuple[int, str] | None,
) -> str:
    """The reason's sentence with its figures, and the scheduler's own words after it."""
    details = dict(details)
    if gpu_hour_limit:
        hours, period = gpu_hour_limit
        details.update(hours=hours, period=period, resets=f"{next_reset(period, now):%Y-%m-%d %H:%M} UTC")
    details.setdefault(
        "limit",
        f"your team holds {details['used']} {observation.unit}, and this job would pass its ceiling of {details['ceiling']}",
    )
    text = REASONS[code].format_map(_Figures(details))
    if not job.backend_reason:
        return text
    # the scheduler's own words, for searching its documentation
    if code in ("misconfigured", "backend", "preempted"):
        return f"{text}: {job.backend_reason}"
    return f"{text} (scheduler: {job.backend_reason})"


def on_plan(job: ObservedJob, plans: Iterable[Mapping[str, str]] | None, now: datetime) -> str:
    """Whether a running job is on the team's training plan, in words ("" when nothing is known:
    a job with no plan whose team's plans were not read)."""
    plans = None if plans is None else [p for p in plans if datetime.fromisoformat(p["ends"]) > now]
    if job.training_plan:
        if plans is None:
            return f"on training plan {job.training_plan}"
        mine = next((p for p in plans if p["arn"] == job.training_plan), None)
        return (
            f"on the team's training plan {job.training_plan} (window {mine.get('window', '?')})"
            if mine
            else f"on training plan {job.training_plan}, not one of the team's active plans"
        )
    owned = [p for p in plans or () if p["instance_type"] == job.instance_type]
    if owned:
        plan = max(owned, key=lambda p: p["ends"])
        return (
            f"on demand, not on the team's training plan {plan['arn']} of {job.instance_type} (window {plan.get('window', '?')}): "
            "submit with ResourceConfig.TrainingPlanArn (docs/team-guide.md)"
        )
    return "" if plans is None else "on demand (the team owns no active training plan of its instance type)"


class _Figures(dict):
    def __missing__(self, key: str) -> str:
        return "?"  # a figure the backend did not report


def _figures(policy: PoolPolicy, share, observation: Observation, job: ObservedJob) -> dict:
    kind = job.instance_type or ""
    capacity = policy.capacity.get(kind, 0)
    figures = {
        "used": observation.in_use.get(job.team, {}).get(kind, 0),
        "quota": share.quota.get(kind, 0),
        "ceiling": share.ceiling(kind, capacity) if capacity else 0,
        "capacity": capacity,
        "in_use": sum(by.get(kind, 0) for by in observation.in_use.values()),
    }
    return {**figures, **job.details}


def _computed(
    policy: PoolPolicy,
    share,
    observation: Observation,
    job: ObservedJob,
    ahead: list[ObservedJob],
    windows: Iterable[Window],
    now: datetime,
) -> tuple[str, dict]:
    """The reason from the numbers, in the order a member can act on: what can never run, what
    waits for capacity that does not exist yet, then the team's own limits, then the pool."""
    if share.paused:  # before any figure: nothing else matters until the team is resumed
        return "paused", {}
    kind = job.instance_type
    capacity = policy.capacity.get(kind or "", 0)
    if not capacity:
        for window in windows:
            if window.instance_type == kind and window.consumer.get("pool") == policy.name:
                upcoming = window.occurrences(now)
                start = upcoming[0].start if upcoming else window.start
                if start > now:
                    return "window_not_active", {"window": window.name, "start": f"{start:%Y-%m-%d %H:%M} UTC"}
        return "too_large", {"ceiling": 0}
    quota = share.quota.get(kind, 0)
    ceiling = share.ceiling(kind, capacity)
    used = observation.in_use.get(job.team, {}).get(kind, 0)
    if job.count > ceiling:
        return "too_large", {"ceiling": ceiling}
    if ahead:
        return "lower_priority", {}
    in_use = sum(by.get(kind, 0) for by in observation.in_use.values())
    # the team's running jobs the planner could set aside: only those whose priority is known
    own = [
        j
        for j in observation.jobs
        if j.team == job.team and j.state == RUNNING and j.instance_type == kind and j.priority_known
    ]
    if is_guarantee_job(
        job, replace(share, quota={kind: quota}), used, lambda: preemptible_in_share(share, job.priority, own)
    ):
        if in_use + job.count <= capacity and used + job.count <= ceiling:
            return "next", {}
        return ("reclaiming", {}) if used + job.count <= quota else ("making_way", {})
    if share.strategy is not SharingStrategy.LEND_AND_BORROW:
        return "share_at_limit", {"used": used, "quota": quota}
    if job.details.get(
        "own_partition"
    ):  # Slurm: a team's own partition holds its own nodes only; borrowing is another partition
        return "own_partition_full", {"used": used, "quota": quota}
    if used + job.count > ceiling:
        return "borrow_limit", {"used": used, "ceiling": ceiling}
    if in_use + job.count > capacity:
        return "pool_full", {"in_use": in_use, "capacity": capacity}
    return "next", {}


def render(statuses: Iterable[Status]) -> str:
    lines = []
    for status in statuses:
        lines.append(f"{status.team} in pool {status.pool} ({status.backend}), in {status.unit}:")
        for u in status.usage:
            lines.append(
                f"  {u.instance_type}: in use {u.in_use}, guaranteed {u.guaranteed}, borrowed {u.borrowed}, lent or idle {u.lent}"
            )
        if not status.jobs:
            lines.append("  no jobs")
        for job in status.jobs:
            where = f"#{job.position} " if job.position else ""
            label = f"{job.job_id}" + (f" ({job.name})" if job.name and job.name != job.job_id else "")
            running = f"  {label}: running" + (f", {job.training_plan}" if job.training_plan else "")
            lines.append(running if job.state == RUNNING else f"  {label}: {job.state} {where}- {job.text}")
            if job.forecast:
                lines.append(f"    forecast: {job.forecast['words']}")
        lines += [f"  note: {n}" for n in status.notes]
    return "\n".join(lines)
