"""What the controllers and the member's status read of an AWS Batch job record: a service job's
id from its ARN, the instances it asks for and how long it may run, and a job's declared limit in
seconds (the reclaim observer of a quota-share queue, the fair-share adapter, ``status``, the trace
importer)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any


def job_id_of(job_arn: str) -> str:
    """``arn:aws:batch:REGION:ACCOUNT:service-job/ID`` -> ``ID``."""
    return job_arn.rsplit("/", 1)[-1]


def service_job_usage(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(instance type, instances) a service job asks for: its ``capacityUsage`` when Batch gives
    one (for service jobs the unit is the instance type), else the training job request it
    carries (``DescribeServiceJob`` only); empty when the record says neither."""
    usage = [
        (u["capacityUnit"], int(u["quantity"])) for u in job.get("capacityUsage") or [] if u.get("quantity", 0) >= 1
    ]
    if not usage and job.get("serviceRequestPayload"):
        try:
            resources = json.loads(job["serviceRequestPayload"]).get("ResourceConfig", {})
            usage = [(resources["InstanceType"], int(resources.get("InstanceCount", 1)))]
        except (ValueError, KeyError, TypeError, AttributeError):
            usage = []
    return usage


def service_job_size(job: dict, capacity: Mapping[str, int]) -> tuple[str, int] | None:
    """The :func:`service_job_usage` of a type the pool holds; None when it asks for another type
    (Batch never runs it there)."""
    return next(((t, n) for t, n in service_job_usage(job) if t in capacity), None)


def service_job_time_limit(job: dict) -> float | None:
    """Seconds a service job may run at most (``DescribeServiceJob`` only; listings carry neither):
    the shorter of the Batch attempt timeout (``timeoutConfig``) and the training job's own
    ``StoppingCondition.MaxRuntimeInSeconds`` in its request; None when neither is given."""
    limits = [declared_seconds(job.get("timeoutConfig", {}).get("attemptDurationSeconds"))]
    with contextlib.suppress(ValueError, TypeError, AttributeError):  # an unreadable request declares nothing
        limits.append(
            declared_seconds(
                json.loads(job.get("serviceRequestPayload") or "{}")
                .get("StoppingCondition", {})
                .get("MaxRuntimeInSeconds")
            )
        )
    return min((limit for limit in limits if limit is not None), default=None)


def declared_seconds(value: Any) -> float | None:
    """A declared limit in seconds; None unless a positive whole number."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
