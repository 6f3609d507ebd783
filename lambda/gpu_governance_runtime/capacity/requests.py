"""On-demand windows: capacity asked for now (a person, an alarm, an event), served exactly like a
declared window and within its limits.

A request names a team, an instance type, a count, hours and a start. It draws on the team's
declared window of that instance type (or the one it names): that window's price cap, budget
(the same spend record: requests never add money), approval mode, consumer and owner apply.

Requests are stored in the controller's own ledger table, as ``action#request#<token>`` written
only if absent, rather than in the policy document: the policy is bundled with the function's
code and changes only with a deployment, while a request must take effect on the next run; and
the ledger already gives the conditional write that makes a repeated request (same token) the
same window, and the controller already reads it on every run. A request whose token is taken
by a different request is refused.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from . import market
from .ledger import Ledger
from .planner import HOUR, Window

ACTION_PREFIX = "request#"
MAX_HOURS = 182 * 24
OPEN = "open"


class RequestRefused(ValueError):
    """The request cannot be served: one line naming what is wrong and what is allowed."""


@dataclass(frozen=True, kw_only=True)
class Request:
    token: str
    team: str
    instance_type: str
    count: int
    hours: int
    start: datetime
    window: str  # the declared window it draws on

    @property
    def name(self) -> str:
        """The requested window's name: short enough for a training plan named after its intents."""
        return f"{self.window}-r{hashlib.sha256(self.token.encode()).hexdigest()[:6]}"

    def details(self) -> dict[str, Any]:
        return {**asdict(self), "start": self.start.isoformat()}


def base_window(windows: Iterable[Window], *, team: str, instance_type: str, window: str | None = None) -> Window:
    """The declared window a request draws on: the team's one of that instance type, or the named one."""
    candidates = [w for w in windows if w.budget_window is None and w.team == team and w.instance_type == instance_type]
    if window is not None:
        candidates = [w for w in candidates if w.name == window]
    if len(candidates) != 1:
        names = sorted(w.name for w in candidates)
        wanted = f"window {window!r} of {instance_type}" if window else f"window of {instance_type}"
        raise RequestRefused(
            f"team {team}: {'no' if not names else 'more than one'} declared {wanted} to draw on ({names}) - "
            + ("name one with --window" if names else "declare a capacity window for the team and instance type first"))
    return candidates[0]


def submit(ledger: Ledger, windows: Iterable[Window], *, token: str, team: str, instance_type: str, count: int, hours: int,
           start: datetime | None, now: datetime, window: str | None = None) -> tuple[Request, bool]:
    """Record a request once: (the request, True) when new, (the recorded request, False) when the
    token was used before for the same request (``start`` None, "now", matches any start);
    refused otherwise."""
    base = base_window(windows, team=team, instance_type=instance_type, window=window)
    starts_now, start = start is None, market.utc(start or now)
    problems = []
    if not 1 <= count <= market.MAX_INSTANCES_PER_BLOCK:
        problems.append(f"count: {count} - 1 to {market.MAX_INSTANCES_PER_BLOCK}")
    if not 1 <= hours <= MAX_HOURS:
        problems.append(f"hours: {hours} - 1 to {MAX_HOURS}")
    if start + hours * HOUR <= now:
        problems.append(f"start: {start.isoformat()} - the window would be over already")
    if start - now > market.MAX_START_AHEAD:
        problems.append(f"start: {start.isoformat()} - at most 8 weeks ahead")
    if not token or len(token) > 128:
        problems.append(f"token: {token!r} - 1 to 128 characters")
    if problems:
        raise RequestRefused("; ".join(problems))
    request = Request(token=token, team=team, instance_type=instance_type, count=count, hours=hours,
                      start=start.replace(second=0, microsecond=0), window=base.name)
    recorded = _recorded(ledger, token)
    if recorded is None:
        spent = ledger.spent(base, now)
        if spent >= base.budget:  # refused at once, not reported uncovered on every run; purchases are held to it anyway
            raise RequestRefused(f"budget: window {base.name} has spent {spent} of {base.budget} this {base.budget_period}; nothing left")
        if ledger.claim_action(ACTION_PREFIX + token, status=OPEN, details=request.details(), now=now):
            return request, True
        recorded = _recorded(ledger, token)  # the same token was recorded a moment ago
    if recorded != {**request.details(), **({"start": recorded["start"]} if starts_now else {})}:
        raise RequestRefused(f"token: {token!r} - already used for a different request ({recorded}); use a new token")
    return _request(recorded), False


def _request(details: Mapping[str, Any]) -> Request:
    return Request(**{**details, "start": datetime.fromisoformat(details["start"])})


def _recorded(ledger: Ledger, token: str) -> dict[str, Any] | None:
    key = ACTION_PREFIX + token
    return next((details for action, _, details in ledger.actions(key, (OPEN,)) if action == key), None)


def requested_windows(ledger: Ledger, declared: Mapping[str, Window]) -> dict[str, Window]:
    """Every open request as a window of its own, within its declared window's limits. A request
    whose declared window is gone (or changed team or instance type) is not served."""
    found = {}
    for _, _, details in ledger.actions(ACTION_PREFIX, (OPEN,)):
        request = _request(details)
        base = declared.get(request.window)
        if base is None or (base.team, base.instance_type) != (request.team, request.instance_type):
            continue
        found[request.name] = replace(
            base, name=request.name, instance_count=request.count, start=request.start, duration_hours=request.hours,
            repeat_every_days=None, buy_ahead_days=market.MAX_START_AHEAD // timedelta(days=1), budget_window=base.name,
        )
    return found


def from_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``submit`` from a ``Capacity Request`` event. The token defaults to the
    event's id, which EventBridge keeps when it delivers an event again."""
    detail = event.get("detail") or {}
    start = detail.get("start", "now")
    try:
        when = None if start == "now" else market.utc(datetime.fromisoformat(str(start).replace("Z", "+00:00")))
        return {"token": str(detail.get("token") or event["id"]), "team": str(detail["team"]), "instance_type": str(detail["instance_type"]),
                "count": int(detail["count"]), "hours": int(detail["hours"]), "start": when, "window": detail.get("window")}
    except (KeyError, TypeError, ValueError) as error:
        raise RequestRefused(f"detail: {detail!r} - team, instance_type, count, hours, optional start/window/token ({error})") from None
