"""One structured JSON logger: every line a function writes to stdout (CloudWatch Logs keeps one
event per line) is one JSON document written here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def write(document: Mapping[str, Any]) -> None:
    """One JSON document on one line, flushed at once: a function that times out or fails its
    import a moment later must not lose what it already said. ``default=str`` writes datetimes,
    Decimals and enums as text rather than failing the run over a log line."""
    print(json.dumps(document, default=str), flush=True)


def info(message: str, **fields: Any) -> None:
    write({"level": "INFO", "message": message, **fields})


def error(message: str, **fields: Any) -> None:
    write({"level": "ERROR", "message": message, **fields})
