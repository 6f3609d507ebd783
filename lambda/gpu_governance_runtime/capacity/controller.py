"""One controller run: reconcile, plan, then ask, buy or only report, exactly once.

Order matters. Undecided intents are settled from what AWS shows (tags, extension history,
training plan names) *before* anything new is planned, and an intent is recorded, with its fee
reserved, *before* the purchase call, and the moment of the call just before it. So a crash, a
timeout, a duplicate event or a second run at the same time finds the record and never buys
twice.

What AWS shows lags: ``DescribeCapacityReservations`` may not list a block for a while after
it was bought. So an intent recorded as purchased counts as held until the listing shows its
block (or its window is over), an uncertain attempt is settled as not bought only when
``SETTLE_AFTER`` has passed since the call itself, and a block that turns up for an intent
already settled as failed marks it purchased again, re-counts its fee and alerts
[aws: ec2-cb.reservation-listed-late]. A block is payment-pending until paid, and released when its
payment fails: its fee is refunded [aws: ec2-cb.payment-states].
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from botocore.exceptions import BotoCoreError, ClientError

from ..common import log as logs
from ..planners.capacity import Declined, Plan, Purchase, plan
from ..planners.offers import Reservation
from ..planners.window import Window
from . import chargeback
from .aws import PURCHASE_CALL_SECONDS, CapacityMarket
from .ledger import OPEN_STATUSES, ClaimRefused, Intent, Ledger

# DescribeCapacityReservations is eventually consistent
# (https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html): an attempt with no
# trace by its intent tag, nor by the reservation id the purchase answered with when one was kept,
# this long after the call was made did not go through, and the occurrence may be tried again.
# It is well past the lag seen (minutes): a late listing must never make a second purchase. A
# block listed later still is recorded (``Ledger.revive``) and alerted on.
SETTLE_AFTER = timedelta(hours=1)
# The settle after a purchase carries the reservation id only this run has: it is retried (a
# throttled ledger write) before the id is left to the listing.
SETTLE_ATTEMPTS = 4
SETTLE_BACKOFF_SECONDS = 0.5
# A purchase is started only with this much of the invocation left: the call itself plus the
# ledger writes around it (claim, call time, outcome).
PURCHASE_SECONDS = PURCHASE_CALL_SECONDS + 20

Notify = Callable[[str, dict], None]  # (subject, message)
Clock = Callable[[], datetime]
TimeLeft = Callable[[], float]  # seconds the invocation has left


@dataclass(frozen=True, kw_only=True)
class RunReport:
    plan: Plan
    bought: tuple[Intent, ...] = ()
    awaiting_approval: tuple[Intent, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()  # (intent id, why)
    in_flight: tuple[str, ...] = ()  # intents whose outcome is not known yet
    refused: tuple[str, ...] = ()  # claims another run or the budget refused
    uncovered: tuple[tuple[str, str], ...] = ()  # (occurrence, why): planned as such, or its purchase failed
    declined: tuple[tuple[str, str], ...] = ()  # (occurrence, why): a cover its window's hours would use too little of
    owned: tuple[Reservation, ...] = ()  # every block and training plan this controller holds, as listed this run
    found_late: tuple[Intent, ...] = ()  # settled as failed, then listed after all: purchased again, fee re-counted
    deferred: tuple[str, ...] = ()  # purchases not started: too little of the invocation left
    errors: tuple[tuple[str, str], ...] = ()  # (what, why): a step that failed without stopping the others


@dataclass(kw_only=True)
class _Log:
    bought: list[Intent] = field(default_factory=list)
    awaiting: list[Intent] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    uncovered: list[tuple[str, str]] = field(default_factory=list)
    found_late: list[Intent] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)

    def step(self, what: str, action: Callable[[], object]) -> bool:
        """Run one step; an error is recorded (and reported) instead of ending the run, so one
        window or intent that fails never keeps the others from being served."""
        try:
            action()
        except Exception as error:  # noqa: BLE001 - reported to the operator with its type
            self.errors.append((what, f"{type(error).__name__}: {error}"))
            return False
        return True


@dataclass(frozen=True, kw_only=True)
class _Run:
    ledger: Ledger
    capacity: CapacityMarket
    notify: Notify
    now: datetime
    clock: Clock
    time_left: TimeLeft
    log: _Log
    sleep: Callable[[float], None]


def run(
    *,
    windows: Iterable[Window],
    ledger: Ledger,
    capacity: CapacityMarket,
    notify: Notify,
    now: datetime,
    clock: Clock | None = None,
    time_left: TimeLeft | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> RunReport:
    """``clock`` gives the time as the run goes on (default: ``now`` throughout); ``time_left``
    the seconds the invocation has left (default: unlimited)."""
    windows = {w.name: w for w in windows}
    ctx = _Run(
        ledger=ledger,
        capacity=capacity,
        notify=notify,
        now=now,
        clock=clock or (lambda: now),
        time_left=time_left or (lambda: math.inf),
        log=_Log(),
        sleep=sleep,
    )
    log = ctx.log
    # Without the listing nothing is known about what is held: the run stops (and alarms).
    owned = reconcile(windows=windows, ledger=ledger, capacity=capacity, notify=notify, now=now, log=log)
    for intent in ledger.open_intents():
        if intent.status == "approved" and intent.window in windows:
            log.step(f"intent {intent.id}", lambda: _buy_approved(intent, windows[intent.window], ctx))
    held = _held(owned, ledger, now)
    offerings, planned = [], []
    for window in windows.values():

        def read(window: Window = window) -> None:
            # Only where the consumer can launch (its subnets' zones, read each run): a block elsewhere is paid and idle.
            launchable, found = capacity.for_planning(window, held, now)
            offerings.extend(found)
            planned.append(launchable)

        # A window whose consumer or offerings could not be read is not planned this run: "no offering" would be false.
        log.step(f"window {window.name}", read)
    result = plan(
        windows=planned,
        reservations=held,
        offerings=offerings,
        spent={w.name: ledger.spent(w, now) for w in windows.values()},
        now=now,
    )
    _act_on(result, windows, ctx)
    uncovered = [(u.occurrence.key, u.reason) for u in result.uncovered] + log.uncovered
    for occurrence, reason in uncovered:
        notify("Capacity window not covered", {"occurrence": occurrence, "reason": reason})
    for what, why in log.errors:
        notify("Capacity controller step failed", {"what": what, "error": why, "retry": "next run"})
    return RunReport(
        plan=result,
        bought=tuple(log.bought),
        awaiting_approval=tuple(log.awaiting),
        failed=tuple(log.failed),
        in_flight=tuple(log.in_flight),
        refused=tuple(log.refused),
        uncovered=tuple(uncovered),
        declined=tuple((d.occurrence.key, d.reason) for d in result.declined),
        owned=tuple(owned),
        found_late=tuple(log.found_late),
        deferred=tuple(log.deferred),
        errors=tuple(log.errors),
    )


def _act_on(result: Plan, windows: dict[str, Window], ctx: _Run) -> None:
    """Each occurrence's cover bought (auto) or asked for (approval), and each declined one recorded (auto)."""
    log, ledger, notify, now = ctx.log, ctx.ledger, ctx.notify, ctx.now
    covers: dict[str, list[Purchase]] = {}
    for purchase in result.purchases:
        covers.setdefault(purchase.occurrence.key, []).append(purchase)
    for key, pieces in covers.items():
        window = windows[pieces[0].window]
        if window.mode == "approval":
            for purchase in pieces:
                log.step(f"occurrence {key}", lambda: _request_approval(purchase, window, ledger, notify, now, log))
        elif window.mode == "auto":
            log.step(f"occurrence {key}", lambda: _buy_cover(pieces, window, ctx))
    for declined in result.declined:
        if windows[declined.window].mode == "auto":
            log.step(f"occurrence {declined.occurrence.key}", lambda: _record_declined(declined, ledger, notify, now))


