"""The record of every action the controller takes, in DynamoDB, so nothing is done twice.

One item per (pool, job, attempt, action). Before acting the controller *claims* the item with a
conditional put; only the winner acts, then records the outcome. A claim whose outcome is
``failed`` (the API refused, nothing happened) may be claimed again by a later tick, and so may a
claim left ``claimed`` once ``FUNCTION_TIMEOUT_SECONDS`` have passed: no invocation lives that
long, so the one that claimed it was killed mid-call. Acting again is safe because every adapter
acts only while the job is still as it was read (state and attempt), and a job that was
preempted has a new attempt, hence a new key.

A preemption that stops a job the controller must bring back (Batch: terminate, then submit a
copy, ``common/batch_copy.py``) goes ``claimed`` -> ``terminating`` -> ``terminated`` -> ``submitting`` -> ``done``
(with ``new_job``, the copy), each step recorded as it happens. Until it is done its id is in
the pool's *open* item (``open#<pool>``), and every tick first finishes the pool's open actions,
so a job stopped by a tick that then crashed, timed out or was throttled is still brought back.
Likewise an SSM command a tick gave up on and cancelled is ``abandoned`` (with ``command_id``)
until the next tick reads its outcome back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

CLAIMED, DONE, SKIPPED, FAILED = "claimed", "done", "skipped", "failed"
# a stopped job not yet back: TerminateJob sent, its answer not (yet) seen; stopped, copy not
# submitted; copy submitted, not yet seen
TERMINATING, TERMINATED, SUBMITTING = "terminating", "terminated", "submitting"
# The field of a stop whose job gets no copy, and why (a victim that cannot come back as it was, a
# job stopped at its run-time limit): read back by ``resume``, which then submits none.
STOPPED_FOR_GOOD = "stopped_for_good"
# A victim's grace (the pool's ``reclaim.grace_seconds``): action ``notice`` is recorded the first
# time a tick chooses the victim; it is stopped only by a tick at least the grace later. A notice
# older than its grace plus NOTICE_VALID_SECONDS is out of date (the plan let the job be and came
# back to it): it starts again, so a job is never stopped without its full grace.
NOTICE, IN_GRACE = "notice", "in_grace"
NOTICE_VALID_SECONDS = 300
CAPPED = "capped"  # the pool's preemptions this minute reached the per-tick cap: not acted on, claimable again
ABANDONED = "abandoned"  # an SSM command the tick stopped waiting for and cancelled: its outcome is read back next tick
RETENTION_SECONDS = 7 * 24 * 3600
PERIOD_RETENTION_SECONDS = 40 * 24 * 3600  # a GPU-hour count and its notice outlive their period (a month at most)
# The reclaim function's timeout: constructs_lib.controllers.reclaim deploys the function with it. A tick
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
        return self._put_unless(
            {
                "action_id": key.id,
                "pool": key.pool,
                "job_id": key.job_id,
                "attempt": key.attempt,
                "action": key.action,
                "status": CLAIMED,
                "reason": reason,
                "claimed_at": int(now),
                "expires_at": int(now) + RETENTION_SECONDS,
            },
            "attribute_not_exists(action_id) OR #status = :failed OR (#status = :claimed AND claimed_at < :stale)",
            names={"#status": "status"},
            values={":failed": FAILED, ":claimed": CLAIMED, ":stale": int(now) - FUNCTION_TIMEOUT_SECONDS},
        )

    def _put_unless(self, item: dict[str, Any], condition: str, *, names: dict, values: dict) -> bool:
        """Put ``item`` where ``condition`` holds; False (nothing written) where it does not."""
        try:
            self.table.put_item(
                Item=item,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def record(self, key: ActionKey, *, status: str, detail: str = "", **fields: Any) -> None:
        """The action's status now, and any ``fields`` to keep with it (the copy's ``new_job``, ``submitting_at``)."""
        names = {"#status": "status", **{f"#f{i}": name for i, name in enumerate(fields)}}
        values = {
            ":status": status,
            ":detail": detail[:1000],
            **{f":f{i}": value for i, value in enumerate(fields.values())},
        }
        self.table.update_item(
            Key={"action_id": key.id},
            UpdateExpression="SET #status = :status, detail = :detail"
            + "".join(f", #f{i} = :f{i}" for i in range(len(fields))),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def give_notice(self, key: ActionKey, *, now: float, grace: float, reason: str) -> float:
        """When the victim was first told it will be stopped: ``now``, recorded, or the time an
        earlier tick recorded (a duplicate or retried tick neither restarts nor skips the grace)."""
        try:
            self.table.put_item(
                Item={
                    "action_id": key.id,
                    "pool": key.pool,
                    "job_id": key.job_id,
                    "attempt": key.attempt,
                    "action": key.action,
                    "status": NOTICE,
                    "reason": reason,
                    "claimed_at": int(now),
                    "stop_after": int(now + grace),
                    "expires_at": int(now) + RETENTION_SECONDS,
                },
                ConditionExpression="attribute_not_exists(action_id) OR claimed_at < :outdated",
                ExpressionAttributeValues={":outdated": int(now - grace - NOTICE_VALID_SECONDS)},
            )
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            return float(self.table.get_item(Key={"action_id": key.id}, ConsistentRead=True)["Item"]["claimed_at"])
        return float(int(now))

    def take_preemption(self, pool: str, *, now: float, cap: int) -> bool:
        """One of the pool's ``cap`` preemptions of the current minute; False when all are taken.
        An event can come twice [aws: events.lambda-async-retries], and one Lambda held back while the
        last tick still ran (one run at a time) runs late, in the same minute as the next scheduled
        one [aws: events.lambda-throttled-events-run-late]: the cap is counted here, across
        invocations, not in the tick alone."""
        try:
            self.table.update_item(
                Key={"action_id": f"cap#{pool}#{int(now // 60)}"},
                UpdateExpression="ADD taken :one SET expires_at = :expires",
                ConditionExpression="attribute_not_exists(taken) OR taken < :cap",
                ExpressionAttributeValues={":one": 1, ":cap": cap, ":expires": int(now) + RETENTION_SECONDS},
            )
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def mark_open(self, key: ActionKey, *, now: float) -> None:
        self.table.update_item(
            Key={"action_id": f"open#{key.pool}"},
            UpdateExpression="ADD ids :id SET expires_at = :expires",
            ExpressionAttributeValues={":id": {key.id}, ":expires": int(now) + RETENTION_SECONDS},
        )

    def close(self, key: ActionKey) -> None:
        self.table.update_item(
            Key={"action_id": f"open#{key.pool}"},
            UpdateExpression="DELETE ids :id",
            ExpressionAttributeValues={":id": {key.id}},
        )

    def open_actions(self, pool: str) -> list[dict[str, Any]]:
        """The pool's actions not finished yet, as recorded (oldest claim first)."""
        ids = (
            self.table.get_item(Key={"action_id": f"open#{pool}"}, ConsistentRead=True)
            .get("Item", {})
            .get("ids", set())
        )
        items = [
            self.table.get_item(Key={"action_id": action_id}, ConsistentRead=True).get("Item")
            for action_id in sorted(ids)
        ]
        return sorted((i for i in items if i is not None), key=lambda i: (i["claimed_at"], i["action_id"]))

    # --- GPU-hour limits (reclaim.gpu_hours) ---------------------------------------------------

    def add_gpu_hours(
        self, pool: str, team: str, period_start: str, gpu_hours: float, *, tick: int, now: float
    ) -> float:
        """The team's GPU hours of the period with ``gpu_hours`` added, once per ``tick``: a tick
        not later than the last one counted (a retried or duplicated invocation, a concurrent run)
        adds nothing and reads the count as it is."""
        key = {"action_id": f"gpu-hours#{pool}#{team}#{period_start}"}
        try:
            answer = self.table.update_item(
                Key=key,
                UpdateExpression="ADD used :hours SET last_tick = :tick, expires_at = :expires",
                ConditionExpression="attribute_not_exists(last_tick) OR last_tick < :tick",
                ExpressionAttributeValues={
                    ":hours": Decimal(str(round(gpu_hours, 6))),
                    ":tick": tick,
                    ":expires": int(now) + PERIOD_RETENTION_SECONDS,
                },
                ReturnValues="ALL_NEW",
            )
            return float(answer["Attributes"]["used"])
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            return float(self.table.get_item(Key=key, ConsistentRead=True)["Item"]["used"])

    def claim_once(self, key: str, *, now: float) -> bool:
        """True when this tick may do ``key`` (a notice to send once, then :meth:`done_once`): the first
        time, or when the tick that claimed it never recorded it done and is gone
        (``FUNCTION_TIMEOUT_SECONDS``: its send failed, or it died between the claim and the send or
        before recording the send, so the notice goes at least once, rarely twice). Each claim carries
        its own token: the SDK's resend of this very request after its answer was lost finds its own
        claim and is True, where it was refused as another tick's. An item an earlier version wrote:
        ``claimed`` without a token counts as sent, ``failed`` (released after a failed send) is taken."""
        token = uuid.uuid4().hex
        return self._put_unless(
            {
                "action_id": key,
                "status": CLAIMED,
                "claimed_at": int(now),
                "claim_token": token,
                "expires_at": int(now) + PERIOD_RETENTION_SECONDS,
            },
            "attribute_not_exists(action_id) OR #status = :failed OR claim_token = :token"
            " OR (#status = :claimed AND claimed_at < :stale AND attribute_exists(claim_token))",
            names={"#status": "status"},
            values={
                ":failed": FAILED,
                ":claimed": CLAIMED,
                ":token": token,
                ":stale": int(now) - FUNCTION_TIMEOUT_SECONDS,
            },
        )

    def done_once(self, key: str) -> None:
        """``key`` was done (the notice sent): :meth:`claim_once` refuses it from now on."""
        self.table.update_item(
            Key={"action_id": key},
            UpdateExpression="SET #status = :done",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":done": DONE},
        )

    def get(self, key: str) -> dict[str, Any] | None:
        return self.table.get_item(Key={"action_id": key}, ConsistentRead=True).get("Item")

    def put_if_later(self, key: str, *, at: int, **fields: Any) -> bool:
        """Replace the item ``key`` with ``fields`` stamped ``at``, unless it is stamped ``at`` or
        later (a concurrent or retried tick wrote it): then False, and nothing is written."""
        return self._put_unless(
            {"action_id": key, "at": at, **fields},
            "attribute_not_exists(action_id) OR #at < :at",
            names={"#at": "at"},
            values={":at": at},
        )

    def put(self, key: str, **fields: Any) -> None:
        """Replace the item ``key`` with ``fields`` (a state recorded before or after a change)."""
        self.table.put_item(Item={"action_id": key, **fields})
