"""GPU usage for chargeback: one observation of a pool (its shares' guaranteed, used, borrowed and
lent instances, as :func:`gpu_governance_runtime.planners.reclaim.share_usage` attributes them)
turned into instance-hours over one tick, as CloudWatch embedded-metric-format records.

Each record covers ``tick_seconds`` (the schedule's interval): a Sum of the metric over any period
is the instance-hours of that period, whatever the statistic period of the reader. A missed tick
counts nothing (usage is under-reported, never invented). Pure: no AWS call, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from .common import metrics
from .contract import BORROWED_HOURS, GUARANTEED_HOURS, LENT_HOURS, SHARE_DIMENSIONS, USAGE_METRICS, USED_HOURS


class ShareObservation(Protocol):
    share: str
    guaranteed: int
    in_use: int
    borrowed: int
    lent: int


def instance_hours(rows: Iterable[ShareObservation], tick_seconds: float) -> dict[str, dict[str, float]]:
    """Per share (summed over instance types): each usage metric's instance-hours in one tick."""
    hours = tick_seconds / 3600
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        share = totals.setdefault(row.share, dict.fromkeys(USAGE_METRICS, 0.0))
        for metric, instances in (
            (USED_HOURS, row.in_use),
            (GUARANTEED_HOURS, row.guaranteed),
            (BORROWED_HOURS, row.borrowed),
            (LENT_HOURS, row.lent),
        ):
            share[metric] += instances * hours
    return totals


def idle_guaranteed_hours(values: Mapping[str, float]) -> float:
    """Guaranteed instance-hours nobody used: neither the team (its use within its guarantee is
    used - borrowed) nor the borrowers it lent them to."""
    own_use = values.get(USED_HOURS, 0.0) - values.get(BORROWED_HOURS, 0.0)
    return max(0.0, values.get(GUARANTEED_HOURS, 0.0) - own_use - values.get(LENT_HOURS, 0.0))


def kept_percent(asked: float, breached: float) -> float | None:
    """The share of the time a team asked for its guarantee (``planner.asking_shares``) in which
    it was not breached (``planner.breached_shares``), in percent; None when it never asked. The
    usage report, ``simulate`` and the dashboards' expression (organisation/chargeback.py) say the same."""
    return None if asked <= 0 else 100.0 * max(0.0, asked - breached) / asked


def usage_records(
    pool: str, rows: Iterable[ShareObservation], *, tick_seconds: float, namespace: str, now: float
) -> list[dict[str, Any]]:
    """One embedded-metric-format record per share of ``pool``."""
    return [
        metrics.document(
            namespace,
            dict(zip(SHARE_DIMENSIONS, (pool, share), strict=True)),
            {m: (v, "None") for m, v in values.items()},
            timestamp=now,
        )
        for share, values in sorted(instance_hours(rows, tick_seconds).items())
    ]