def known_blocks(owned: Iterable[Reservation], ledger: Ledger) -> list[Reservation]:
    """The listed reservations and every purchased one EC2 does not list yet (its id is in the
    ledger): a block delivered while the listing lags is still moved onto."""
    owned = list(owned)
    listed = {r.id for r in owned}
    return owned + [
        replace(_as_reservation(i), id=i.reservation_id, state="scheduled")
        for i in ledger.intents("purchased")
        if i.reservation_id and i.reservation_id not in listed and not i.offering.extends
    ]


def _held(owned: list[Reservation], ledger: Ledger, now: datetime) -> list[Reservation]:
    """What the planner must count as held: the listed reservations, every undecided intent,
    and every purchased one the listing does not show yet (an extension keeps its block's id:
    it shows once the block's end has moved)."""
    listed = {r.id: r for r in owned}

    def unlisted(intent: Intent) -> bool:
        reservation = listed.get(intent.reservation_id)
        return reservation is None or reservation.end < intent.offering.end

    pending = [i for i in ledger.intents(*OPEN_STATUSES, "purchased") if i.offering.end > now and unlisted(i)]
    return owned + [_as_reservation(i) for i in pending]


def reconcile(
    *, windows, ledger: Ledger, capacity: CapacityMarket, notify: Notify, now: datetime, log: _Log
) -> list[Reservation]:
    """Settle every undecided intent from what AWS shows; return what this controller owns."""
    owned = capacity.owned(windows.values())
    by_intent = {intent_id: r for r, intent_id in owned if intent_id}
    open_ids = set()
    for intent in ledger.open_intents():
        open_ids.add(intent.id)
        log.step(
            f"intent {intent.id}",
            lambda: _settle_open(
                intent, by_intent, ledger, capacity, notify, now, log, team=chargeback.team_of(windows, intent.window)
            ),
        )
    purchased = {i.id for i in ledger.intents("purchased")}
    for reservation, intent_id in owned:
        if not intent_id or intent_id in open_ids:
            continue
        if reservation.state == "payment-failed" and intent_id in purchased:
            # A block can go payment-failed after it was recorded as bought: nothing was charged.
            intent = ledger.intent(intent_id)
            if ledger.refund_payment_failure(intent, now=now, reason=f"{reservation.id} is payment-failed"):
                chargeback.publish_fee(intent, chargeback.team_of(windows, intent.window), refund=True)
                log.failed.append((intent.id, "payment-failed"))
                notify(
                    "Capacity Block payment failed",
                    {"intent": intent.id, "reservation": reservation.id, "window": intent.window},
                )
        elif reservation.state != "payment-failed" and intent_id not in purchased:
            intent = ledger.intent(intent_id)
            if (
                intent is not None
                and intent.status == "failed"
                and ledger.revive(intent, reservation_id=reservation.id, now=now)
            ):
                chargeback.publish_fee(intent, chargeback.team_of(windows, intent.window))
                log.found_late.append(replace(intent, status="purchased", reservation_id=reservation.id))
                notify(
                    "Capacity purchase found after it was settled as failed",
                    {
                        "intent": intent.id,
                        "window": intent.window,
                        "occurrence": intent.occurrence,
                        "reservation": reservation.id,
                        "fee": str(intent.offering.upfront_fee),
                        "failed_because": intent.reason,
                        "check": "the fee is counted again; AWS listed the block later than the settle grace, so look for a second "
                        "block bought for the same occurrence",
                    },
                )
    return [r for r, _ in owned]


