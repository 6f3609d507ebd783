"""The reclaim controller's side of ``raised.py``: the guarantees the capacity controller has
raised and not yet lowered, read from ``contract.raised_guarantees_parameter``. Read-only: the
reclaim role may call ``ssm:GetParameter`` on that parameter and nothing else of it."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..contract import RAISED_GUARANTEE_KEYS


def read(*, ssm: Any, name: str, now: datetime) -> list[dict[str, Any]]:
    """The raises still in force at ``now`` (the reclaim controller's side); [] when the capacity
    controller has written none yet. A document that is not the capacity controller's format
    raises RuntimeError: the reclaim controller fails the pool's tick (``PoolErrors``) rather than
    plan on a guess."""
    try:
        value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        return []
    problem = f"{name}: {value[:200]!r} - a JSON list of {{{', '.join(RAISED_GUARANTEE_KEYS)}}} with instances >= 1 and until ISO 8601"
    try:
        entries = json.loads(value)
        if not isinstance(entries, list) or not all(
                isinstance(e, dict) and set(e) == set(RAISED_GUARANTEE_KEYS) and type(e["instances"]) is int and e["instances"] >= 1
                and all(isinstance(e[k], str) for k in RAISED_GUARANTEE_KEYS if k != "instances") for e in entries):
            raise RuntimeError(problem)
        return [e for e in entries if datetime.fromisoformat(e["until"]) > now]
    except (ValueError, TypeError) as error:
        raise RuntimeError(f"{problem} ({error})") from None
