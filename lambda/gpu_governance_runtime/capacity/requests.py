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

A request is closed (``closed``, ``Ledger.close_action``, once) by the first run after its end in
which nothing bought for it still holds capacity, no purchase for it is undecided and its
consumer steps succeeded (the owner's quota is back, the instance group moved off its plan):
closed requests are not planned again. A window may also declare ``alarm_requests``: a CloudWatch
alarm going to ALARM requests capacity for it (``from_alarm``), once per transition.

A new request that overlaps an open one of the same declared window (team and instance type)
does not become a second window that buys again: it joins the open one (nothing changes when it
asks for no more instances and ends no later) or extends it (to the later end, the larger count).
Its token is recorded as ``joined`` with the open request's token, so the same token again is
the same answer. An alarm that flaps (ALARM, OK, ALARM 40 minutes later) so buys once; the
extended window's last hours are covered by the block already bought, an extension or, failing
those, a new piece after it.

The declared window's own occurrences (recurring or not, pending or active) are joined the same
way: a request inside one, for no more instances than it declares, is recorded as ``joined`` with
the occurrence's key and buys nothing. A request only partly inside one stays a window of its own,
and the planner counts what the declared window holds or buys for its hours
(``Window.serves_with``), so only the hours and instances the occurrence leaves uncovered are
bought: by extending its block (``prefer_extension``) or with a new piece, by the planner's rules.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ..contract import ALARM_STATE
from ..planners import market
from ..planners.offers import HOUR, Reservation
from ..planners.window import Window
from .ledger import OPEN_STATUSES, Ledger

ACTION_PREFIX = "request#"
MAX_HOURS = 182 * 24
OPEN, CLOSED = "open", "closed"
JOINED = "joined"  # a token whose request was served by extending (or joining) an open one
MAX_TOKEN = 128


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
    # Set when the declared window's own occurrence (its key) serves the request: nothing of its own is bought.
    occurrence: str = ""
    # Who asked (recorded, not part of what makes two requests the same): "account:<id>" for a
    # Capacity Request event (EventBridge sets the envelope's account to the caller's; the calling
    # principal is only in CloudTrail), "alarm:<name>" for an alarm, the caller's ARN for the CLI.
    requested_by: str = ""

    @property
    def name(self) -> str:
        """The requested window's name: short enough for a training plan named after its intents
        (the declared window's, when one of its occurrences serves the request)."""
        if self.occurrence:
            return self.window
        return f"{self.window}-r{hashlib.sha256(self.token.encode()).hexdigest()[:6]}"

    def details(self) -> dict[str, Any]:
        return {**asdict(self), "start": self.start.isoformat()}

    def same_as(self, recorded: Mapping[str, Any], *, starts_now: bool) -> bool:
        """Whether ``recorded`` (a ledger entry) is this request: anyone may repeat a request, and
        a start of "now" matches any recorded start."""
        ignored = {"requested_by", "occurrence", *(("start",) if starts_now else ())}
        mine = {k: v for k, v in self.details().items() if k not in ignored}
        return mine == {k: v for k, v in recorded.items() if k not in ignored}


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
            + ("name one with --window" if names else "declare a capacity window for the team and instance type first")
        )
    return candidates[0]


def submit(
    ledger: Ledger,
    windows: Iterable[Window],
    *,
    token: str,
    team: str,
    instance_type: str,
    count: int,
    hours: int,
    start: datetime | None,
    now: datetime,
    requested_by: str,
    window: str | None = None,
) -> tuple[Request, bool]:
    """Record a request once: (the request, True) when new, (the recorded request, False) when the
    token was used before for the same request (``start`` None, "now", matches any start; whoever
    repeats it); refused otherwise. ``requested_by`` is recorded with it."""
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
    if not token or len(token) > MAX_TOKEN:
        problems.append(f"token: {token!r} - 1 to {MAX_TOKEN} characters")
    if problems:
        raise RequestRefused("; ".join(problems))
    request = Request(
        token=token,
        team=team,
        instance_type=instance_type,
        count=count,
        hours=hours,
        start=start.replace(second=0, microsecond=0),
        window=base.name,
        requested_by=requested_by,
    )
    recorded = _recorded(ledger, token)
    if recorded is None:
        served = _join(ledger, request, now) or _join_occurrence(ledger, request, base, now)
        if served is not None:
            return served, False
        spent = ledger.spent(base, now)
        if (
            spent >= base.budget
        ):  # refused at once, not reported uncovered on every run; purchases are held to it anyway
            raise RequestRefused(
                f"budget: window {base.name} has spent {spent} of {base.budget} this {base.budget_period}; nothing left"
            )
        if ledger.claim_action(ACTION_PREFIX + token, status=OPEN, details=request.details(), now=now):
            return request, True
        recorded = _recorded(ledger, token)  # the same token was recorded a moment ago
    joined = recorded.pop("joined", None)
    if not request.same_as(recorded, starts_now=starts_now):
        raise RequestRefused(f"token: {token!r} - already used for a different request ({recorded}); use a new token")
    if joined is not None:
        return _request(_recorded(ledger, joined)), False
    return _request(recorded), False