def _settle_open(
    intent: Intent,
    by_intent,
    ledger: Ledger,
    capacity: CapacityMarket,
    notify: Notify,
    now: datetime,
    log: _Log,
    *,
    team: str,
) -> None:
    if intent.status in ("awaiting_approval", "approved"):
        if intent.offering.start <= now:
            ledger.settle(intent, status="failed", now=now, reason="approval expired: the offering has started")
            log.failed.append((intent.id, "approval expired"))
        return
    found = (
        by_intent.get(intent.id)
        or capacity.outcome_of(intent.id, intent.offering, intent.window)
        or (capacity.reservation(intent.reservation_id) if intent.reservation_id else None)
    )
    if found is not None and found.state == "payment-failed":
        _fail(ledger, intent, f"{found.id} is payment-failed", notify, now, log)
    elif found is not None:
        if ledger.settle(intent, status="purchased", now=now, reservation_id=found.id):
            chargeback.publish_fee(intent, team)
            log.bought.append(replace(intent, status="purchased", reservation_id=found.id))
    elif now - intent.attempted_at >= SETTLE_AFTER:
        _fail(ledger, intent, f"no trace {SETTLE_AFTER} after the purchase call: not bought", notify, now, log)
    else:
        log.in_flight.append(intent.id)


def _buy_cover(pieces: list[Purchase], window: Window, ctx: _Run) -> None:
    """Buy the pieces of one occurrence's cover in the planner's order (cheapest first), each only
    once the one before it is bought: a piece refused, undecided or not started stops the rest, so
    at most the cheaper pieces before it wait unused. What was bought stays recorded for the
    window, and its next run plans only what is still missing around it."""
    bought: list[Purchase] = []
    for number, purchase in enumerate(pieces, start=1):
        if _buy(purchase, window, ctx) != "purchased":
            if bought:
                stopped = (
                    f"piece {number} of {len(pieces)} ({purchase.offering.id}) not bought; the other "
                    f"{len(pieces) - number} not tried"
                )
                held = [
                    {
                        "offering": p.offering.id,
                        "from": p.offering.start.isoformat(),
                        "to": p.offering.end.isoformat(),
                        "instances": p.offering.count,
                        "fee": str(p.offering.upfront_fee),
                    }
                    for p in bought
                ]
                ctx.log.uncovered.append(
                    (
                        purchase.occurrence.key,
                        f"cover incomplete: {stopped}; bought {[h['offering'] for h in held]} "
                        "count for the next attempt",
                    )
                )
                ctx.notify(
                    "Capacity cover incomplete",
                    {
                        "occurrence": purchase.occurrence.key,
                        "window": window.name,
                        **window.owner_fields,
                        "stopped": stopped,
                        "bought": held,
                        "next": "the next run plans only what these pieces leave uncovered",
                    },
                )
            return
        bought.append(purchase)


