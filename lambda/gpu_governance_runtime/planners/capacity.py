"""Decide, for every capacity window, what to extend, what to buy and what cannot be covered.

Pure and deterministic: the same windows, reservations, offerings, spend and clock give the same
plan, so the Lambda controller, the tests and ``gpu-governance capacity plan`` share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from . import market
from .kinds import KINDS, kind_named, kind_of_offering
from .offers import HOUR, Offering, Reservation
from .window import Mode, Occurrence, Window

# A window rarely needs more than a chain of three blocks (e.g. 14 days + 7 days + an
# extension); the bound keeps the exhaustive search small and the plan easy to read.
MAX_PURCHASES_PER_OCCURRENCE = 3


@dataclass(frozen=True, kw_only=True)
class Purchase:
    """Buy (or extend with) ``offering`` for ``occurrence``; ``expected_yield``: of the cover it is a piece of."""

    window: str
    occurrence: Occurrence
    offering: Offering
    mode: Mode
    expected_yield: Decimal | None = None


@dataclass(frozen=True, kw_only=True)
class Declined:
    """A cover not bought for ``occurrence``: the window's own hours would use less of it than ``min_yield``."""

    window: str
    occurrence: Occurrence
    expected_yield: Decimal
    reason: str


@dataclass(frozen=True, kw_only=True)
class Uncovered:
    window: str
    occurrence: Occurrence
    reason: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    purchases: tuple[Purchase, ...]
    uncovered: tuple[Uncovered, ...]
    covered: tuple[Occurrence, ...]
    ignored_offerings: tuple[tuple[str, str], ...]  # (offering id, why)
    declined: tuple[Declined, ...] = ()

    def spend(self, window: str) -> Decimal:
        return sum((p.offering.upfront_fee for p in self.purchases if p.window == window), Decimal(0))


# --- coverage ------------------------------------------------------------------------------------

Interval = tuple[datetime, datetime, int]  # start, end, instances


def shortfall(occurrence: Occurrence, needed: int, held: Iterable[Interval]) -> list[Interval]:
    """Pieces of the occurrence where ``held`` gives fewer than ``needed`` instances, with how
    many are missing there."""
    held = [h for h in held if h[0] < occurrence.end and h[1] > occurrence.start]
    cuts = sorted(
        {occurrence.start, occurrence.end} | {t for h in held for t in h[:2] if occurrence.start < t < occurrence.end}
    )
    pieces: list[Interval] = []
    for start, end in zip(cuts, cuts[1:], strict=False):
        missing = needed - sum(h[2] for h in held if h[0] <= start and h[1] >= end)
        if missing <= 0:
            continue
        if pieces and pieces[-1][1] == start and pieces[-1][2] == missing:
            pieces[-1] = (pieces[-1][0], end, missing)
        else:
            pieces.append((start, end, missing))
    return pieces


def coverable(occurrence: Occurrence, now: datetime) -> Occurrence:
    """The part of the occurrence that can still be bought (see ``market.instant_start_cover_from``)."""
    start = min(market.instant_start_cover_from(occurrence.start, now), occurrence.end)
    return replace(occurrence, start=start)


def _interval(offering: Offering, reservations: Mapping[str, Reservation]) -> Interval:
    if offering.extends:
        extended = reservations[offering.reservation_id]
        return (extended.end, offering.end, extended.count)
    return (offering.start, offering.end, offering.count)


def usable(offering: Offering, reservations: Mapping[str, Reservation]) -> Interval:
    """When the piece's instances can run work: its span but the last 30 minutes, when EC2 terminates them
    [aws: ec2-cb.expiration-warning-and-termination] (a training plan's too,
    [aws: hyperpod.training-plan-termination]); an extension lets the block's own last 30 minutes run on."""
    start, end, count = _interval(offering, reservations)
    return (start - market.TERMINATION_LEAD if offering.extends else start, end - market.TERMINATION_LEAD, count)


def expected_use(gaps: list[Interval], cover: Iterable[Offering], reservations: Mapping[str, Reservation]) -> Decimal:
    """Instance-hours of the window's own hours (``gaps``: the instances each piece of the occurrence misses) that the
    cover's instances can run."""
    pieces = [usable(o, reservations) for o in cover]
    used = Decimal(0)
    for start, end, missing in gaps:
        cuts = sorted({start, end} | {t for p in pieces for t in p[:2] if start < t < end})
        for a, b in zip(cuts, cuts[1:], strict=False):
            running = sum(p[2] for p in pieces if p[0] <= a and p[1] >= b)
            used += min(missing, running) * Decimal((b - a).total_seconds()) / 3600
    return used


