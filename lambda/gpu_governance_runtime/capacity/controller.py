"""One controller run: reconcile, plan, then ask, buy or only report, exactly once.

Order matters. Undecided intents are settled from what AWS shows (tags, extension history,
training plan names) *before* anything new is planned, and an intent is recorded, with its fee
reserved, *before* the purchase call. So a crash, a timeout, a duplicate event or a second run
at the same time finds the record and never buys twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Callable, Iterable

from .aws import CapacityMarket
from .ledger import ClaimRefused, Intent, Ledger
from .planner import Plan, Purchase, Reservation, Window, plan

# DescribeCapacityReservations is eventually consistent: an attempt with no trace this long
# after it was made did not go through, and the occurrence may be tried again.
SETTLE_AFTER = timedelta(minutes=10)

Notify = Callable[[str, dict], None]  # (subject, message)


@dataclass(frozen=True, kw_only=True)
class RunReport:
    plan: Plan
    bought: tuple[Intent, ...] = ()
    awaiting_approval: tuple[Intent, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()  # (intent id, why)
    in_flight: tuple[str, ...] = ()  # intents whose outcome is not known yet
    refused: tuple[str, ...] = ()  # claims another run or the budget refused
    uncovered: tuple[tuple[str, str], ...] = ()  # (occurrence, why): planned as such, or its purchase failed
    owned: tuple[Reservation, ...] = ()  # every block and training plan this controller holds, as listed this run


@dataclass(kw_only=True)
class _Log:
    bought: list[Intent] = field(default_factory=list)
    awaiting: list[Intent] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    uncovered: list[tuple[str, str]] = field(default_factory=list)


def run(*, windows: Iterable[Window], ledger: Ledger, capacity: CapacityMarket, notify: Notify, now: datetime) -> RunReport:
    windows = {w.name: w for w in windows}
    log = _Log()
    owned = reconcile(windows=windows, ledger=ledger, capacity=capacity, notify=notify, now=now, log=log)
    for intent in ledger.open_intents():
        if intent.status == "approved" and intent.window in windows:
            _buy_approved(intent, windows[intent.window], ledger, capacity, notify, now, log)
    # An undecided intent holds its occurrence as if bought: plan around it, never twice for it.
    # So does a block bought moments ago that the listing above could not show yet.
    listed = {r.id for r in owned}
    held = owned + [_as_reservation(i) for i in ledger.open_intents() + log.bought if i.reservation_id not in listed]
    offerings = [o for w in windows.values() for o in capacity.offerings(w, held, now)]
    result = plan(windows=windows.values(), reservations=held, offerings=offerings,
                  spent={w.name: ledger.spent(w, now) for w in windows.values()}, now=now)
    for purchase in result.purchases:
        window = windows[purchase.window]
        if window.mode == "approval":
            _request_approval(purchase, window, ledger, notify, now, log)
        elif window.mode == "auto":
            _buy(purchase, window, ledger, capacity, notify, now, log)
    uncovered = [(u.occurrence.key, u.reason) for u in result.uncovered] + log.uncovered
    for occurrence, reason in uncovered:
        notify("Capacity window not covered", {"occurrence": occurrence, "reason": reason})
    return RunReport(plan=result, bought=tuple(log.bought), awaiting_approval=tuple(log.awaiting), failed=tuple(log.failed),
                     in_flight=tuple(log.in_flight), refused=tuple(log.refused), uncovered=tuple(uncovered), owned=tuple(owned))


def reconcile(*, windows, ledger: Ledger, capacity: CapacityMarket, notify: Notify, now: datetime, log: _Log) -> list[Reservation]:
    """Settle every undecided intent from what AWS shows; return what this controller owns."""
    owned = capacity.owned(windows.values())
    by_intent = {intent_id: r for r, intent_id in owned if intent_id}
    for intent in ledger.open_intents():
        if intent.status in ("awaiting_approval", "approved"):
            if intent.offering.start <= now:
                ledger.settle(intent, status="failed", now=now, reason="approval expired: the offering has started")
                log.failed.append((intent.id, "approval expired"))
            continue
        found = by_intent.get(intent.id) or capacity.outcome_of(intent.id, intent.offering, intent.window)
        if found is not None and found.state == "payment-failed":
            _fail(ledger, intent, f"{found.id} is payment-failed", notify, now, log)
        elif found is not None:
            if ledger.settle(intent, status="purchased", now=now, reservation_id=found.id):
                log.bought.append(replace(intent, status="purchased", reservation_id=found.id))
        elif now - intent.updated_at >= SETTLE_AFTER:
            _fail(ledger, intent, f"no trace {SETTLE_AFTER} after the attempt: not bought", notify, now, log)
        else:
            log.in_flight.append(intent.id)
    # A block can go payment-failed after it was recorded as bought: nothing was charged.
    for reservation, intent_id in owned:
        if reservation.state == "payment-failed" and intent_id:
            intent = ledger.intent(intent_id)
            if intent is not None and intent.status == "purchased" and ledger.refund_payment_failure(intent, now=now, reason=f"{reservation.id} is payment-failed"):
                log.failed.append((intent.id, "payment-failed"))
                notify("Capacity Block payment failed", {"intent": intent.id, "reservation": reservation.id, "window": intent.window})
    return [r for r, _ in owned]


def _buy(purchase: Purchase, window: Window, ledger: Ledger, capacity: CapacityMarket, notify: Notify, now: datetime, log: _Log) -> None:
    try:
        intent = ledger.claim(purchase, window, status="purchasing", now=now)
    except ClaimRefused as refusal:
        log.refused.append(str(refusal))
        return
    _purchase(intent, ledger, capacity, notify, now, log)


def _buy_approved(intent: Intent, window: Window, ledger, capacity, notify, now, log) -> None:
    """Honour an approval only while the offering is still for sale at no more than approved."""
    current = capacity.still_offered(intent.offering, window)
    if current is None:
        _fail(ledger, intent, "offering no longer for sale", notify, now, log)
        return
    if current.upfront_fee > intent.offering.upfront_fee or current.price_per_instance_hour > window.max_price_per_instance_hour:
        _fail(ledger, intent, f"price changed from {intent.offering.upfront_fee} to {current.upfront_fee}", notify, now, log)
        return
    try:
        ledger.start_purchase(intent, now=now)
    except ClaimRefused as refusal:
        log.refused.append(str(refusal))
        return
    _purchase(replace(intent, status="purchasing"), ledger, capacity, notify, now, log)


def _purchase(intent: Intent, ledger: Ledger, capacity: CapacityMarket, notify: Notify, now: datetime, log: _Log) -> None:
    outcome = capacity.purchase(intent.offering, intent_id=intent.id, window=intent.window)
    if outcome.result == "purchased":
        ledger.settle(intent, status="purchased", now=now, reservation_id=outcome.reservation_id)
        log.bought.append(replace(intent, status="purchased", reservation_id=outcome.reservation_id))
        notify("Capacity bought", {"intent": intent.id, "window": intent.window, "reservation": outcome.reservation_id,
                                   "fee": str(intent.offering.upfront_fee), "start": intent.offering.start.isoformat(), "end": intent.offering.end.isoformat()})
    elif outcome.result == "refused":
        _fail(ledger, intent, outcome.reason, notify, now, log)
        log.uncovered.append((intent.occurrence, f"purchase failed: {outcome.reason}"))
    else:
        log.in_flight.append(intent.id)  # the next run's reconciliation decides


def _request_approval(purchase: Purchase, window: Window, ledger: Ledger, notify: Notify, now: datetime, log: _Log) -> None:
    try:
        intent = ledger.claim(purchase, window, status="awaiting_approval", now=now)
    except ClaimRefused as refusal:
        log.refused.append(str(refusal))
        return
    log.awaiting.append(intent)
    offering = intent.offering
    notify("Capacity purchase awaiting approval", {
        "intent": intent.id, "window": window.name, "what": f"{offering.count} x {offering.instance_type}",
        "where": offering.availability_zone, "when": f"{offering.start.isoformat()} to {offering.end.isoformat()}",
        "how_much": f"{offering.upfront_fee} {offering.currency}", "kind": offering.kind,
        "approve": f"gpu-governance capacity approve {intent.id}",
    })


def _fail(ledger: Ledger, intent: Intent, reason: str, notify: Notify, now: datetime, log: _Log) -> None:
    if ledger.settle(intent, status="failed", now=now, reason=reason):
        log.failed.append((intent.id, reason))
        notify("Capacity purchase failed", {"intent": intent.id, "window": intent.window, "reason": reason})


def _as_reservation(intent: Intent) -> Reservation:
    offering = intent.offering
    return Reservation(id=f"intent:{intent.id}", window=intent.window, instance_type=offering.instance_type, count=offering.count,
                       availability_zone=offering.availability_zone, start=offering.start, end=offering.end, state="payment-pending")