def _buy(purchase: Purchase, window: Window, ctx: _Run) -> str:
    """Claim and buy one piece: "purchased", or what else happened (deferred, refused, failed, in flight)."""
    if ctx.time_left() < PURCHASE_SECONDS:
        ctx.log.deferred.append(purchase.occurrence.key)  # claimed by the next run, which has the time
        return "deferred"
    try:
        intent = ctx.ledger.claim(purchase, window, status="purchasing", now=ctx.now)
    except ClaimRefused as refusal:
        ctx.log.refused.append(str(refusal))
        return "refused"
    return _purchase(intent, window, ctx)


def _buy_approved(intent: Intent, window: Window, ctx: _Run) -> None:
    """Honour an approval only while the offering is still for sale at no more than approved (its fee may
    have changed since [aws: ec2-cb.price-may-change]) and within the window's cap read this run."""
    ledger, notify, now, log = ctx.ledger, ctx.notify, ctx.now, ctx.log
    current = ctx.capacity.still_offered(intent.offering, window)
    if current is None:
        _fail(ledger, intent, "offering no longer for sale", notify, now, log)
        return
    hourly, cap = current.price_per_instance_hour, window.max_price_per_instance_hour
    refused = (
        f"price changed from {intent.offering.upfront_fee} to {current.upfront_fee}"
        if current.upfront_fee > intent.offering.upfront_fee
        # the cap read this run: a deploy may have lowered it since the approval
        else f"price {hourly} an instance-hour is above the window's cap of {cap}"
        if hourly > cap
        else None
    )
    if refused:
        _fail(ledger, intent, refused, notify, now, log)
        return
    if ctx.time_left() < PURCHASE_SECONDS:
        log.deferred.append(intent.occurrence)  # stays approved: the next run buys it
        return
    try:
        ledger.start_purchase(intent, now=now)
    except ClaimRefused as refusal:
        log.refused.append(str(refusal))
        return
    _purchase(replace(intent, status="purchasing"), window, ctx)


def _purchase(intent: Intent, window: Window, ctx: _Run) -> str:
    ledger, notify, now, log = ctx.ledger, ctx.notify, ctx.now, ctx.log
    ledger.mark_called(intent, at=ctx.clock())  # the settle grace counts from here, not from the run's start
    outcome = ctx.capacity.purchase(intent.offering, intent_id=intent.id, window=intent.window, owner=window.owner_tags)
    if outcome.result == "purchased":
        if _settle_bought(intent, outcome.reservation_id, ctx):
            chargeback.publish_fee(intent, window.team)  # the ledger's record is the exactly-once point
        log.bought.append(replace(intent, status="purchased", reservation_id=outcome.reservation_id))
        notify(
            "Capacity bought",
            {
                "intent": intent.id,
                "window": intent.window,
                **window.owner_fields,
                "reservation": outcome.reservation_id,
                "fee": str(intent.offering.upfront_fee),
                "start": intent.offering.start.isoformat(),
                "end": intent.offering.end.isoformat(),
            },
        )
    elif outcome.result == "refused":
        _fail(ledger, intent, outcome.reason, notify, now, log)
        log.uncovered.append((intent.occurrence, f"purchase failed: {outcome.reason}"))
    else:
        log.in_flight.append(intent.id)  # the next run's reconciliation decides
    return outcome.result


