"""A ``batch_fair_share`` pool in the governance file."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from constructs_lib.model.base import ComputeEnvironmentArn, Count, Ec2InstanceType
from constructs_lib.model.pools import ReclaimedPool


class BatchFairSharePool(ReclaimedPool):
    """An AWS Batch fair-share job queue over existing EC2 or EKS compute environments."""

    backend: Literal["batch_fair_share"] = "batch_fair_share"
    capacity: dict[Ec2InstanceType, Count] = Field(min_length=1)
    compute_environments: tuple[ComputeEnvironmentArn, ...] = Field(min_length=1, max_length=3)
    share_decay_seconds: Annotated[int, Field(ge=0, le=604800)] = 3600
    compute_reservation: Annotated[int, Field(ge=0, le=99)] = 0
    queue_priority: Annotated[int, Field(ge=0, le=1000)] = 10