def expected_yield(gaps: list[Interval], cover: Iterable[Offering], reservations: Mapping[str, Reservation]) -> Decimal:
    """The share of the cover's instance-hours bought that the window's own hours will use (docs/capacity.md,
    *Buying for yield*): work the consumer gets besides (a shared Batch queue's) is not counted, so a yield is never
    overstated."""
    cover = list(cover)
    paid = sum((o.instance_hours for o in cover), Decimal(0))
    return expected_use(gaps, cover, reservations) / paid if paid else Decimal(0)


def _covers(gaps: list[Interval], chosen: Iterable[Interval]) -> bool:
    chosen = list(chosen)
    return all(
        not shortfall(Occurrence(window="", start=start, end=end), missing, chosen) for start, end, missing in gaps
    )


# --- planning ------------------------------------------------------------------------------------


def plan(
    *,
    windows: Iterable[Window],
    reservations: Iterable[Reservation],
    offerings: Iterable[Offering],
    spent: Mapping[str, Decimal],
    now: datetime,
) -> Plan:
    """Cover every occurrence in the horizon at least cost, then least unused instance-hours.

    ``spent`` is what each window already spent (or committed) in its current budget period.
    Windows are served earliest occurrence first; a purchase planned for one occurrence counts
    against the budget of the next."""
    now = market.utc(now)
    reservations = tuple(reservations)
    by_id = {r.id: r for r in reservations}
    sound, ignored = _sound_offerings(offerings, by_id, now)
    windows = {w.name: w for w in windows}
    planning = _Planning(reservations=reservations, by_id=by_id, now=now)
    for offering in sound:  # an occurrence looks only at offerings of its type
        planning.of_type.setdefault(offering.instance_type, []).append(offering)
    for name, w in windows.items():  # by budget: a requested window spends its declared window's
        planning.committed.setdefault(w.budget_key, Decimal(spent.get(name, 0)))
    # Declared windows first, then requests: a request counts what its declared window holds or
    # buys in this very plan (Window.serves_with), so it is planned once that is known.
    for occurrence in sorted(
        (o for w in windows.values() for o in w.occurrences(now)),
        key=lambda o: (windows[o.window].budget_window is not None, o),
    ):
        planning.cover(windows[occurrence.window], occurrence)
    return Plan(
        purchases=tuple(planning.purchases),
        uncovered=tuple(planning.uncovered),
        covered=tuple(planning.covered),
        ignored_offerings=tuple(ignored),
        declined=tuple(planning.declined),
    )


@dataclass(kw_only=True)
class _Planning:
    """One plan as it is made, occurrence by occurrence: what is bought so far and what it commits."""

    reservations: tuple[Reservation, ...]
    by_id: Mapping[str, Reservation]
    now: datetime
    of_type: dict[str, list[Offering]] = field(default_factory=dict)
    committed: dict[str, Decimal] = field(default_factory=dict)
    purchases: list[Purchase] = field(default_factory=list)
    uncovered: list[Uncovered] = field(default_factory=list)
    declined: list[Declined] = field(default_factory=list)
    covered: list[Occurrence] = field(default_factory=list)
    purchased: set[str] = field(default_factory=set)
    limited: dict[str, int] = field(default_factory=dict)  # instances held per kind with an account limit

    def __post_init__(self) -> None:
        # Every reservation not yet ended counts against its kind's limit, overlapping or not [aws: ec2-cb.instance-limits].
        self.limited = {
            kind.name: sum(
                r.count
                for r in self.reservations
                if kind.holds(r) and r.state in market.COVERING_STATES and r.end > self.now
            )
            for kind in KINDS.values()
            if kind.instance_limit
        }

    def cover(self, window: Window, occurrence: Occurrence) -> None:
        """Plan the cheapest usable cover of what ``occurrence`` lacks, or say why there is none."""
        own = [r for r in self.reservations if window.serves_with(r.window) and _fits(r, window)]
        held = [(r.start, r.end, r.count) for r in own if r.state in market.COVERING_STATES]
        ours = [p for p in self.purchases if window.serves_with(p.window)]
        gaps = shortfall(
            coverable(occurrence, self.now),
            window.instance_count,
            held + [_interval(p.offering, self.by_id) for p in ours],
        )
        if not gaps:
            self.covered.append(occurrence)
            return
        own_ids = {r.id for r in own}
        candidates = [
            o
            for o in self.of_type.get(window.instance_type, ())
            if _fits(o, window)
            and _serves(o, window, own_ids)
            and _overlaps(_interval(o, self.by_id), gaps)
            and o.id not in self.purchased
        ]
        spans = {r.id: (r.start, r.end) for r in own if r.state in market.COVERING_STATES}
        spans.update({p.offering.id: _interval(p.offering, self.by_id)[:2] for p in ours})
        choice, reason = self._choice(window, occurrence, gaps, candidates, spans)
        if choice is None:
            if reason:
                self.uncovered.append(Uncovered(window=window.name, occurrence=occurrence, reason=reason))
            return
        share = expected_yield(gaps, choice, self.by_id)
        for offering in choice:
            self.purchases.append(
                Purchase(
                    window=window.name, occurrence=occurrence, offering=offering, mode=window.mode, expected_yield=share
                )
            )
            self.purchased.add(offering.id)
            self.committed[window.budget_key] += offering.upfront_fee
        for kind in self.limited:
            self.limited[kind] += _new_instances(choice, kind)

    def _choice(self, window: Window, occurrence: Occurrence, gaps, candidates, spans):
        """(cover, "") or (None, why it is uncovered); (None, "") when it is declined for its yield (recorded)."""
        budget_left = window.budget - self.committed[window.budget_key]
        choice, reason = _choose(window, gaps, candidates, self.by_id, budget_left=budget_left, held=spans)
        if (
            choice is not None
            and expected_yield(gaps, choice, self.by_id) < window.min_yield
            and window.mode != "approval"
        ):
            # Another cover the window's hours use enough of (a shorter block, an instant start), if any; else none.
            cheapest, choice = (
                choice,
                _choose(
                    window,
                    gaps,
                    candidates,
                    self.by_id,
                    budget_left=budget_left,
                    held=spans,
                    accept=lambda combo: expected_yield(gaps, combo, self.by_id) >= window.min_yield,
                )[0],
            )
            if choice is None:
                self.declined.append(_declined(window, occurrence, gaps, cheapest, self.by_id))
                return None, ""
        if choice is None:
            return None, reason
        for name, held in self.limited.items():
            limit, what = KINDS[name].instance_limit
            if held + (added := _new_instances(choice, name)) > limit:
                return None, (
                    f"at most {limit} instances across {what}: {held} held or being bought, this cover adds {added}"
                )
        return choice, ""


