"""A small model of EC2 Capacity Blocks and the ECS container instances their instances register
as, behind the calls the capacity controller's requeue path makes: EC2 ``describe_instances``
(paginated, filtered by ``capacity-reservation-id`` and ``instance-state-name``) and ECS
``list_container_instances`` (paginated, ``ec2InstanceId in [...]`` filter).

A block's instances run from its start; EC2 sends the expiration warning 40 minutes before its
end and begins terminating its instances 30 minutes before the end
[aws: ec2-cb.expiration-warning-and-termination]. The model's
instances are running from the start until 30 minutes before the end, then terminated.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .batch import Clock, Faults, Pages, instances_named

WARNING_LEAD = 40 * 60  # seconds before the end: the EventBridge "Capacity Block Reservation Expiration Warning"
TERMINATION_LEAD = 30 * 60  # seconds before the end: the instances are terminated


@dataclass
class Block:
    reservation_id: str
    start: float
    end: float
    instance_count: int

    def instance_ids(self) -> list[str]:
        return [f"i-{self.reservation_id[3:]}{n:04x}" for n in range(self.instance_count)]

    def running(self, now: float) -> bool:
        return self.start <= now < self.end - TERMINATION_LEAD

    def warning_event(self) -> dict[str, Any]:
        """The EventBridge event EC2 sends at the warning (the fields the controller reads)."""
        return {
            "source": "aws.ec2",
            "detail-type": "Capacity Block Reservation Expiration Warning",
            "time": _iso(self.end - WARNING_LEAD),
            "detail": {"capacity-reservation-id": self.reservation_id, "end-date": _iso(self.end)},
        }


class FakeEc2:
    """The blocks' instances as ``describe_instances`` lists them."""

    def __init__(self, clock: Clock, blocks: list[Block], *, faults: Faults | None = None, page_size: int = 5):
        self.clock, self.blocks, self.faults, self.page_size = clock, blocks, faults or Faults(), page_size

    def get_paginator(self, operation: str) -> Pages:
        assert operation == "describe_instances", operation
        return Pages(self.describe_instances, "Reservations", self.page_size)

    def describe_instances(self, *, Filters: list[dict[str, Any]]) -> dict[str, Any]:
        # [aws: ec2-cb.expiration-warning-and-termination]: running from the start, terminated 30 minutes before the end
        self.faults.check("DescribeInstances", "before", throttle_code="RequestLimitExceeded", service="ec2")
        wanted = {f["Name"]: set(f["Values"]) for f in Filters}
        reservations = []
        for block in self.blocks:
            state = (
                "running" if block.running(self.clock.now) else "terminated" if self.clock.now >= block.start else None
            )
            if state is None or block.reservation_id not in wanted.get(
                "capacity-reservation-id", {block.reservation_id}
            ):
                continue
            if state not in wanted.get("instance-state-name", {state}):
                continue
            reservations += [
                {
                    "ReservationId": f"r-{i[2:]}",
                    "Instances": [
                        {
                            "InstanceId": i,
                            "State": {"Name": state},
                            "CapacityReservationId": block.reservation_id,
                            "InstanceType": "p5.48xlarge",
                        }
                    ],
                }
                for i in block.instance_ids()
            ]
        return {"Reservations": reservations}

    def live_instances(self) -> list[str]:
        return [i for block in self.blocks if block.running(self.clock.now) for i in block.instance_ids()]


class FakeEcs:
    """One ECS cluster: every live instance is registered as a container instance (ARN from its id)."""

    def __init__(self, ec2: FakeEc2, *, cluster: str, faults: Faults | None = None, page_size: int = 100):
        self.ec2, self.cluster, self.faults, self.page_size = ec2, cluster, faults or Faults(), page_size

    def get_paginator(self, operation: str) -> Pages:
        assert operation == "list_container_instances", operation
        return Pages(self.list_container_instances, "containerInstanceArns", self.page_size)

    def list_container_instances(self, *, cluster: str, filter: str = "") -> dict[str, Any]:
        self.faults.check("ListContainerInstances", "before", throttle_code="ThrottlingException", service="ecs")
        assert cluster == self.cluster, cluster
        # ec2InstanceId in [...] [aws: batch-ce.ecs-container-instance-filter]
        wanted = instances_named(filter)
        return {
            "containerInstanceArns": [
                container_instance(i) for i in self.ec2.live_instances() if wanted is None or i in wanted
            ]
        }


def container_instance(instance_id: str) -> str:
    return f"arn:aws:ecs:us-east-1:111122223333:container-instance/gpu/{instance_id}"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
