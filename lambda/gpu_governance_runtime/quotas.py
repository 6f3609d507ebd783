"""A team's quota share (Batch) or compute quota (HyperPod EKS), found as the constructs name
them: read by the capacity controller, which raises them (capacity/shares.py), and the reclaim
controller, which switches them off at a GPU-hour limit (reclaim/gpu_hours.py)."""

from __future__ import annotations

from typing import Any

GONE = ("Deleting", "Deleted", "DeleteFailed", "DeleteRollbackFailed")


class MissingQuota(Exception):
    """The declared quota share or compute quota does not exist (yet)."""


def quota_share_arn(batch: Any, queue: str, share: str) -> str:
    """The ARN of quota share ``share`` of job queue ``queue``."""
    listed = [
        q
        for page in batch.get_paginator("list_quota_shares").paginate(jobQueue=queue)
        for q in page.get("quotaShares") or []
        if q["quotaShareName"] == share
    ]
    if not listed:
        raise MissingQuota(f"job queue {queue} has no quota share {share}")
    return listed[0]["quotaShareArn"]


def describe_team_compute_quota(sagemaker: Any, cluster: str, team: str) -> dict[str, Any]:
    """``DescribeComputeQuota`` of the team's compute quota on ``cluster``, found by the name
    ``HyperPodEksGovernance`` gives it (the team's)."""
    listed = [
        q
        for page in sagemaker.get_paginator("list_compute_quotas").paginate(ClusterArn=cluster, NameContains=team)
        for q in page.get("ComputeQuotaSummaries") or []
        if q["Name"] == team and q["Status"] not in GONE
    ]
    if not listed:
        raise MissingQuota(f"cluster {cluster} has no compute quota {team}")
    return sagemaker.describe_compute_quota(ComputeQuotaId=listed[0]["ComputeQuotaId"])
