"""The skeleton every controller's Lambda handler stands on, so none reads its inputs its own way:

- ``Environment``: the function's settings read from the environment into the handler's typed,
  frozen settings object once per invocation; a setting that is missing or malformed raises one
  ``SettingError`` naming the variable, its value and what is allowed (the construct sets them
  all, so this means a function edited by hand or an asset deployed with another construct).
- ``EventKind`` / ``recognise``: an EventBridge event matched against the handler's one table of
  (source, detail-type) pairs into an ``Event`` that names its kind.
- ``Environment.dry_run``: the one reading of ``DRY_RUN`` (only ``false`` acts).
- ``time_left``: the seconds an invocation has left, from its Lambda context.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from ..contract import ENV_DRY_RUN


class SettingError(ValueError):
    """A function setting (an environment variable) that is missing or not what the code reads."""


_REQUIRED: Any = object()


class Environment:
    """Typed reads of one environment mapping (``os.environ``, or a test's dict)."""

    def __init__(self, environ: Mapping[str, str]):
        self._environ = environ

    def _raw(self, name: str, default: Any, allowed: str) -> str | None:
        value = self._environ.get(name)
        if value is None or value == "":
            if default is _REQUIRED:
                raise SettingError(f"{name}: not set - {allowed} (the construct sets it: redeploy the stack)")
            return None
        return value

    def text(self, name: str, default: Any = _REQUIRED, *, allowed: str = "a non-empty string") -> Any:
        value = self._raw(name, default, allowed)
        return default if value is None else value

    def number(self, name: str, default: Any = _REQUIRED, *, minimum: float = 0.0, above: bool = False) -> Any:
        allowed = f"a number {'>' if above else '>='} {minimum:g}"
        value = self._raw(name, default, allowed)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < minimum or (above and number == minimum):
            raise SettingError(f"{name}: {value!r} - {allowed}")
        return number

    def whole(self, name: str, default: Any = _REQUIRED, *, minimum: int = 0) -> Any:
        allowed = f"a whole number >= {minimum}"
        value = self._raw(name, default, allowed)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise SettingError(f"{name}: {value!r} - {allowed}") from None
        if number < minimum:
            raise SettingError(f"{name}: {value!r} - {allowed}")
        return number

    def amount(self, name: str, default: Any = _REQUIRED) -> Any:
        """A decimal amount of money (kept exact: budgets and price caps are compared, never rounded)."""
        allowed = "a decimal amount >= 0"
        value = self._raw(name, default, allowed)
        if value is None:
            return default
        try:
            amount = Decimal(value)
        except InvalidOperation:
            raise SettingError(f"{name}: {value!r} - {allowed}") from None
        if not amount.is_finite() or amount < 0:
            raise SettingError(f"{name}: {value!r} - {allowed}")
        return amount

    def json(self, name: str, kind: type[list] | type[dict], default: Any = _REQUIRED) -> Any:
        allowed = f"a JSON {'list' if kind is list else 'object'}"
        value = self._raw(name, default, allowed)
        if value is None:
            return default
        try:
            document = json.loads(value)
        except ValueError:
            document = None
        if not isinstance(document, kind):
            raise SettingError(f"{name}: {value[:200]!r} - {allowed}")
        return document

    def switch(self, name: str) -> bool:
        """``true`` is on; unset or anything else is off."""
        return self._environ.get(name) == "true"

    def dry_run(self) -> bool:
        """Dry run unless ``DRY_RUN`` is ``false`` (any case): a typo or a missing value never acts."""
        return (self._environ.get(ENV_DRY_RUN) or "true").lower() != "false"


@dataclass(frozen=True)
class EventKind:
    """One row of a handler's dispatch table: events from ``source`` whose detail-type is
    ``detail_type`` (any detail-type when None; one starting with it when ``prefix``)."""

    name: str
    source: str
    detail_type: str | None = None
    prefix: bool = False

    def matches(self, source: Any, detail_type: Any) -> bool:
        if source != self.source:
            return False
        if self.detail_type is None:
            return True
        return str(detail_type).startswith(self.detail_type) if self.prefix else detail_type == self.detail_type


@dataclass(frozen=True, kw_only=True)
class Event:
    """An EventBridge event, recognised: ``kind`` is the name of the first matching row of the
    table, or None when no row matches (a test's ``{}``, a direct invocation)."""

    kind: str | None
    source: Any
    detail_type: Any
    detail: Any
    id: Any
    raw: Mapping[str, Any] = field(repr=False)


def recognise(event: Mapping[str, Any], table: Iterable[EventKind]) -> Event:
    source, detail_type = event.get("source"), event.get("detail-type")
    kind = next((row.name for row in table if row.matches(source, detail_type)), None)
    return Event(
        kind=kind, source=source, detail_type=detail_type, detail=event.get("detail"), id=event.get("id"), raw=event
    )


def time_left(context: Any) -> Callable[[], float]:
    """Seconds the invocation has left, from the Lambda context (unlimited without one)."""
    if context is None:
        return lambda: math.inf
    return lambda: context.get_remaining_time_in_millis() / 1000
