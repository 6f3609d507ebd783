"""What the Lambda runtime knows about one execution backend, in one frozen descriptor: the
runtime side of the library's ``constructs_lib.backends``.

Each backend package here (``backends/<name>/``) declares one :class:`Backend` and holds what
reaches its pools (its reclaim adapter, its usage observer, its GPU-hour switch); the registry
(``gpu_governance_runtime.backends``) lists them. What they share is here, below them: the
protocols the reclaim controller reaches a pool through (:class:`Adapter`, :class:`Switch`,
:class:`QueuedJobs`), an action's :class:`ActionResult` and the :func:`pool_state` an adapter
reads. The controllers ask the registry what a pool's backend does (how a reclaim tick reaches the
pool, the teams' GPU-hour switch there, which capacity window raises its quotas) instead of
comparing ``pool.backend`` with a name (docs/architecture.md, "Adding a backend").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..planners.reclaim import PoolState

if TYPE_CHECKING:  # the capacity function reads the registry too: it loads no reclaim code (see the backends)
    from ..common.action_ledger import Ledger
    from ..planners.reclaim import PendingJob, Preemption, RunningJob, Start
    from ..policy import Policy, PoolPolicy

DEFAULT_TICK_SECONDS = 60.0
Target = Mapping[str, Any]  # one entry of RECLAIM_TARGETS or USAGE_TARGETS (reclaim/handler.py lists their fields)


@dataclass(frozen=True)
class Invocation:
    """What an adapter needs of the invocation that builds it: the time it has left and the
    schedule's interval (which a quota-share observer counts the backend's own preemptions over)."""

    time_left: Callable[[], float] = lambda: float("inf")
    tick_seconds: float = DEFAULT_TICK_SECONDS


NO_DEADLINE = Invocation()  # all the time it needs, on the default interval (tests, and callers outside a tick)


@dataclass(frozen=True, kw_only=True)
class ReclaimClients:
    """The reclaim function's AWS clients, as its handler holds them when a tick begins."""

    batch: Any
    batch_submit: Any  # a stopped job's copy: one request (common/batch_copy.py)
    ssm: Any
    eks: Any
    sagemaker: Any
    events: Any


@dataclass(frozen=True, kw_only=True)
class UsageTick:
    """What a usage-only tick (``Backend.observe_usage``) needs of the handler's run."""

    clients: ReclaimClients
    namespace: str
    now: float
    tick_seconds: float
    time_left: Callable[[], float]
    in_vpc: bool
    hour_limits: Callable[[Any], Any] | None  # given what the tick read, counts and enforces the GPU-hour limits


def kueue_observer(cluster_queue: Callable[[str], str]) -> Callable[[Target, PoolPolicy, UsageTick], bool]:
    """The usage-only tick of a pool on EKS where Kueue reclaims: read the teams' ClusterQueues,
    named ``cluster_queue(team)`` by the backend (backends/kueue_usage.py, loaded only when it ticks)."""

    def observe(target: Target, pool: PoolPolicy, tick: UsageTick) -> bool:
        from . import kueue_usage

        return kueue_usage.tick(
            target,
            pool,
            eks=tick.clients.eks,
            namespace=tick.namespace,
            now=tick.now,
            tick_seconds=tick.tick_seconds,
            time_left=tick.time_left,
            in_vpc=tick.in_vpc,
            hour_limits=tick.hour_limits,
            cluster_queue=cluster_queue,
        )

    return observe


@dataclass(frozen=True, kw_only=True)
class ActionResult:
    job_id: str
    # "done", "skipped" (finished meanwhile or no longer as planned), "failed"; for a stopped job
    # not yet back: "terminated" (its copy is still to be submitted) or "submitting" (a copy may be
    # in flight); the next tick finishes it (``resume``)
    outcome: str
    detail: str = ""
    copy: str | None = None  # the job submitted in the stopped one's place


def unrecorded(status: str, **fields: Any) -> None:
    """Progress of an action nobody records (tests, dry runs)."""


