"""EC2 capacity-block and SageMaker training-plan calls through botocore.stub.Stubber (moto lacks
them; the Stubber checks every request and response against the installed service model),
DynamoDB through moto. Every purchase attempt is counted."""

from __future__ import annotations

from datetime import timedelta

import boto3
from botocore.exceptions import ReadTimeoutError
from botocore.stub import ANY, Stubber

from gpu_governance_runtime.capacity.aws import (
    PURCHASE_CLIENT_CONFIG,
    TAG_INTENT,
    TAG_MANAGED_BY,
    TAG_WINDOW,
    CapacityMarket,
)
from gpu_governance_runtime.capacity.ledger import Ledger

REGION = "us-east-1"
CONTROLLER = "acme-ml-capacity"
TABLE = "capacity-ledger"


def create_ledger_table() -> Ledger:
    db = boto3.client("dynamodb", region_name=REGION)
    db.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return Ledger(client=db, table_name=TABLE)


class StubbedAws:
    def __init__(self):
        self.ec2 = boto3.client("ec2", region_name=REGION, config=PURCHASE_CLIENT_CONFIG)
        self.sagemaker = boto3.client("sagemaker", region_name=REGION, config=PURCHASE_CLIENT_CONFIG)
        self.ec2_stub, self.sm_stub = Stubber(self.ec2), Stubber(self.sagemaker)
        self.ec2_stub.activate()
        self.sm_stub.activate()
        self.purchase_attempts: list[dict] = []
        for client, operation in (
            (self.ec2, "PurchaseCapacityBlock"),
            (self.ec2, "PurchaseCapacityBlockExtension"),
            (self.sagemaker, "CreateTrainingPlan"),
            (self.sagemaker, "ExtendTrainingPlan"),
        ):
            client.meta.events.register_first(f"provide-client-params.*.{operation}", self._count)
        self.market = CapacityMarket(ec2=self.ec2, sagemaker=self.sagemaker, controller_id=CONTROLLER)
        # The EKS client's Stubber when a run's window feeds a node group (tests/capacity/test_handler.py's env):
        # a run with a gap to fill reads the group's subnets and their zones before the offerings (capacity/consumers.py).
        self.node_group_stub: Stubber | None = None

    def _count(self, params, **_):
        self.purchase_attempts.append(params)

    def done(self):
        self.ec2_stub.assert_no_pending_responses()
        self.sm_stub.assert_no_pending_responses()

    # --- EC2 ------------------------------------------------------------------------------------

    def owned(self, *reservations):
        self.ec2_stub.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": list(reservations)},
            {"Filters": [{"Name": f"tag:{TAG_MANAGED_BY}", "Values": [CONTROLLER]}]},
        )

    def by_intent(self, intent_id, *reservations):
        self.ec2_stub.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": list(reservations)},
            {"Filters": [{"Name": f"tag:{TAG_INTENT}", "Values": [intent_id]}]},
        )

    def offerings(self, *offerings):
        if self.node_group_stub is not None:
            self.node_group_subnets()
        self.ec2_stub.add_response(
            "describe_capacity_block_offerings",
            {"CapacityBlockOfferings": [block_offering(o) for o in offerings]},
            {
                "InstanceType": ANY,
                "InstanceCount": ANY,
                "CapacityDurationHours": ANY,
                "StartDateRange": ANY,
                "EndDateRange": ANY,
            },
        )

    def node_group_subnets(self, subnet="subnet-0a1b2c3d4e5f60001", zone="us-east-1a"):
        """The node group ml/p5 with one subnet, in ``zone``."""
        self.node_group_stub.add_response(
            "describe_nodegroup",
            {"nodegroup": {"nodegroupName": "p5", "clusterName": "ml", "subnets": [subnet]}},
            {"clusterName": "ml", "nodegroupName": "p5"},
        )
        self.ec2_stub.add_response(
            "describe_subnets", {"Subnets": [{"SubnetId": subnet, "AvailabilityZone": zone}]}, {"SubnetIds": [subnet]}
        )

    def purchase(self, offering, intent_id, window, reservation_id="cr-0123456789abcdef0"):
        self.ec2_stub.add_response(
            "purchase_capacity_block",
            {"CapacityReservation": {"CapacityReservationId": reservation_id, "State": "payment-pending"}},
            {
                "CapacityBlockOfferingId": offering.id,
                "InstancePlatform": "Linux/UNIX",
                "TagSpecifications": [
                    {
                        "ResourceType": "capacity-reservation",
                        "Tags": [
                            {"Key": TAG_INTENT, "Value": intent_id},
                            {"Key": TAG_WINDOW, "Value": window},
                            {"Key": TAG_MANAGED_BY, "Value": CONTROLLER},
                        ],
                    }
                ],
            },
        )

    def purchase_error(self, code, status):
        self.ec2_stub.add_client_error(
            "purchase_capacity_block", service_error_code=code, service_message=code, http_status_code=status
        )

    def purchase_times_out_after_going_through(self, offering, intent_id, window):
        self.purchase(offering, intent_id, window)

        def timeout(**_):
            self.ec2.meta.events.unregister("after-call.ec2.PurchaseCapacityBlock", timeout)
            raise ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com")

        self.ec2.meta.events.register("after-call.ec2.PurchaseCapacityBlock", timeout)


