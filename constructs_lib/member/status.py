"""What the backends' readers for `gpu-governance status` share (each backend's ``status`` module
turns what the backend shows a team member into a :class:`constructs_lib.member.waiting.Observation`):
reading the times and Kubernetes lists the schedulers print."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def timestamp(text: str | None) -> float:
    if not text:
        return 0.0
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()  # squeue runs with TZ=UTC


def read_json(text: str, what: str) -> Mapping[str, Any]:
    document = json.loads(text)
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        raise ValueError(f"{what}: not a Kubernetes list (`kubectl get ... -o json` prints one with items)")
    return document
