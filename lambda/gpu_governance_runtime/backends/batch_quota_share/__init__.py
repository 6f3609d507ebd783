"""AWS Batch quota-share queues (SageMaker training jobs): Batch preempts itself; the reclaim
controller observes the queue and switches a team's quota share at its GPU-hour limit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...contract import BATCH_QUOTA_SHARE, CONSUMER_SAGEMAKER_TRAINING_JOBS
from ..base import Backend, GpuHourLimits, Invocation, ReclaimClients, Target

if TYPE_CHECKING:
    from ...planners.reclaim import PoolState
    from ...policy import Policy, PoolPolicy
    from .gpu_hours import QuotaShareQueue, QuotaShareSwitch
    from .observer import BatchQuotaShareObserver


def _observer(
    target: Target, pool: PoolPolicy, policy: Policy, clients: ReclaimClients, invocation: Invocation
) -> BatchQuotaShareObserver:
    from .observer import BatchQuotaShareObserver

    # preemptions that stopped within one tick's interval count on this tick
    return BatchQuotaShareObserver(
        clients.batch, job_queue=target["job_queue"], pool=pool, tick_seconds=invocation.tick_seconds
    )


def _switch(clients: ReclaimClients, target: Target, team: str) -> QuotaShareSwitch:
    from .gpu_hours import QuotaShareSwitch

    return QuotaShareSwitch(clients.batch, target["job_queue"], team)


def _queue(clients: ReclaimClients, target: Target, team: str) -> QuotaShareQueue:
    from .gpu_hours import QuotaShareQueue

    return QuotaShareQueue(clients.batch, target["job_queue"], team)


def _running_jobs(state: PoolState) -> Iterable[tuple[str, str, float]]:
    """A team's GPU hours are counted from the running service jobs the tick read."""
    return ((job.share, job.instance_type, job.count) for job in state.running)


BACKEND = Backend(
    name=BATCH_QUOTA_SHARE,
    reclaim_adapter=_observer,
    # No consumption limit in the API: the reclaim controller disables the team's quota share at its limit, and,
    # since a disabled share still starts the jobs already submitted, terminates the team's queued ones while it is
    # over its limit or paused [aws: batch.quota-share-disabled].
    gpu_hour_limits=GpuHourLimits(
        switch=_switch,
        in_use=_running_jobs,
        queue=_queue,
    ),
    quota_raised_by=CONSUMER_SAGEMAKER_TRAINING_JOBS,
)
