"""Fullest possible examples of botocore shapes: every member set, every list and map with one
item. A response built this way is what a real Describe call can return at most; code that
sends response data back as a request must turn it into something the request shape accepts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.validate import ParamValidator


def example(shape: Any, depth: int = 0) -> Any:
    kind = shape.type_name
    if kind == "structure":
        if depth > 12:  # recursive shapes (rare): stop once deep enough
            return {}
        members = shape.members.items()
        if shape.metadata.get("union"):  # a union takes exactly one member
            members = list(members)[:1]
        return {name: example(member, depth + 1) for name, member in members}
    if kind == "list":
        return [example(shape.member, depth + 1)] * max(1, shape.metadata.get("min", 1))
    if kind == "map":
        return {"key": example(shape.value, depth + 1)}
    if kind == "string":
        return (shape.enum or ["x" * max(1, shape.metadata.get("min", 1))])[0]
    if kind in ("integer", "long"):
        return max(1, int(shape.metadata.get("min", 1)))
    if kind in ("double", "float"):
        return float(max(1, shape.metadata.get("min", 1)))
    if kind == "boolean":
        return True
    if kind == "timestamp":
        return datetime(2026, 12, 10, 11, 30, tzinfo=UTC)
    if kind == "blob":
        return b"x"
    raise AssertionError(f"unknown shape type {kind}")


def problems(value: Any, shape: Any) -> str:
    """'' when ``value`` fits ``shape``, else botocore's report."""
    report = ParamValidator().validate(value, shape)
    return report.generate_report() if report.has_errors() else ""