def block_offering(o):
    return {
        "CapacityBlockOfferingId": o.id,
        "InstanceType": o.instance_type,
        "AvailabilityZone": o.availability_zone,
        "InstanceCount": o.count,
        "StartDate": o.start,
        "EndDate": o.end,
        "CapacityBlockDurationHours": o.duration_hours,
        "CapacityBlockDurationMinutes": o.duration_minutes,
        "UpfrontFee": str(o.upfront_fee),
        "CurrencyCode": "USD",
        **_segments(o),
    }


def _segments(o):
    """An offering of several segments as EC2 lists it: one per zone, splitting the instances (the shape only)."""
    if o.segments == 1:
        return {}
    zones = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")[: o.segments]
    return {
        "CapacityBlockOfferingSegments": [
            {
                "InstanceType": o.instance_type,
                "AvailabilityZone": zone,
                "InstanceCount": max(o.count // o.segments, 1),
                "StartDate": o.start,
                "EndDate": o.end,
            }
            for zone in zones
        ]
    }


def capacity_reservation(offering, *, intent_id, window, state="scheduled", reservation_id="cr-0123456789abcdef0"):
    return {
        "CapacityReservationId": reservation_id,
        "InstanceType": offering.instance_type,
        "AvailabilityZone": offering.availability_zone,
        "TotalInstanceCount": offering.count,
        "StartDate": offering.start,
        "EndDate": offering.end,
        "State": state,
        "ReservationType": "capacity-block",
        "Tags": [
            {"Key": TAG_INTENT, "Value": intent_id},
            {"Key": TAG_WINDOW, "Value": window},
            {"Key": TAG_MANAGED_BY, "Value": CONTROLLER},
        ],
    }


def later(now, minutes):
    return now + timedelta(minutes=minutes)


def add_training_plan_stubs(stubbed: StubbedAws):
    """Helpers for the SageMaker side, bound to one StubbedAws."""

    def plans(*summaries):
        stubbed.sm_stub.add_response("list_training_plans", {"TrainingPlanSummaries": list(summaries)}, {})

    def offerings(*offers):
        stubbed.sm_stub.add_response(
            "search_training_plan_offerings",
            {
                "TrainingPlanOfferings": [
                    {
                        "TrainingPlanOfferingId": o.id,
                        "TargetResources": ["training-job"],
                        "DurationHours": o.duration_hours,
                        "UpfrontFee": str(o.upfront_fee),
                        "CurrencyCode": "USD",
                        "ReservedCapacityOfferings": [
                            {
                                "InstanceType": o.instance_type,
                                "InstanceCount": o.count,
                                "AvailabilityZone": o.availability_zone,
                                "StartTime": o.start,
                                "EndTime": o.end,
                            }
                        ],
                    }
                    for o in offers
                ]
            },
            None,
        )

    return plans, offerings


def training_plan_summary(offering, name, status="Scheduled"):
    return {
        "TrainingPlanArn": f"arn:aws:sagemaker:us-east-1:111122223333:training-plan/{name}",
        "TrainingPlanName": name,
        "Status": status,
        "StartTime": offering.start,
        "EndTime": offering.end,
        "TotalInstanceCount": offering.count,
        "ReservedCapacitySummaries": [
            {
                "ReservedCapacityArn": "arn:aws:sagemaker:us-east-1:111122223333:reserved-capacity/rc-1",
                "InstanceType": offering.instance_type,
                "TotalInstanceCount": offering.count,
                "Status": status,
                "AvailabilityZone": offering.availability_zone,
            }
        ],
    }