def _settle_bought(intent: Intent, reservation_id: str, ctx: _Run) -> bool:
    """Record the purchase with its reservation id, retrying a ledger write that failed (it is the
    one place the id is known before EC2 lists the block). When every attempt fails, the id is
    kept on the intent by a smaller write if that goes through, and logged either way; the intent
    stays undecided, counts as held, and the next run settles it by tag or id."""
    for attempt in range(SETTLE_ATTEMPTS):
        try:
            return ctx.ledger.settle(intent, status="purchased", now=ctx.now, reservation_id=reservation_id)
        except (ClientError, BotoCoreError) as error:
            failure = error
            if attempt + 1 < SETTLE_ATTEMPTS:
                ctx.sleep(SETTLE_BACKOFF_SECONDS * 2**attempt)
    with contextlib.suppress(ClientError, BotoCoreError):  # the log line below and the tag on the block remain
        ctx.ledger.note_reservation(intent, reservation_id)
    logs.error("capacity purchase not recorded", intent=intent.id, reservation=reservation_id, error=str(failure))
    raise failure


DECLINED_PREFIX = "declined#"


def _record_declined(declined: Declined, ledger: Ledger, notify: Notify, now: datetime) -> None:
    """Say once per occurrence why nothing is bought for it (the ledger's record is the once): every run plans it
    again, and buys as soon as a cover reaches the window's ``min_yield``."""
    details = {
        "window": declined.window,
        "occurrence": declined.occurrence.key,
        "expected_yield": f"{declined.expected_yield:.2f}",
        "reason": declined.reason,
    }
    if ledger.claim_action(DECLINED_PREFIX + declined.occurrence.key, status="declined", details=details, now=now):
        notify("Capacity purchase declined", details)


def _request_approval(
    purchase: Purchase, window: Window, ledger: Ledger, notify: Notify, now: datetime, log: _Log
) -> None:
    try:
        intent = ledger.claim(purchase, window, status="awaiting_approval", now=now)
    except ClaimRefused as refusal:
        log.refused.append(str(refusal))
        return
    log.awaiting.append(intent)
    offering = intent.offering
    low = purchase.expected_yield is not None and purchase.expected_yield < window.min_yield
    notify(
        "Capacity purchase awaiting approval",
        {
            "intent": intent.id,
            "window": window.name,
            **window.owner_fields,
            **({"expected_yield": f"{purchase.expected_yield:.2f}"} if purchase.expected_yield is not None else {}),
            **(
                {"below_min_yield": f"the window's hours use less of this cover than min_yield {window.min_yield}"}
                if low
                else {}
            ),
            "what": f"{offering.count} x {offering.instance_type}",
            "where": offering.availability_zone,
            "when": f"{offering.start.isoformat()} to {offering.end.isoformat()}",
            "how_much": f"{offering.upfront_fee} {offering.currency}",
            "kind": offering.kind,
            "approve": f"gpu-governance capacity approve {intent.id}",
        },
    )


def _fail(ledger: Ledger, intent: Intent, reason: str, notify: Notify, now: datetime, log: _Log) -> None:
    if ledger.settle(intent, status="failed", now=now, reason=reason):
        log.failed.append((intent.id, reason))
        notify("Capacity purchase failed", {"intent": intent.id, "window": intent.window, "reason": reason})


def _as_reservation(intent: Intent) -> Reservation:
    offering = intent.offering
    return Reservation(
        id=f"intent:{intent.id}",
        window=intent.window,
        instance_type=offering.instance_type,
        count=offering.count,
        availability_zone=offering.availability_zone,
        start=offering.start,
        end=offering.end,
        state="payment-pending",
    )
