"""The reclaim controller's side of ``raised.py``: the guarantees the capacity controller has
raised and not yet lowered, read from ``contract.raised_guarantees_parameter``. Read-only: the
reclaim role may call ``ssm:GetParameter`` on that parameter and nothing else of it.

Only a SecureString is read (the capacity controller's key, which only its role may encrypt
with), and every entry is bounded: no plan or block holds more than ``MAX_INSTANCES_PER_BLOCK``
instances, nor is lowered later than ``LONGEST_RAISE`` from now (bought 8 weeks ahead, 182 days
long), so a forged or broken document cannot make a guarantee unbounded."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from .contract import RAISED_GUARANTEE_KEYS
from .planners.market import ALLOWED_DURATION_DAYS, MAX_INSTANCES_PER_BLOCK, MAX_START_AHEAD
from .planners.reclaim import PoolState

LONGEST_RAISE = MAX_START_AHEAD + timedelta(days=max(ALLOWED_DURATION_DAYS))


def read(*, ssm: Any, name: str, now: datetime) -> list[dict[str, Any]]:
    """The raises still in force at ``now`` (the reclaim controller's side); [] when the capacity
    controller has written none yet. A document that is not the capacity controller's format
    raises RuntimeError: the reclaim controller fails the pool's tick (``PoolErrors``) rather than
    plan on a guess."""
    try:
        parameter = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]
    except ssm.exceptions.ParameterNotFound:
        return []
    value = parameter["Value"]
    if parameter.get("Type") != "SecureString":
        raise RuntimeError(
            f"{name}: a {parameter.get('Type')} parameter - a SecureString under the capacity controller's key "
            "(someone else wrote it; the capacity controller's next run rewrites it)"
        )
    problem = (
        f"{name}: {value[:200]!r} - a JSON list of {{{', '.join(RAISED_GUARANTEE_KEYS)}}} with instances 1 to "
        f"{MAX_INSTANCES_PER_BLOCK} and until ISO 8601 at most {LONGEST_RAISE.days} days ahead"
    )
    try:
        entries = json.loads(value)
        if not isinstance(entries, list) or not all(
            isinstance(e, dict)
            and set(e) == set(RAISED_GUARANTEE_KEYS)
            and type(e["instances"]) is int
            and 1 <= e["instances"] <= MAX_INSTANCES_PER_BLOCK
            and all(isinstance(e[k], str) for k in RAISED_GUARANTEE_KEYS if k != "instances")
            for e in entries
        ):
            raise RuntimeError(problem)
        if any(datetime.fromisoformat(e["until"]) > now + LONGEST_RAISE for e in entries):
            raise RuntimeError(problem)
        return [e for e in entries if datetime.fromisoformat(e["until"]) > now]
    except (ValueError, TypeError) as error:
        raise RuntimeError(f"{problem} ({error})") from None


def with_raises(state: PoolState, pool: str, raises: Iterable[Mapping[str, Any]]) -> PoolState:
    """The pool as the capacity controller has raised it (``capacity/raised.py``, entries still in
    force): each raised share's guarantee holds the bought instances, and so does the pool's
    capacity (the service environment is raised by as much), so the planner never reclaims the
    owner's jobs on them and ``Guaranteed`` / ``GuaranteedInstanceHours`` count them."""
    names = {s.name for s in state.shares}
    extra = Counter()
    for entry in raises:
        if entry["pool"] == pool and entry["team"] in names:
            extra[entry["team"], entry["instance_type"]] += entry["instances"]
    if not extra:
        return state
    capacity = Counter(state.capacity)
    for (_, instance_type), instances in extra.items():
        capacity[instance_type] += instances
    shares = tuple(
        replace(
            share,
            quota=dict(Counter(share.quota) + Counter({t: n for (team, t), n in extra.items() if team == share.name})),
        )
        for share in state.shares
    )
    return replace(state, capacity=dict(capacity), shares=shares)
