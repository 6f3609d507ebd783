"""The record of every action the controller takes, in DynamoDB, so nothing is done twice.

One item per (pool, job, attempt, action). Before acting the controller *claims* the item with a
conditional put; only the winner acts, then records the outcome. A claim whose outcome is
``failed`` (the API refused, nothing happened) may be claimed again by a later tick, and so may a
claim left ``claimed`` once ``FUNCTION_TIMEOUT_SECONDS`` have passed: no invocation lives that
long, so the one that claimed it was killed mid-call. Acting again is safe because every adapter
acts only while the job is still as it was read (state and attempt), and a job that was
preempted has a new attempt, hence a new key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CLAIMED, DONE, SKIPPED, FAILED = "claimed", "done", "skipped", "failed"
RETENTION_SECONDS = 7 * 24 * 3600
# The reclaim function's timeout: constructs_lib.reclaim deploys the function with it. A tick
# (one minute apart) reads each pool and acts; every action is started only with its time left.
FUNCTION_TIMEOUT_SECONDS = 55


@dataclass(frozen=True, kw_only=True)
class ActionKey:
    pool: str
    job_id: str
    attempt: str
    action: str  # "preempt" or "start"

    @property
    def id(self) -> str:
        return f"{self.pool}#{self.job_id}#{self.attempt}#{self.action}"


class Ledger:
    def __init__(self, table: Any):
        self.table = table

    def claim(self, key: ActionKey, *, now: float, reason: str) -> bool:
        """True if this tick may act; False if another tick already did or is doing it."""
        try:
            self.table.put_item(
                Item={
                    "action_id": key.id, "pool": key.pool, "job_id": key.job_id, "attempt": key.attempt,
                    "action": key.action, "status": CLAIMED, "reason": reason, "claimed_at": int(now),
                    "expires_at": int(now) + RETENTION_SECONDS,
                },
                ConditionExpression="attribute_not_exists(action_id) OR #status = :failed OR (#status = :claimed AND claimed_at < :stale)",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":failed": FAILED, ":claimed": CLAIMED, ":stale": int(now) - FUNCTION_TIMEOUT_SECONDS},
            )
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def record(self, key: ActionKey, *, status: str, detail: str = "") -> None:
        self.table.update_item(
            Key={"action_id": key.id},
            UpdateExpression="SET #status = :status, detail = :detail",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":status": status, ":detail": detail[:1000]},
        )
