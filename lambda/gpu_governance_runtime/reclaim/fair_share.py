"""Usage-based fair share (governance file ``reclaim.fair_share: {by: usage, half_life_hours}``,
docs/governance-file.md#fair-share): each team's *decayed usage*, the instance-hours it used with
every hour weighted by 2^-(its age / half-life), as Slurm's multifactor priority decays usage with
``PriorityDecayHalfLife`` and Kueue's admission fair sharing with ``usageHalfLifeTime``. The reclaim
planner orders borrowers and the teams it reclaims from by it (``planner.Settings.usage_half_life_s``).

:func:`decayed_usage` is the one computation: the controller calls it once per tick with what the
tick reads, the simulator at every moment a team's use changes. Each second of use is decayed from
its own moment (the exact integral), so one long interval and the same interval cut into ticks give
the same figure: the controller and the simulator agree on a pool that runs the same jobs.

The controller keeps the figures in its ledger (:func:`advance`), one item per pool.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ..common.action_ledger import PERIOD_RETENTION_SECONDS, Ledger
from ..planners.reclaim import PoolState, in_use_by_share


def decayed_usage(
    previous: Mapping[str, float],
    in_use: Mapping[str, float],
    *,
    elapsed_s: float,
    half_life_s: float,
    counted_s: float | None = None,
) -> dict[str, float]:
    """Each share's decayed instance-hours ``elapsed_s`` after ``previous``, the share having held
    ``in_use`` instances through the last ``counted_s`` of them (default: all of them; before
    those, nothing). Shares in sorted order, so the figures sum and print the same every time."""
    counted = elapsed_s if counted_s is None else min(counted_s, elapsed_s)
    decay = 0.5 ** (elapsed_s / half_life_s)
    # the integral of 2^-(age / half-life) over the last ``counted`` seconds, in hours
    rate = math.log(2) / half_life_s
    hours = -math.expm1(-rate * counted) / rate / 3600
    return {
        share: previous.get(share, 0.0) * decay + in_use.get(share, 0) * hours
        for share in sorted(previous.keys() | in_use.keys())
    }


def instances_by_share(state: PoolState) -> dict[str, int]:
    """Instances each share runs in ``state`` (a job of unknown type counted once)."""
    totals: dict[str, int] = {}
    for (share, _), instances in in_use_by_share(state.running).items():
        totals[share] = totals.get(share, 0) + instances
    return totals


def advance(
    ledger: Ledger, pool: str, state: PoolState, *, half_life_s: float, tick_seconds: float
) -> dict[str, float]:
    """The pool's decayed usage at ``state.now``, recorded in the ledger's ``fair-share#<pool>`` item.

    What the tick reads stands for the tick that ends now, as the usage metrics count it
    (gpu_governance_runtime.usage): over at most ``tick_seconds`` since the last record, the time
    before that (missed ticks) only decays, so usage is never invented. With no record (the first
    tick, or none for longer than ``PERIOD_RETENTION_SECONDS``) usage starts at zero and this tick
    counts one tick. A tick not later than the record (a retried or duplicated invocation, a
    concurrent run) adds nothing: it reads the record as it is. Figures are rounded to 6 places
    before they are stored and before the planner reads them, so a restarted controller plans with
    exactly what was stored."""
    key = f"fair-share#{pool}"
    now = int(state.now)
    item = ledger.get(key) or {}
    at = int(item["at"]) if "at" in item else None
    if at is not None and at >= now:
        return _figures(item)
    elapsed = tick_seconds if at is None else now - at
    teams = {share.name for share in state.shares}  # a team gone from the pool leaves the record
    figures = decayed_usage(
        {share: hours for share, hours in _figures(item).items() if share in teams},
        instances_by_share(state),
        elapsed_s=elapsed,
        half_life_s=half_life_s,
        counted_s=tick_seconds,
    )
    stored = {share: Decimal(str(round(hours, 6))) for share, hours in figures.items()}
    if not ledger.put_if_later(key, at=now, usage=stored, expires_at=now + PERIOD_RETENTION_SECONDS):
        return _figures(ledger.get(key) or {})
    return {share: float(hours) for share, hours in stored.items()}


def _figures(item: Mapping[str, Any]) -> dict[str, float]:
    return {share: float(hours) for share, hours in sorted(item.get("usage", {}).items())}