def _join(ledger: Ledger, request: Request, now: datetime) -> Request | None:
    """The open request of the same declared window that ``request`` overlaps, extended to serve
    it too (and ``request``'s token recorded as joined to it); None when none overlaps."""
    end = request.start + request.hours * HOUR
    overlapping = sorted(
        (
            r
            for r in (_request(d) for _, _, d in ledger.actions(ACTION_PREFIX, (OPEN,)))
            if r.window == request.window and r.start < end and request.start < r.start + r.hours * HOUR
        ),
        key=lambda r: (r.start, r.token),
    )
    if not overlapping:
        return None
    served = overlapping[0]
    hours = max(served.hours, -(-(end - served.start) // HOUR))  # whole hours up to the later end
    extended = replace(served, hours=hours, count=max(served.count, request.count))
    if extended != served:  # its name (from its token) stays: what was bought for it still counts
        ledger.record_action(ACTION_PREFIX + served.token, status=OPEN, details=extended.details(), now=now)
    ledger.claim_action(
        ACTION_PREFIX + request.token, status=JOINED, details={**request.details(), "joined": served.token}, now=now
    )
    return extended


def _join_occurrence(ledger: Ledger, request: Request, base: Window, now: datetime) -> Request | None:
    """``request`` recorded as joined to the occurrence of its declared window that holds it
    whole (its hours, no more instances than declared); None when none does."""
    end = request.start + request.hours * HOUR
    if request.count > base.instance_count:
        return None  # the extra instances are for the planner to buy beside it, where the consumer can use them
    # every occurrence a request can overlap: it starts at most 8 weeks ahead
    pending = replace(base, buy_ahead_days=market.MAX_START_AHEAD // timedelta(days=1)).occurrences(now)
    holding = next((o for o in pending if o.start <= request.start and end <= o.end), None)
    if holding is None:
        return None
    joined = replace(request, occurrence=holding.key)
    ledger.claim_action(ACTION_PREFIX + request.token, status=JOINED, details=joined.details(), now=now)
    return joined


def _request(details: Mapping[str, Any]) -> Request:
    return Request(**{**details, "start": datetime.fromisoformat(details["start"])})


def _recorded(ledger: Ledger, token: str) -> dict[str, Any] | None:
    key = ACTION_PREFIX + token
    return next((details for action, _, details in ledger.actions(key, (OPEN, CLOSED, JOINED)) if action == key), None)


def listed(ledger: Ledger) -> list[tuple[Request, str]]:
    """Every request with its status (open or closed), by start then token."""
    found = [(_request(details), status) for _, status, details in ledger.actions(ACTION_PREFIX, (OPEN, CLOSED))]
    return sorted(found, key=lambda pair: (pair[0].start, pair[0].token))


def close_ended(
    ledger: Ledger, requested: Mapping[str, Window], *, owned: Iterable[Reservation], unsettled: set[str], now: datetime
) -> list[str]:
    """Close every requested window whose end has passed and whose capacity is gone: none of its
    blocks or plans still holds capacity, no purchase for it is undecided, and this run's steps
    for its consumer (``unsettled``: window names whose step failed or was deferred) succeeded.
    The names closed by this call; a repeated run finds them closed and changes nothing."""
    owned = list(owned)
    ended = [
        w
        for w in requested.values()
        if w.start + w.duration_hours * HOUR <= now
        and w.name not in unsettled
        and not any(r.window == w.name and r.state in market.COVERING_STATES and r.end > now for r in owned)
    ]
    if not ended:
        return []
    undecided = {i.window for i in ledger.intents(*OPEN_STATUSES)}
    tokens = {_request(details).name: action for action, _, details in ledger.actions(ACTION_PREFIX, (OPEN,))}
    return [
        w.name
        for w in ended
        if w.name not in undecided
        and w.name in tokens
        and ledger.close_action(tokens[w.name], expected=OPEN, status=CLOSED, now=now)
    ]


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
            base,
            name=request.name,
            instance_count=request.count,
            start=request.start,
            duration_hours=request.hours,
            repeat_every_days=None,
            buy_ahead_days=market.MAX_START_AHEAD // timedelta(days=1),
            budget_window=base.name,
            alarm_requests=(),  # the declared window's alarms request for it, not for its requests
        )
    return found


# What a Capacity Request event's detail may hold: name -> (allowed JSON types, what is allowed).
# Checked as strictly as the governance file: a bool is no integer, 2.9 and "2" are no count.
REQUEST_FIELDS = {
    "team": ((str,), "a team name"),
    "instance_type": ((str,), "an instance type such as p5.48xlarge"),
    "count": ((int,), f"a whole number of instances, 1 to {market.MAX_INSTANCES_PER_BLOCK}"),
    "hours": ((int,), f"a whole number of hours, 1 to {MAX_HOURS}"),
    "start": ((str,), '"now" or an ISO 8601 time'),
    "window": ((str,), "the name of a declared window of the team"),
    "token": ((str,), f"1 to {MAX_TOKEN} characters"),
}
REQUIRED_REQUEST_FIELDS = ("team", "instance_type", "count", "hours")


def from_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``submit`` from a ``Capacity Request`` event, refused (``RequestRefused``
    naming every bad field) unless its detail is an object of ``REQUEST_FIELDS`` with the right
    types; the bounds are ``submit``'s. The token defaults to the event's id, which EventBridge
    keeps when it delivers an event again. The requester is the envelope's ``account``: EventBridge
    sets it to the account that called PutEvents (a sender cannot choose it); who in that account
    sent it is only in CloudTrail (PutEvents data events, when a trail records them)."""
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise RequestRefused(
            f"detail: {str(detail)[:200]!r} - an object with {', '.join(REQUIRED_REQUEST_FIELDS)} "
            f"and optional {', '.join(f for f in REQUEST_FIELDS if f not in REQUIRED_REQUEST_FIELDS)}"
        )
    problems = [
        f"detail.{key}: unknown field - one of {', '.join(REQUEST_FIELDS)}"
        for key in sorted(set(detail) - set(REQUEST_FIELDS), key=str)
    ]
    problems += [
        f"detail.{key}: missing - {REQUEST_FIELDS[key][1]}" for key in REQUIRED_REQUEST_FIELDS if key not in detail
    ]
    for key, value in detail.items():
        kinds, allowed = REQUEST_FIELDS.get(key, ((), ""))
        if kinds and (not isinstance(value, kinds) or isinstance(value, bool)):
            problems.append(f"detail.{key}: {value!r} - {allowed}")
    start, when = detail.get("start", "now"), None
    if isinstance(start, str) and start != "now":
        try:
            when = market.utc(datetime.fromisoformat(start.replace("Z", "+00:00")))
        except ValueError:
            problems.append(f"detail.start: {start!r} - {REQUEST_FIELDS['start'][1]}")
    token, account = detail.get("token") or event.get("id"), event.get("account")
    if not isinstance(token, str):
        problems.append(f"id: {token!r} - the event's id (EventBridge sets it), or detail.token")
    if not isinstance(account, str) or not account:
        problems.append(f"account: {account!r} - the sending account EventBridge puts on every event")
    if problems:
        raise RequestRefused("; ".join(problems))
    return {
        "token": token,
        "team": detail["team"],
        "instance_type": detail["instance_type"],
        "count": detail["count"],
        "hours": detail["hours"],
        "start": when,
        "window": detail.get("window"),
        "requested_by": f"account:{account}",
    }


def from_alarm(event: Mapping[str, Any], windows: Iterable[Window]) -> dict[str, Any] | None:
    """The arguments of ``submit`` from a ``CloudWatch Alarm State Change`` event to ALARM of an
    alarm a declared window names in ``alarm_requests``: that window's team and instance type,
    the declared count and hours, starting now. The token is the alarm's name and the time of the
    state change (``detail.state.timestamp``): EventBridge delivering the event again gives the
    same token (the same window), the alarm's next OK -> ALARM a new one. None for a change to
    another state: nothing is requested."""
    detail = event.get("detail") or {}
    name, state = detail.get("alarmName"), detail.get("state") or {}
    if state.get("value") != ALARM_STATE:
        return None
    if not isinstance(state.get("timestamp"), str) or not state["timestamp"]:
        raise RequestRefused(
            f"detail.state.timestamp: {state.get('timestamp')!r} - the time of the change to {ALARM_STATE}"
        )
    found = [
        (w, spec) for w in windows if w.budget_window is None for spec in w.alarm_requests if spec["alarm_name"] == name
    ]
    if not found:
        raise RequestRefused(f"detail.alarmName: {name!r} - an alarm a capacity window declares in alarm_requests")
    (window, spec), *_ = found  # the model allows an alarm in one window only
    token = f"alarm:{name}@{state['timestamp']}"
    if len(token) > MAX_TOKEN:  # alarm names run to 255 characters
        token = f"alarm:{hashlib.sha256(token.encode()).hexdigest()}"
    return {
        "token": token,
        "team": window.team,
        "instance_type": window.instance_type,
        "count": spec["count"],
        "hours": spec["hours"],
        "start": None,
        "window": window.name,
        "requested_by": f"alarm:{name}",
    }