def _new_instances(cover: Iterable[Offering], kind: str) -> int:
    """Instances of the new reservations of ``kind`` in ``cover`` (an extension adds none)."""
    return sum(o.count for o in cover if KINDS[kind].offers(o) and not o.extends)


def _declined(
    window: Window, occurrence: Occurrence, gaps: list[Interval], cover, reservations: Mapping[str, Reservation]
) -> Declined:
    share = expected_yield(gaps, cover, reservations)
    paid = sum((o.instance_hours for o in cover), Decimal(0))
    pieces = ", ".join(f"{o.count} x {o.start:%Y-%m-%d %H:%M}-{o.end:%Y-%m-%d %H:%M} UTC" for o in cover)
    return Declined(
        window=window.name,
        occurrence=occurrence,
        expected_yield=share,
        reason=(
            f"expected yield {share * 100:.0f} %: its hours use {expected_use(gaps, cover, reservations):.1f} of the {paid:.1f} "
            f"instance-hours of the cheapest cover ({pieces}), and no cover reaches min_yield {window.min_yield * 100:.0f} %; "
            "`gpu-governance validate` shows the placements that waste less, mode approval asks a person"
        ),
    )


def _sound_offerings(offerings: Iterable[Offering], reservations: Mapping[str, Reservation], now: datetime):
    sound, ignored = [], []
    for offering in offerings:
        if offering.extends and offering.reservation_id not in reservations:
            problem = f"extends {offering.reservation_id}, which this controller did not buy"
        elif offering.extends and reservations[offering.reservation_id].state not in market.EXTENDABLE_STATES:
            problem = f"extends {offering.reservation_id}, which is {reservations[offering.reservation_id].state}"
        else:
            extended = reservations[offering.reservation_id] if offering.extends else None
            problem = kind_of_offering(offering).offering_problem(offering, extended, now)
        if problem is None and offering.start < now - HOUR and not offering.extends:
            problem = f"started {offering.start:%Y-%m-%d %H:%M} UTC, in the past"
        if problem:
            ignored.append((offering.id, problem))
        else:
            sound.append(offering)
    return sorted(sound, key=lambda o: o.id), ignored


def _fits(item: Reservation | Offering, window: Window) -> bool:
    """Of the window's type and zones. A block held in a zone the consumer's subnets no longer reach still counts
    as held (buying a second one would spend twice; the rotation reports the zone, ``rotation._block_problems``);
    only offerings must be in a zone the consumer can launch in."""
    launchable = isinstance(item, Offering)
    return item.instance_type == window.instance_type and window.allows_zone(
        item.availability_zone, launchable=launchable
    )


