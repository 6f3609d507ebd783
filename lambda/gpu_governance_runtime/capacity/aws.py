"""The AWS side of buying: read offerings and reservations, purchase with the intent tag.

Purchases go through clients with retries switched off (``PURCHASE_CLIENT_CONFIG``): botocore
would otherwise resend a purchase after a 5xx or a timeout, and ``PurchaseCapacityBlock`` has
no idempotency token, so a resend can buy a second block [aws: ec2-cb.purchase-has-no-client-token].
We retry only where the request was certainly refused (throttling, validation, a connection that
never opened) and reconcile from tags everywhere else: any other error, whatever its type, may
have come after the request left.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ProxyConnectionError,
)

from ..common.clients import PURCHASE as PURCHASE_CLIENT_CONFIG  # noqa: F401  (the name its callers use)
from ..contract import TAG_INTENT, TAG_MANAGED_BY, TAG_WINDOW
from ..planners import market
from ..planners.capacity import coverable, shortfall
from ..planners.kinds import KINDS, kind_named, kind_of_offering
from ..planners.offers import Offering, Reservation, reservation_from_api
from ..planners.window import Window
from .consumers import launch_zones

# The longest one purchase call can take with that client (connect, then wait for the answer).
PURCHASE_CALL_SECONDS = 40
# Raised before a single byte of the request was sent: nothing can have been bought.
NOT_SENT = (
    ParamValidationError,
    NoCredentialsError,
    EndpointConnectionError,
    ConnectTimeoutError,
    ProxyConnectionError,
)
THROTTLING_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException"})


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a purchase call tells us. ``uncertain``: it may have gone through."""

    result: Literal["purchased", "refused", "uncertain"]
    reservation_id: str | None = None
    reason: str = ""


def classify(error: Exception) -> Outcome:
    """Throttled or rejected requests and requests never sent were not carried out; 5xx answers
    and every other error (a read timeout, a connection closed mid-answer, anything unforeseen)
    may come after the purchase was made."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400)
        if code in THROTTLING_CODES:
            return Outcome(result="refused", reason=f"throttled ({code}); retried next run")
        if status >= 500 or code in {"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"}:
            return Outcome(result="uncertain", reason=f"server error {code}; reconciling from tags")
        return Outcome(result="refused", reason=f"{code}: {error.response.get('Error', {}).get('Message', '')}".strip())
    if isinstance(error, NOT_SENT):
        return Outcome(result="refused", reason=f"not sent ({type(error).__name__}: {error}); retried next run")
    return Outcome(result="uncertain", reason=f"{type(error).__name__}: {error}; reconciling from tags")


class CapacityMarket:
    """Every kind of capacity (``kinds.KINDS``) for one controller: the clients its kinds call through."""

    def __init__(
        self,
        *,
        ec2: Any,
        sagemaker: Any,
        controller_id: str,
        purchase_ec2: Any = None,
        purchase_sagemaker: Any = None,
        batch: Any = None,
        eks: Any = None,
    ):
        """``ec2``/``sagemaker`` read (retries welcome); ``purchase_*`` buy and must be built with
        ``PURCHASE_CLIENT_CONFIG`` (default: the reading clients, which then must be too); ``batch``
        and ``eks`` read where a launch-template consumer can launch (None: not read, the declared
        zones alone bound the planner)."""
        self.ec2 = ec2
        self.sagemaker = sagemaker
        self.batch = batch
        self.eks = eks
        self.purchase_ec2 = purchase_ec2 or ec2
        self.purchase_sagemaker = purchase_sagemaker or sagemaker
        self.controller_id = controller_id

    # --- reservations ---------------------------------------------------------------------------

    def owned(self, windows: Iterable[Window]) -> list[tuple[Reservation, str | None]]:
        """Every reservation of every kind this controller bought, with its intent id."""
        windows = list(windows)
        return [found for kind in KINDS.values() for found in kind.owned(self, windows)]

    def reservation(self, reservation_id: str) -> Reservation | None:
        """The EC2 capacity reservation of this id as EC2 describes it, or None while it is not listed (or not ours)."""
        item = described_reservation(self.ec2, reservation_id)
        return None if item is None else reservation_from_api(item)

    def outcome_of(self, intent_id: str, offering: Offering, window: str) -> Reservation | None:
        """What an earlier purchase attempt produced, looked up by its intent, or None."""
        return kind_of_offering(offering).outcome_of(self, intent_id, offering, window)

    # --- offerings ------------------------------------------------------------------------------

    def for_planning(self, window: Window, held: Iterable[Reservation], now: datetime) -> tuple[Window, list[Offering]]:
        """The window as the planner should see it, and the offerings that could fill the gaps of its
        occurrences in the horizon. With a gap, the window carries the zones its consumer can launch
        in (``consumers.launch_zones``, read only then: a covered window costs no read)."""
        kind = kind_named(window.market)
        held = [r for r in held if window.serves_with(r.window) and r.state in market.COVERING_STATES]
        found: dict[str, Offering] = {}
        read_zones = False
        for occurrence in window.occurrences(now):
            for gap_start, gap_end, missing in shortfall(
                coverable(occurrence, now), window.instance_count, [(r.start, r.end, r.count) for r in held]
            ):
                if not read_zones:
                    window = replace(
                        window, launch_zones=launch_zones(window, ec2=self.ec2, batch=self.batch, eks=self.eks)
                    )
                    read_zones = True
                found.update((o.id, o) for o in kind.search(self, window, missing, gap_start, gap_end, now))
                if window.prefer_extension:
                    for reservation in held:
                        if reservation.state in market.EXTENDABLE_STATES and gap_start <= reservation.end < gap_end:
                            found.update((o.id, o) for o in kind.extensions(self, reservation, gap_end))
        return window, sorted(found.values(), key=lambda o: o.id)

    def still_offered(self, offering: Offering, window: Window) -> Offering | None:
        """The same offering as the market shows it now (its fee may have changed), or None."""
        found = kind_of_offering(offering).offered_again(self, offering, window)
        return next((o for o in found if o.id == offering.id), None)

    # --- purchases ------------------------------------------------------------------------------

    def purchase(
        self, offering: Offering, *, intent_id: str, window: str, owner: Mapping[str, str] | None = None
    ) -> Outcome:
        """Buy with the tags on the request itself (tag-on-create): the intent, window and
        controller, then ``owner`` (``Window.owner_tags``: team and cost centre)."""
        tags = {TAG_INTENT: intent_id, TAG_WINDOW: window, TAG_MANAGED_BY: self.controller_id, **(owner or {})}
        kind = kind_of_offering(offering)
        try:
            reservation_id = kind.purchase(self, offering, intent_id, tags)
        except Exception as error:  # noqa: BLE001 - an unforeseen error after sending must not look like "not bought"
            return classify(error)
        return Outcome(result="purchased", reservation_id=reservation_id)


def described_reservation(ec2: Any, reservation_id: str) -> dict[str, Any] | None:
    """DescribeCapacityReservations of one id; None when EC2 does not know it (yet: the listing is
    eventually consistent, https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html)."""
    try:
        items = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "InvalidCapacityReservationId.NotFound":
            return None
        raise
    return items[0] if items else None
