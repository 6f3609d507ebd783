"""Bought capacity reaches the owner's share (AWS Batch quota-share pools): while a window's
training plan for SageMaker training jobs is active, the owning team's quota share in the window's
pool may hold that many more instances; ``LOWER_LEAD`` before the plan ends it is lowered back.

Absolute, not incremental: every run computes each affected share's capacity limits from the
policy (the declared quota) plus the plans active now, reads the share (``DescribeQuotaShare``)
and calls ``UpdateQuotaShare`` only when they differ. So a repeated run or event changes nothing,
a crash between the call and its record or a failed call is put right by the next run, and the
same computation lowers the share when the plan ends: the raise is always undone by the
controller that made it. Each call is recorded in the ledger before and after
(``action#share#<queue>/<share>@<time>``: ``calling``, then ``done`` or ``failed``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping

from botocore.exceptions import ClientError

from . import market
from .ledger import Ledger
from .planner import Reservation, Window

# Lowered when EC2/SageMaker warn of the end: jobs above the declared quota become preemptible
# (Batch reclaims a lowered share's excess) before the capacity goes away.
LOWER_LEAD = market.WARNING_LEAD
TRAINING_JOBS = "sagemaker_training_jobs"


def desired_limits(*, windows: Mapping[str, Window], owned: Iterable[Reservation], pools: Mapping[str, Any],
                   now: datetime) -> dict[tuple[str, str], dict[str, int]]:
    """(queue, share) -> instance type -> limit, for every team owning a training-jobs window in a
    quota-share pool: its declared quota plus the instances of its plans active now."""
    owned = list(owned)
    limits: dict[tuple[str, str], dict[str, int]] = {}
    for window in windows.values():
        pool = pools.get(window.consumer.get("pool") or "") if window.consumer.get("kind") == TRAINING_JOBS else None
        share = next((s for s in pool.shares if s.name == window.team), None) if pool is not None else None
        if share is None:
            continue  # no pool, or the team has no share in it: nothing to raise
        wanted = limits.setdefault((pool.name, share.name), dict(share.quota))
        extra = sum(r.count for r in owned if r.window == window.name and r.state == "active" and r.start <= now < r.end - LOWER_LEAD)
        wanted[window.instance_type] = wanted.get(window.instance_type, 0) + extra
    return limits


def apply(*, desired: Mapping[tuple[str, str], Mapping[str, int]], batch: Any, ledger: Ledger, now: datetime) -> list[dict[str, Any]]:
    results = []
    for (queue, share), limits in sorted(desired.items()):
        wanted = [{"capacityUnit": unit, "maxCapacity": count} for unit, count in sorted(limits.items()) if count >= 1]
        try:
            listed = [q for page in batch.get_paginator("list_quota_shares").paginate(jobQueue=queue) for q in page.get("quotaShares") or []
                      if q["quotaShareName"] == share]
            if not listed:
                results.append({"share": f"{queue}/{share}", "error": f"job queue {queue} has no quota share {share}"})
                continue
            arn = listed[0]["quotaShareArn"]
            current = sorted(batch.describe_quota_share(quotaShareArn=arn).get("capacityLimits") or [], key=lambda c: c["capacityUnit"])
        except ClientError as error:
            results.append({"share": f"{queue}/{share}", "error": f"{error.response['Error']['Code']}: {error}"})
            continue
        if current == wanted or not wanted:
            results.append({"share": f"{queue}/{share}", "limits": wanted, "changed": False})
            continue
        action = f"share#{queue}/{share}@{now:%Y%m%dT%H%M%SZ}"
        ledger.record_action(action, status="calling", details={"from": current, "to": wanted}, now=now)
        try:
            batch.update_quota_share(quotaShareArn=arn, capacityLimits=wanted)
        except ClientError as error:  # retried next run, from what the share then shows
            ledger.record_action(action, status="failed", details={"from": current, "to": wanted, "error": str(error)}, now=now)
            results.append({"share": f"{queue}/{share}", "error": f"{error.response['Error']['Code']}: {error}"})
            continue
        ledger.record_action(action, status="done", details={"from": current, "to": wanted}, now=now)
        results.append({"share": f"{queue}/{share}", "limits": wanted, "changed": True})
    return results