def _serves(offering: Offering, window: Window, own_ids: set[str]) -> bool:
    """Of the kind the window buys: a new reservation, or an extension of one the window holds."""
    return kind_named(window.market).offers(offering) and (not offering.extends or offering.reservation_id in own_ids)


def _overlaps(interval: Interval, gaps: list[Interval]) -> bool:
    return any(interval[0] < end and interval[1] > start for start, end, _ in gaps)


def _choose(
    window: Window,
    gaps,
    candidates: list[Offering],
    reservations,
    *,
    budget_left: Decimal,
    held: Mapping[str, tuple[datetime, datetime]] = {},
    accept=None,
):
    """The best combination of offerings covering ``gaps`` that the consumer can use together
    with ``held`` (reservation id -> span), and that ``accept`` takes when given, or None and the reason."""
    if not candidates:
        return None, f"no offering of {window.instance_type} in {window.zones_described} for {_describe(gaps)}"
    affordable = [o for o in candidates if o.price_per_instance_hour <= window.max_price_per_instance_hour]
    best = _cheapest_cover(window, gaps, affordable, reservations, held=held, accept=accept)
    if best is None:
        if _cheapest_cover(window, gaps, candidates, reservations, held=held) is not None:
            needed = _lowest_covering_price(window, gaps, candidates, reservations, held)
            return None, (
                f"price cap: covering offerings cost from {needed:.2f} per instance-hour, "
                f"cap is {window.max_price_per_instance_hour}"
            )
        if (
            window.reservations_at_once is not None
            and _cheapest_cover(window, gaps, candidates, reservations, held=None) is not None
        ):
            return None, (
                f"{window.consumer['kind']} launches into {window.reservations_at_once} reservation at a time: every cover of "
                f"{_describe(gaps)} needs pieces at the same time, and a piece it cannot launch into would be paid and idle"
            )
        return None, f"no combination of at most {MAX_PURCHASES_PER_OCCURRENCE} offerings covers {_describe(gaps)}"
    within_budget = (
        best
        if sum(o.upfront_fee for o in best) <= budget_left
        # the best cover, if affordable, is the best affordable one
        else (
            _cheapest_cover(window, gaps, affordable, reservations, budget_left=budget_left, held=held, accept=accept)
        )
    )
    if within_budget is None:
        cost = sum(o.upfront_fee for o in best)
        return (
            None,
            f"budget: cheapest cover costs {cost}, {max(budget_left, Decimal(0))} left this {window.budget_period}",
        )
    return within_budget, ""


def _lowest_covering_price(window: Window, gaps, candidates: list[Offering], reservations, held) -> Decimal:
    """The lowest cap per instance-hour under which some combination covers ``gaps``: a price
    named to the operator must come from offerings that actually cover the window."""
    prices = sorted({o.price_per_instance_hour for o in candidates})
    low, high = 0, len(prices) - 1  # covering is monotone in the cap; the highest price covers
    while low < high:
        middle = (low + high) // 2
        if (
            _cheapest_cover(
                window,
                gaps,
                [o for o in candidates if o.price_per_instance_hour <= prices[middle]],
                reservations,
                held=held,
            )
            is None
        ):
            low = middle + 1
        else:
            high = middle
    return prices[low]


def _first_missing(gaps: list[Interval], chosen: list[Interval]) -> tuple[datetime, int] | None:
    """The earliest moment of ``gaps`` that ``chosen`` leaves short, and by how many instances;
    None when ``chosen`` covers them."""
    short = [
        piece
        for start, end, missing in gaps
        for piece in shortfall(Occurrence(window="", start=start, end=end), missing, chosen)[:1]
    ]
    return min(((start, missing) for start, _, missing in short), default=None)


