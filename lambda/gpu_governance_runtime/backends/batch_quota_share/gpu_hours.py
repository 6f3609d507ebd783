"""A team's GPU-hour switch and its queued jobs in a Batch quota-share pool (reclaim/gpu_hours.py
turns the switch off at the team's limit and ends the jobs it would still start)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ...quotas import quota_share_arn

QUEUED_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE")  # a service job not started yet
REASON_LIMIT = 1024  # TerminateServiceJob's reason, as TerminateJob's


@dataclass
class QuotaShareSwitch:
    """A Batch quota share's ``state`` (ENABLED / DISABLED)."""

    batch: Any
    job_queue: str
    share: str

    @cached_property
    def _arn(self) -> str:
        return quota_share_arn(self.batch, self.job_queue, self.share)

    def enabled(self) -> bool:
        return self.batch.describe_quota_share(quotaShareArn=self._arn).get("state", "ENABLED") == "ENABLED"

    def set(self, enabled: bool) -> None:
        self.batch.update_quota_share(quotaShareArn=self._arn, state="ENABLED" if enabled else "DISABLED")


@dataclass
class QuotaShareQueue:
    """A Batch quota share's service jobs not started yet [aws: batch.list-service-jobs-by-share],
    ended with ``TerminateServiceJob`` [aws: batch.terminate-service-job]."""

    batch: Any
    job_queue: str
    share: str

    def queued(self) -> list[str]:
        ids = [
            job["jobId"]
            for status in QUEUED_STATUSES
            for page in self.batch.get_paginator("list_service_jobs").paginate(
                jobQueue=self.job_queue,
                jobStatus=status,
                filters=[{"name": "QUOTA_SHARE_NAME", "values": [self.share]}],
            )
            for job in page["jobSummaryList"]
            if job.get("quotaShareName", self.share) == self.share
        ]
        return list(dict.fromkeys(ids))  # a job that moved on while paging is listed twice

    def terminate(self, job_id: str, reason: str) -> None:
        self.batch.terminate_service_job(jobId=job_id, reason=reason[:REASON_LIMIT])
