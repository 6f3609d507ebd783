"""The reclaim controller's side of ``raised.py``: the guarantees the capacity controller has
raised and not yet lowered, read from ``contract.raised_guarantees_parameter``. Read-only: the
reclaim role may call ``ssm:GetParameter`` on that parameter and nothing else of it.

Only a SecureString is read (the capacity controller's key, which only its role may encrypt
with), and every entry is bounded: no plan or block holds more than ``MAX_INSTANCES_PER_BLOCK``
instances, nor is lowered later than ``LONGEST_RAISE`` from now (bought 8 weeks ahead, 182 days
long), so a forged or broken document cannot make a guarantee unbounded."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from .contract import RAISED_GUARANTEE_KEYS
from .planners.market import ALLOWED_DURATION_DAYS, MAX_INSTANCES_PER_BLOCK, MAX_START_AHEAD

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