def _cheapest_cover(
    window: Window,
    gaps,
    offerings: list[Offering],
    reservations,
    *,
    budget_left: Decimal | None = None,
    held: Mapping[str, tuple[datetime, datetime]] | None = {},
    accept=None,
):
    """The best combination of at most ``MAX_PURCHASES_PER_OCCURRENCE`` offerings covering
    ``gaps``: with ``prefer_extension`` one that extends a block if any does, then the cheapest,
    then the fewest purchased instance-hours (least unused time), then the fewest purchases.
    Only combinations the consumer can use together with ``held`` (reservation id -> span) count:
    never more reservations at one moment than ``window.reservations_at_once`` (``held=None``:
    any number), and only those ``accept`` takes (a cover's yield: adding a piece to a cover never raises it, so a
    cover it refuses is not grown). The pieces come cheapest first, the order they are bought in: if a later one
    fails, what was bought before it (and stays unused until the next attempt) costs least.

    The same answer as trying every combination (tests/capacity/test_planner_search.py), found
    faster. A cover must contain an offering that spans the earliest moment the offerings chosen
    so far leave short, so only those are tried next; cheapest first, and a branch stops as soon
    as its fee passes the best cover's or the budget (adding an offering never lowers the fee),
    or when even the largest such offerings cannot make up the shortfall in the purchases left."""
    by_fee = sorted(offerings, key=lambda o: (o.upfront_fee, o.id))
    intervals = {o.id: _interval(o, reservations) for o in by_fee}
    at_once = None if held is None else window.reservations_at_once

    def usable(combo: tuple[Offering, ...]) -> bool:
        return at_once is None or _launchable_together(combo, held, intervals, at_once)

    def search(need_extension: bool):
        best, best_rank = None, None

        def extend(combo: tuple[Offering, ...], fee: Decimal) -> None:
            nonlocal best, best_rank
            missing = _first_missing(gaps, [intervals[o.id] for o in combo])
            if missing is None:  # covers, but lacks the extension this search needs: only an extension can be added
                options = [o for o in by_fee if o.extends]
            else:
                moment, short = missing
                options = [o for o in by_fee if intervals[o.id][0] <= moment < intervals[o.id][1]]
                left = MAX_PURCHASES_PER_OCCURRENCE - len(combo)
                if left * max((intervals[o.id][2] for o in options), default=0) < short:
                    return
            for offering in options:
                total = fee + offering.upfront_fee
                if (best_rank is not None and total > best_rank[0]) or (
                    budget_left is not None and total > budget_left
                ):
                    break  # every later option costs at least as much
                if offering in combo or (
                    offering.extends and offering.reservation_id in {o.reservation_id for o in combo if o.extends}
                ):
                    continue  # one extension per block per plan: a second would start where the first ends
                chosen = combo + (offering,)
                if not usable(chosen):
                    continue  # adding pieces never lowers how many run at once
                qualifies = not need_extension or any(o.extends for o in chosen)
                if qualifies and _first_missing(gaps, [intervals[o.id] for o in chosen]) is None:
                    if (best_rank is None or _rank(chosen) < best_rank) and (accept is None or accept(chosen)):
                        best, best_rank = chosen, _rank(chosen)
                elif len(chosen) < MAX_PURCHASES_PER_OCCURRENCE:
                    extend(chosen, total)

        extend((), Decimal(0))
        return best

    if window.prefer_extension and any(o.extends for o in offerings):
        extending = search(need_extension=True)
        if extending is not None:
            return tuple(sorted(extending, key=lambda o: (o.upfront_fee, o.id)))
    best = search(need_extension=False)
    return None if best is None else tuple(sorted(best, key=lambda o: (o.upfront_fee, o.id)))


def _launchable_together(
    combo: tuple[Offering, ...],
    held: Mapping[str, tuple[datetime, datetime]],
    intervals: Mapping[str, Interval],
    at_once: int,
) -> bool:
    """Whether the consumer can launch into ``combo`` with what it holds: never more than ``at_once`` reservations
    at one moment while the pieces run."""
    spans = dict(held)
    for o in combo:  # an extension moves its block's end; a block is one more reservation
        key = o.reservation_id if o.extends else o.id
        spans[key] = (spans.get(key, intervals[o.id][:2])[0], intervals[o.id][1])
    return _most_at_once(spans.values(), within=[intervals[o.id][:2] for o in combo]) <= at_once


def _rank(combo: tuple[Offering, ...]) -> tuple:
    """Cheapest, then fewest purchased instance-hours (least unused time), then fewest purchases, then by id."""
    return (
        sum(o.upfront_fee for o in combo),
        sum(o.instance_hours for o in combo),
        len(combo),
        tuple(sorted(o.id for o in combo)),
    )


def _most_at_once(spans: Iterable[tuple[datetime, datetime]], *, within: Iterable[tuple[datetime, datetime]]) -> int:
    """The most spans that hold one moment inside one of ``within`` (the pieces being bought: what
    was held before is not made unusable by them); one ending as another starts is not together."""
    spans, within = list(spans), list(within)
    moments = [start for start, _ in spans + within if any(s <= start < e for s, e in within)]
    return max((sum(s <= moment < e for s, e in spans) for moment in moments), default=0)


def _describe(gaps: list[Interval]) -> str:
    return "; ".join(f"{missing} x {start:%Y-%m-%d %H:%M}-{end:%Y-%m-%d %H:%M} UTC" for start, end, missing in gaps)
