"""A model of EC2 Capacity Block offerings, purchases and the reservations they make, answering real
botocore EC2 clients (``tests/aws_model/sdk.py``: the client's retries apply), behind the calls the
capacity controller's purchase path makes: ``DescribeCapacityBlockOfferings``,
``PurchaseCapacityBlock`` and ``DescribeCapacityReservations``.

The offerings are the simulated market's (``tests/capacity/simulated_month.Market``: a whole block of
the asked count, two half-size pieces in two zones, an offering of two segments, an instant block),
their fee multiplied by the price level of the moment (``price``, set by the scenario): the same
offering may cost more or less at purchase than when it was planned [aws: ec2-cb.price-may-change].

``PurchaseCapacityBlock`` buys whatever the request names, every time it arrives: it has no client
token, so a request sent again after its answer was lost buys a second block
[aws: ec2-cb.purchase-has-no-client-token]. Each purchase is recorded (``bought``) with its tags, the
fee charged, the price an instance-hour and when: the AWS-side record a scenario's checks read.

A reservation is ``payment-pending`` for a drawn while, then ``scheduled`` (``active`` from its start,
``expired`` at its end), or, for a drawn share, ``payment-failed``: released, nothing charged
[aws: ec2-cb.payment-states]. ``DescribeCapacityReservations`` lists it only a drawn lag after the
purchase, by filter and by id alike [aws: ec2-cb.reservation-listed-late].
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from gpu_governance_runtime.contract import TAG_INTENT, TAG_WINDOW
from tests.capacity.simulated_month import Market
from tests.capacity.stubbed_aws import block_offering

from . import sdk
from .batch import Clock, Faults

# How long after a purchase EC2 lists its reservation: well inside the controller's settle grace of an hour.
LISTING_LAGS = (0.0, 30.0, 300.0, 900.0, 2400.0)
PAYMENT_SECONDS = (60.0, 600.0, 3600.0)  # how long a reservation stays payment-pending


@dataclass
class Bought:
    """One purchase EC2 made (each request that reached it, retried or not)."""

    reservation_id: str
    offering_id: str
    tags: dict[str, str]
    instance_type: str
    count: int
    zone: str
    start: datetime
    end: datetime
    fee: Decimal
    at: float
    listed_at: float
    paid_at: float
    payment_fails: bool

    @property
    def per_instance_hour(self) -> Decimal:
        return self.fee / (self.count * Decimal((self.end - self.start).total_seconds() / 3600))

    def state(self, now: float) -> str:
        if now < self.paid_at:
            return "payment-pending"
        if self.payment_fails:
            return "payment-failed"
        moment = datetime.fromtimestamp(now, UTC)
        return "scheduled" if moment < self.start else "active" if moment < self.end else "expired"


class FakeCapacityBlocks:
    """One account's Capacity Block market and the blocks it bought."""

    def __init__(self, clock: Clock, *, rng: random.Random, faults: Faults | None = None, payment_failures=0.1):
        self.clock, self.rng, self.faults = clock, rng, faults or Faults()
        self.market = Market(offerings=[], lag=timedelta(0), now=self._moment())
        self.payment_failures = payment_failures
        self.price = Decimal(1)  # the price level now: each fee is the market's times this
        self.bought: list[Bought] = []

    def client(self, *, config: Any = None, by: str = "", calls: sdk.Calls | None = None) -> Any:
        return sdk.client("ec2", self._answer, now=lambda: self.clock.now, config=config, by=by, calls=calls)

    def _moment(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now, UTC)

    def _answer(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        self.faults.check(operation, "before", throttle_code="RequestLimitExceeded", service="ec2")
        answer = getattr(self, f"_{operation}")(request)
        self.faults.check(operation, "after", throttle_code="RequestLimitExceeded", service="ec2")
        return answer

    def _DescribeCapacityBlockOfferings(self, request: dict[str, Any]) -> dict[str, Any]:
        # the simulated market's shapes [aws: ec2-cb.offering-segments] [aws: ec2-cb.instant-start], and every
        # offering made for an earlier search that fits this one, at today's price [aws: ec2-cb.price-may-change]
        self.market.now = self._moment()
        self.market._DescribeCapacityBlockOfferings({k: v for k, v in request.items() if k != "NextToken"})
        fitting = [
            o
            for o in self.market.offerings
            if o.instance_type == request["InstanceType"]
            and o.count == request["InstanceCount"]
            and o.duration_hours == request["CapacityDurationHours"]
            and request.get("StartDateRange", o.start) <= o.start
            and o.end <= request.get("EndDateRange", o.end)
        ]
        return {"CapacityBlockOfferings": [{**block_offering(o), "UpfrontFee": str(self._fee(o.id))} for o in fitting]}

    def _fee(self, offering_id: str) -> Decimal:
        offering = next(o for o in self.market.offerings if o.id == offering_id)
        return (offering.upfront_fee * self.price).quantize(Decimal("0.01"))

    def _PurchaseCapacityBlock(self, request: dict[str, Any]) -> dict[str, Any]:
        # no client token: every request that arrives buys [aws: ec2-cb.purchase-has-no-client-token]
        offering = next((o for o in self.market.offerings if o.id == request["CapacityBlockOfferingId"]), None)
        if offering is None:
            raise ClientError(
                {"Error": {"Code": "InvalidCapacityBlockOfferingId.NotFound", "Message": "-"}}, "PurchaseCapacityBlock"
            )
        if offering.segments != 1:
            raise AssertionError(f"the model sells offerings of one segment only: {offering.id}")
        (spec,) = request["TagSpecifications"]
        bought = Bought(
            reservation_id=f"cr-{len(self.bought):017x}",
            offering_id=offering.id,
            tags={t["Key"]: t["Value"] for t in spec["Tags"]},
            instance_type=offering.instance_type,
            count=offering.count,
            zone=offering.availability_zone,
            start=offering.start,
            end=offering.end,
            fee=self._fee(offering.id),
            at=self.clock.now,
            listed_at=self.clock.now + self.rng.choice(LISTING_LAGS),  # [aws: ec2-cb.reservation-listed-late]
            paid_at=self.clock.now + self.rng.choice(PAYMENT_SECONDS),  # [aws: ec2-cb.payment-states]
            payment_fails=self.rng.random() < self.payment_failures,
        )
        self.bought.append(bought)
        return {"CapacityReservation": self._reservation(bought)}

    def _DescribeCapacityReservations(self, request: dict[str, Any]) -> dict[str, Any]:
        # listed a lag after the purchase, by id as by filter [aws: ec2-cb.reservation-listed-late]
        listed = [b for b in self.bought if b.listed_at <= self.clock.now]
        if "CapacityReservationIds" in request:
            found = [b for b in listed if b.reservation_id in request["CapacityReservationIds"]]
            if len(found) < len(request["CapacityReservationIds"]):
                raise ClientError(
                    {"Error": {"Code": "InvalidCapacityReservationId.NotFound", "Message": "not found"}},
                    "DescribeCapacityReservations",
                )
            return {"CapacityReservations": [self._reservation(b) for b in found]}
        wanted = {f["Name"][4:]: set(f["Values"]) for f in request.get("Filters", []) if f["Name"].startswith("tag:")}
        assert len(wanted) == len(request.get("Filters", [])), request
        return {
            "CapacityReservations": [
                self._reservation(b) for b in listed if all(b.tags.get(key) in values for key, values in wanted.items())
            ]
        }

    def _reservation(self, b: Bought) -> dict[str, Any]:
        return {
            "CapacityReservationId": b.reservation_id,
            "InstanceType": b.instance_type,
            "AvailabilityZone": b.zone,
            "TotalInstanceCount": b.count,
            "StartDate": b.start,
            "EndDate": b.end,
            "State": b.state(self.clock.now),  # [aws: ec2-cb.payment-states]
            "ReservationType": "capacity-block",
            "Tags": [{"Key": k, "Value": v} for k, v in b.tags.items()],
        }

    def held(self, window: str) -> list[Bought]:
        """The blocks bought for ``window`` that were not released for a failed payment."""
        return [b for b in self.bought if b.tags.get(TAG_WINDOW) == window and not b.payment_fails]

    @staticmethod
    def intent_of(b: Bought) -> str:
        return b.tags[TAG_INTENT]