class Adapter(Protocol):
    acts: bool  # False: observe and publish metrics only
    reroutes_borrowers: bool  # True: a borrowing start needs an action (Slurm partition/QoS)
    # True: each tick's usage metrics come from the queue read; False: from the backend's own
    # accounting (Slurm: backends/hyperpod_slurm/usage.py, hourly), which would otherwise be counted twice
    usage_from_queue: bool
    action_seconds: float  # the longest one read or action can take: none starts with less time left
    # share -> preemptions the backend itself made over the last tick, as read by ``read``; the
    # controller's own preemptions are counted from its plan
    preemptions_seen: Mapping[str, int]

    def read(self, now: float) -> PoolState: ...

    # ``progress(status, **fields)`` records a step of the preemption in the ledger as it happens
    def preempt(self, preemption: Preemption, progress: Callable[..., None] = unrecorded) -> ActionResult: ...

    def resume(self, ledger: Ledger, now: float) -> list[ActionResult]:
        """Finish the pool's preemptions an earlier tick left open (``Ledger.open_actions``)."""
        ...

    def start(self, start: Start, progress: Callable[..., None] = unrecorded) -> ActionResult: ...

    def attempt_of(self, job_id: str) -> str: ...


def pool_state(pool: PoolPolicy, running: Iterable[RunningJob], pending: Iterable[PendingJob], now: float) -> PoolState:
    """The pool as an adapter read it: the policy's capacity, shares and groups, and the jobs read."""
    return PoolState(
        capacity=pool.capacity,
        shares=pool.shares,
        running=tuple(running),
        pending=tuple(pending),
        now=now,
        groups=pool.groups,
    )


class Switch(Protocol):
    """A team's admission in one pool: on, or off (no new job starts; running ones go on)."""

    def enabled(self) -> bool: ...

    def set(self, enabled: bool) -> None: ...


class SwitchError(RuntimeError):
    """A switch's read or change was refused or its answer lost (a Kubernetes API's 409 Conflict, a
    timeout): reclaim/gpu_hours.py leaves the change to the next tick, which reads it again."""


def kueue_rows(rows: Iterable[Any]) -> Iterable[tuple[str, str, float]]:
    """A team's GPU hours where Kueue admits: counted from the instances Kueue shows it using (part-instances
    too), from the usage observer's rows (``kueue_usage.EksShareUsage``)."""
    return ((row.share, row.instance_type, row.in_use) for row in rows)


class QueuedJobs(Protocol):
    """A team's jobs submitted and not started in one pool, and the call that ends one."""

    def queued(self) -> list[str]: ...

    def terminate(self, job_id: str, reason: str) -> None: ...


@dataclass(frozen=True, kw_only=True)
class GpuHourLimits:
    """How the reclaim controller counts a team's GPU hours on a backend and stops its new
    admissions at its limit (reclaim/gpu_hours.py)."""

    switch: Callable[[ReclaimClients, Target, str], Switch]
    """``(clients, target, team) -> Switch``: the team's per-team admission switch there."""
    in_use: Callable[[Any], Iterable[tuple[str, str, float]]]
    """(team, instance type, instances) from what the tick read (a pool's state, or usage rows)."""
    pool_gpus: Callable[[Target], Mapping[str, int]] = lambda target: {}
    """GPUs per instance type the target declares (else the known training instance types' GPUs)."""
    queue: Callable[[ReclaimClients, Target, str], Any] | None = None
    """``(clients, target, team) -> QueuedJobs``: the team's jobs not started yet, which the controller
    terminates while the team is over its limit or paused (the switch does not hold them); None: not held."""


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One execution backend as the Lambda runtime sees it."""

    name: str
    """The backend's name in the policy document (the contract's ``BACKENDS``)."""
    reclaim_adapter: Callable[[Target, PoolPolicy, Policy, ReclaimClients, Invocation], Adapter] | None = None
    """``(target, pool, policy, clients, invocation) -> Adapter``: what a reclaim tick reads the pool
    through (and acts through, where the adapter acts); None: the pool takes no adapter."""
    why_no_adapter: str = ""
    """Why the pool takes no adapter, in the error for a target that asks for one."""
    observe_usage: Callable[[Target, PoolPolicy, UsageTick], Any] | None = None
    """``(target, pool, tick)``: the scheduler reclaims natively; a reclaim tick only reads and
    reports the teams' usage (and counts their GPU-hour limits) instead of planning."""
    usage_from_accounting: Callable[..., Any] | None = None
    """``(target, pool, head_node, *, ledger, namespace) -> observer``: a USAGE_TARGETS entry's
    observer, whose ``observe(now)`` reads the pool's accounting through its adapter's head node."""
    gpu_hour_limits: GpuHourLimits | None = None
    """How the reclaim controller enforces the teams' GPU-hour limits there; None: it does not."""
    quota_raised_by: str | None = None
    """The kind of capacity-window consumer (the contract's ``CONSUMER_FIELDS``) whose purchase the
    capacity controller adds to the teams' quotas there (capacity/shares.py); None: no quota is raised."""
    drains_on_head_node: bool = False
    """A window feeding the pool joins and drains its nodes through the pool's head node (capacity/slurm_window.py)."""
