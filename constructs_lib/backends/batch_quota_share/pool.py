"""A ``batch_quota_share`` pool in the governance file."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from constructs_lib.model.base import Count, SageMakerInstanceType
from constructs_lib.model.pools import ReclaimedPool


class BatchQuotaSharePool(ReclaimedPool):
    """An AWS Batch quota-management job queue for SageMaker training jobs."""

    backend: Literal["batch_quota_share"] = "batch_quota_share"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    runnable_timeout_minutes: Annotated[int, Field(ge=10, le=1440)] | None = Field(
        default=None,
        description="Cancel jobs RUNNABLE longer than this (10-1440 min); unset keeps waiting jobs",
    )
