"""A simulated EC2 Capacity Block market behind a real boto3 client, for interleaving tests.

The client is a real ``ec2`` client built with the controller's purchase configuration: botocore
validates every request against the service model before a ``before-call`` hook answers it from
the simulation (the answer is checked against the output shape too), so the controller's code
runs unchanged. What the simulation adds over a Stubber queue is behaviour that depends on
time and order:

- ``DescribeCapacityReservations`` lists a bought block only ``lag`` after the purchase was made
  (EC2 is eventually consistent), one reservation per page after an empty first page (EC2 may
  answer a filtered listing with empty pages and a ``NextToken``);
- ``DescribeCapacityBlockOfferings`` answers one offering per page;
- each ``PurchaseCapacityBlock`` call takes its fault from a queue: the purchase may be made and
  the answer lost (read timeout, connection closed, 5xx), refused before anything happened, or
  answered while the function is killed before it records the outcome; and other runs may run
  *inside* the call, as a second invocation would while the first waits for its answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import boto3
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError
from botocore.validate import ParamValidator

from gpu_governance_runtime.capacity.aws import (
    PURCHASE_CLIENT_CONFIG,
    TAG_INTENT,
    TAG_MANAGED_BY,
    TAG_WINDOW,
    CapacityMarket,
)
from gpu_governance_runtime.planners.capacity import Offering

from .stubbed_aws import CONTROLLER, REGION, block_offering

# Faults of one purchase call. "made": AWS bought the block whatever the caller saw.
FAULTS = {
    "ok": True,
    "timeout_after": True,
    "closed_after": True,
    "server_error_after": True,
    "killed_after": True,
    "server_error_before": False,
    "throttled": False,
    "not_connected": False,
    "insufficient_capacity": False,
}


class Killed(BaseException):
    """The Lambda invocation ended (timeout, crash): nothing after this point of the run happens."""


@dataclass
class Purchase:
    intent: str
    window: str
    offering: Offering
    made_at: datetime
    reservation_id: str


@dataclass
class SimulatedEc2:
    offerings: list[Offering]
    lag: timedelta
    now: datetime
    faults: list[str] = field(default_factory=list)  # one per purchase call, "ok" when empty
    during_call: list[Callable[[], None]] = field(default_factory=list)  # runs made while a purchase call waits
    call_takes: timedelta = timedelta(seconds=20)
    page_takes: timedelta = timedelta(0)  # each page of offerings read: a slow run calls late
    unreadable_types: frozenset[str] = frozenset()  # offerings of these answer 503 (one window's read fails)
    made: list[Purchase] = field(default_factory=list)

    def __post_init__(self):
        self.client = boto3.client(
            "ec2", region_name=REGION, config=PURCHASE_CLIENT_CONFIG, aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.client.meta.events.register("before-parameter-build.ec2.*", self._keep_params)
        self.client.meta.events.register("before-call.ec2.*", self._answer)
        self.market = CapacityMarket(ec2=self.client, sagemaker=None, controller_id=CONTROLLER)

    def clock(self) -> datetime:
        return self.now

    @staticmethod
    def _keep_params(params, context, **_):
        context["simulated_params"] = params

    def _answer(self, model, context, **_):
        params = context["simulated_params"]
        handler = getattr(self, f"_{model.name}")
        status, body = handler(params)
        if status == 200:
            report = ParamValidator().validate(body, model.output_shape)
            assert not report.has_errors(), report.generate_report()
        return AWSResponse("https://ec2.us-east-1.amazonaws.com", status, {}, None), {
            **body,
            "ResponseMetadata": {"HTTPStatusCode": status},
        }

    # --- operations -------------------------------------------------------------------------

    def _DescribeCapacityReservations(self, params):
        wanted = {f["Name"]: set(f["Values"]) for f in params.get("Filters", [])}
        visible = [p for p in self.made if p.made_at + self.lag <= self.now]
        if "CapacityReservationIds" in params:  # by id: as eventually consistent as the listing
            found = [self._reservation(p) for p in visible if p.reservation_id in params["CapacityReservationIds"]]
            if len(found) < len(params["CapacityReservationIds"]):
                return 400, {"Error": {"Code": "InvalidCapacityReservationId.NotFound", "Message": "not found"}}
            return 200, {"CapacityReservations": found}
        matching = [
            self._reservation(p)
            for p in visible
            if wanted.get(f"tag:{TAG_INTENT}", {p.intent}) >= {p.intent}
            and CONTROLLER in wanted.get(f"tag:{TAG_MANAGED_BY}", {CONTROLLER})
        ]
        page = int(params.get("NextToken", "0"))
        items = [] if page == 0 else matching[page - 1 : page]
        more = page < len(matching)
        return 200, {"CapacityReservations": items, **({"NextToken": str(page + 1)} if more else {})}

    def _DescribeCapacityBlockOfferings(self, params):
        self.now += self.page_takes
        if params["InstanceType"] in self.unreadable_types:
            return 503, {"Error": {"Code": "Unavailable", "Message": "try later"}}
        fitting = [
            o
            for o in self.offerings
            if o.count == params["InstanceCount"] and o.duration_hours == params["CapacityDurationHours"]
        ]
        page = int(params.get("NextToken", "0"))
        more = page + 1 < len(fitting)
        return 200, {
            "CapacityBlockOfferings": [block_offering(o) for o in fitting[page : page + 1]],
            **({"NextToken": str(page + 1)} if more else {}),
        }

    def _PurchaseCapacityBlock(self, params):
        fault = self.faults.pop(0) if self.faults else "ok"
        offering = next(o for o in self.offerings if o.id == params["CapacityBlockOfferingId"])
        tags = {t["Key"]: t["Value"] for t in params["TagSpecifications"][0]["Tags"]}
        while self.during_call:
            self.during_call.pop(0)()
        if fault == "throttled":
            return 400, {"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}
        if fault == "insufficient_capacity":  # sold out between the listing and the purchase
            return 400, {"Error": {"Code": "InsufficientInstanceCapacity", "Message": "no capacity for this offering"}}
        if fault == "server_error_before":
            return 500, {"Error": {"Code": "InternalError", "Message": "nothing done"}}
        if fault == "not_connected":
            raise EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
        self.now += self.call_takes
        # One reservation per segment, each in a zone of its own [aws: ec2-cb.offering-segments].
        zones = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")
        pieces = (
            [offering]
            if offering.segments == 1
            else [
                replace(offering, count=max(offering.count // offering.segments, 1), availability_zone=zone, segments=1)
                for zone in zones[: offering.segments]
            ]
        )
        for piece in pieces:
            self.made.append(
                Purchase(
                    intent=tags[TAG_INTENT],
                    window=tags[TAG_WINDOW],
                    offering=piece,
                    made_at=self.now,
                    reservation_id=f"cr-{len(self.made):017x}",
                )
            )
        purchase = self.made[-len(pieces)]
        if fault == "timeout_after":
            raise ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
        if fault == "closed_after":
            raise ConnectionClosedError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
        if fault == "server_error_after":
            return 500, {"Error": {"Code": "InternalError", "Message": "bought, then failed to answer"}}
        if fault == "killed_after":
            raise Killed("the function timed out waiting for the answer")
        return 200, {
            "CapacityReservation": {"CapacityReservationId": purchase.reservation_id, "State": "payment-pending"}
        }

    def _reservation(self, p: Purchase) -> dict:
        o = p.offering
        state = "scheduled" if self.now < o.start else "active" if self.now < o.end else "expired"
        return {
            "CapacityReservationId": p.reservation_id,
            "InstanceType": o.instance_type,
            "AvailabilityZone": o.availability_zone,
            "TotalInstanceCount": o.count,
            "StartDate": o.start,
            "EndDate": o.end,
            "State": state,
            "ReservationType": "capacity-block",
            "Tags": [
                {"Key": TAG_INTENT, "Value": p.intent},
                {"Key": TAG_WINDOW, "Value": p.window},
                {"Key": TAG_MANAGED_BY, "Value": CONTROLLER},
            ],
        }
