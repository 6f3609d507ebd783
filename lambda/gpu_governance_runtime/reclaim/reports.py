"""What each reclaim tick reports of a pool it plans (reclaim/handler.py ``run_tick``): one
CloudWatch embedded-metric-format record per share of its use, waiting work, preemptions and
starvation, and, per share that asks for its guarantee, whether the tick kept it. Read from the
queue as it is, not as planned."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..common import metrics
from ..contract import (
    GUARANTEE_ASKED_HOURS,
    GUARANTEE_BREACHED_HOURS,
    GUARANTEE_KEPT_PERCENT,
    SHARE_DIMENSIONS,
    SHARE_METRICS,
)
from ..planners.reclaim import (
    Plan,
    PoolState,
    Settings,
    asking_shares,
    breach_tolerance,
    breached_shares,
    comes_back,
    in_use_by_share,
    may_borrow,
    share_usage,
    starved_shares,
)


def promise_records(
    pool: str, state: PoolState, settings: Settings, *, tick_seconds: float, namespace: str
) -> list[dict[str, Any]]:
    """Per share that asks for its guarantee now (``planner.asking_shares``): the tick's hours
    asked, and breached (``planner.breached_shares``: a guarantee job has waited longer than a tick
    and the pool's grace while another team borrows its type), and the tick's kept percent (100 or
    0). A job's wait is counted from its submission (or requeue) as the backend reports it. Read
    from the queue as it is, not as planned."""
    asking = asking_shares(
        state.shares, in_use_by_share(state.running), ((j.share, j.instance_type, j.count) for j in state.pending)
    )
    breached = breached_shares(
        state.shares,
        state.running,
        state.pending,
        waited_before=state.now - breach_tolerance(tick_seconds, settings),
        groups=state.groups,
        borrows=lambda job: may_borrow(job, state.now, settings),
    )
    hours = tick_seconds / 3600
    return [
        metrics.document(
            namespace,
            dict(zip(SHARE_DIMENSIONS, (pool, share), strict=True)),
            {
                GUARANTEE_ASKED_HOURS: (hours, "None"),
                GUARANTEE_BREACHED_HOURS: (hours if share in breached else 0.0, "None"),
                GUARANTEE_KEPT_PERCENT: (0.0 if share in breached else 100.0, "Percent"),
            },
            timestamp=state.now,
        )
        for share in sorted(asking | breached)  # a job a group's quota covers asks beyond its team's quota
    ]


def share_metrics(
    pool: str, state: PoolState, plan: Plan, *, namespace: str, now: float, seen: Mapping[str, int] = {}
) -> list[dict[str, Any]]:
    """One CloudWatch embedded-metric-format record per share (summed over instance types).
    ``Preemptions`` counts the plan's and those the backend made itself (``seen``, per share).
    Starvation is read from the queue as it is, not as planned: a reclaim that works clears it by
    the next tick, one that does not (dry run, failures, protected victims) keeps it raised."""
    started_by = {j.job_id: j for j in state.running}
    totals: dict[str, dict[str, float]] = {s.name: dict.fromkeys(SHARE_METRICS, 0) for s in state.shares}
    for row in share_usage(state):
        for metric, value in (
            ("Guaranteed", row.guaranteed),
            ("InUse", row.in_use),
            ("Borrowed", row.borrowed),
            ("Lent", row.lent),
            ("Pending", row.pending),
        ):
            totals[row.share][metric] += value
    for preemption in plan.preemptions:
        victim = started_by[preemption.job_id]
        totals[preemption.share]["Preemptions"] += 1
        if not victim.checkpointable or not comes_back(victim):  # a checkpointing job resumes, if it comes back
            totals[preemption.share]["LostCapacitySeconds"] += max(0.0, now - victim.started_at) * victim.count
    for share, count in seen.items():
        if share in totals:
            totals[share]["Preemptions"] += count
    for share in starved_shares(state):
        totals[share]["StarvedBelowGuarantee"] = 1
    return [
        metrics.document(
            namespace,
            {"Pool": pool, "Share": share},
            {m: (v, "Seconds" if m == "LostCapacitySeconds" else "Count") for m, v in values.items()},
            timestamp=now,
        )
        for share, values in totals.items()
    ]
