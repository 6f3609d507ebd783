"""The purchase ledger: intent recorded before any purchase, budget reserved in the same write.

One DynamoDB table, key ``pk``. Three kinds of item:

- ``slot#<window>@<occurrence>``: ``seq`` (intents so far) and ``open_intent`` while a purchase
  for that occurrence is undecided. Claiming sets ``open_intent`` on condition that none is set,
  so two runs at once, or one event delivered twice, cannot both buy for the same occurrence.
- ``intent#<id>``: what is bought, for how much, its ``status`` and ``called_at``, the moment
  just before the purchase call was sent (written first: an intent without it was never sent).
- ``spend#<window>#<period>``: ``total`` committed this budget period. The claim adds the fee on
  condition that the total stays within the budget, so concurrent runs cannot overspend. A
  requested window (``requests.py``) spends its declared window's budget: the intent records
  which (``budget``), so refunds go back where the fee was taken.

All three change in one transaction, so a crash leaves either a full claim or none.

A fourth kind records what the controller did to consumers: ``action#<what>#<id>`` with a
``status`` and JSON ``details``. Requeueing a Batch job claims its item first (only if none
exists), so a duplicate event never stops a job twice; re-pointing a HyperPod instance group
records each call made; ``action#request#<token>`` is an on-demand window (``requests.py``).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from ..planners.capacity import Purchase
from ..planners.offers import Offering
from ..planners.window import Window

Status = Literal["awaiting_approval", "approved", "purchasing", "purchased", "failed"]
# Statuses in which money may be (or may become) spent: the slot stays locked and the fee
# stays counted against the budget until the outcome is known.
OPEN_STATUSES = ("awaiting_approval", "approved", "purchasing")


@dataclass(frozen=True, kw_only=True)
class Intent:
    id: str
    window: str
    occurrence: str
    offering: Offering
    period: str
    status: Status
    created_at: datetime
    updated_at: datetime
    reservation_id: str | None = None
    reason: str = ""
    called_at: datetime | None = None
    budget: str = ""  # the budget its fee counts against (Window.budget_key); "" on older items: its window's

    @property
    def budget_key(self) -> str:
        return self.budget or self.window

    @property
    def attempted_at(self) -> datetime:
        """When the purchase call was (or may have been) made: the settle grace counts from here."""
        return self.called_at or self.updated_at

    @property
    def slot(self) -> str:
        return f"slot#{self.occurrence}"


class ClaimRefused(Exception):
    """Another run holds the occurrence, or the budget would be exceeded."""


class Ledger:
    def __init__(self, *, client: Any, table_name: str):
        self._db = client
        self._table = table_name

    # --- reads ----------------------------------------------------------------------------------

    def spent(self, window: Window, now: datetime) -> Decimal:
        item = self._db.get_item(
            TableName=self._table, Key=_key(f"spend#{window.budget_key}#{window.period_key(now)}"), ConsistentRead=True
        ).get("Item")
        return Decimal(item["total"]["N"]) if item else Decimal(0)

    def intent(self, intent_id: str) -> Intent | None:
        item = self._db.get_item(TableName=self._table, Key=_key(f"intent#{intent_id}"), ConsistentRead=True).get(
            "Item"
        )
        return _intent(item) if item else None

    def open_intents(self) -> list[Intent]:
        """Undecided intents: the reconciler settles these before anything new is bought."""
        return self.intents(*OPEN_STATUSES)

    def intents(self, *statuses: Status) -> list[Intent]:
        """Intents in one of ``statuses``, by id."""
        return sorted((_intent(item) for item in self._scan("intent#", statuses)), key=lambda i: i.id)

    def _scan(self, prefix: str, statuses: tuple[str, ...]) -> list[dict[str, Any]]:
        """Every item whose key starts with ``prefix`` and whose status is one of ``statuses``, all
        pages of a consistent scan (a page stops at 1 MB: LastEvaluatedKey names where to go on)."""
        items, start = [], None
        names = {f":s{i}": {"S": s} for i, s in enumerate(statuses)}
        while True:
            page = self._db.scan(
                TableName=self._table,
                FilterExpression=f"begins_with(pk, :prefix) AND #status IN ({', '.join(names)})",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":prefix": {"S": prefix}, **names},
                ConsistentRead=True,
                **({"ExclusiveStartKey": start} if start else {}),
            )
            items += page["Items"]
            start = page.get("LastEvaluatedKey")
            if not start:
                return items

    # --- writes ---------------------------------------------------------------------------------

    def claim(self, purchase: Purchase, window: Window, *, status: Status, now: datetime) -> Intent:
        """Record the intent to buy, lock the occurrence and reserve the fee, all or nothing."""
        fee = purchase.offering.upfront_fee
        if fee > window.budget:
            raise ClaimRefused(f"fee {fee} exceeds the whole budget {window.budget}")
        slot_key = f"slot#{purchase.occurrence.key}"
        slot = self._db.get_item(TableName=self._table, Key=_key(slot_key), ConsistentRead=True).get("Item")
        seq = int(slot["seq"]["N"]) if slot else 0
        if slot and "open_intent" in slot:
            raise ClaimRefused(
                f"{purchase.occurrence.key} already has an undecided purchase {slot['open_intent']['S']}"
            )
        intent = Intent(
            id=f"{window.name}-{purchase.occurrence.start:%Y%m%d%H%M}-{seq + 1}",
            window=window.name,
            occurrence=purchase.occurrence.key,
            offering=purchase.offering,
            period=window.period_key(now),
            status=status,
            created_at=now,
            updated_at=now,
            budget=window.budget_key,
        )
        slot_condition = (
            ("seq = :seq AND attribute_not_exists(open_intent)", {":seq": {"N": str(seq)}})
            if slot
            else ("attribute_not_exists(pk)", {})
        )
        try:
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": _key(slot_key),
                            "UpdateExpression": "SET seq = :next, open_intent = :id",
                            "ConditionExpression": slot_condition[0],
                            "ExpressionAttributeValues": {
                                ":next": {"N": str(seq + 1)},
                                ":id": {"S": intent.id},
                                **slot_condition[1],
                            },
                        }
                    },
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": _item(intent),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": _key(f"spend#{intent.budget_key}#{intent.period}"),
                            "UpdateExpression": "ADD #total :fee",
                            "ConditionExpression": "attribute_not_exists(#total) OR #total <= :limit",
                            "ExpressionAttributeNames": {"#total": "total"},
                            "ExpressionAttributeValues": {
                                ":fee": {"N": str(fee)},
                                ":limit": {"N": str(window.budget - fee)},
                            },
                        }
                    },
                ]
            )
        except self._db.exceptions.TransactionCanceledException as error:
            reasons = [r.get("Code") for r in error.response.get("CancellationReasons", [])]
            # Budget only when the occurrence itself was free; a conflict means another run.
            over_budget = reasons[2:3] == ["ConditionalCheckFailed"] and "ConditionalCheckFailed" not in reasons[:2]
            what = "budget" if over_budget else "another run claimed it first"
            raise ClaimRefused(f"{purchase.occurrence.key}: {what}") from None
        return intent

    def approve(self, intent_id: str, *, now: datetime) -> Intent:
        """Mark an intent awaiting approval as approved; anything else is refused."""
        if not self._move(intent_id, "approved", expected=("awaiting_approval",), now=now):
            current = self.intent(intent_id)
            raise ClaimRefused(
                f"intent {intent_id} "
                + ("does not exist" if current is None else f"is {current.status}, not awaiting_approval")
            )
        return self.intent(intent_id)

    def start_purchase(self, intent: Intent, *, now: datetime) -> None:
        """approved -> purchasing, so two runs cannot both act on one approval."""
        self._transition(intent, "purchasing", expected=("approved",), now=now)

    def mark_called(self, intent: Intent, *, at: datetime) -> None:
        """Record, just before the purchase call, that it is being made."""
        self._db.update_item(
            TableName=self._table,
            Key=_key(f"intent#{intent.id}"),
            UpdateExpression="SET called_at = :at",
            ConditionExpression="#status = :purchasing",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":at": {"S": at.isoformat()}, ":purchasing": {"S": "purchasing"}},
        )

    def revive(self, intent: Intent, *, reservation_id: str, now: datetime) -> bool:
        """A purchase settled as failed turned up after all (AWS listed it later than the settle
        grace): mark it purchased and count its fee again, once. False when already done."""
        try:
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": _key(f"intent#{intent.id}"),
                            "UpdateExpression": "SET #status = :purchased, updated_at = :now, reservation_id = :rid, reason = :reason",
                            "ConditionExpression": "#status = :failed",
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": {
                                ":purchased": {"S": "purchased"},
                                ":failed": {"S": "failed"},
                                ":now": {"S": now.isoformat()},
                                ":rid": {"S": reservation_id},
                                ":reason": {"S": f"found {reservation_id} after it was settled as failed"},
                            },
                        }
                    },
                    # Unconditional: the money is spent, the record must say so even above the budget.
                    self._spend_change(intent, intent.offering.upfront_fee),
                ]
            )
        except self._db.exceptions.TransactionCanceledException:
            return False
        return True

    def settle(
        self,
        intent: Intent,
        *,
        status: Literal["purchased", "failed"],
        now: datetime,
        reservation_id: str | None = None,
        reason: str = "",
    ) -> bool:
        """Close an undecided intent: unlock its occurrence and, when nothing was bought, give
        the fee back to the budget. False when another run settled it already."""
        items = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _key(f"intent#{intent.id}"),
                    "UpdateExpression": "SET #status = :status, updated_at = :now, reservation_id = :rid, reason = :reason",
                    "ConditionExpression": "#status IN (:a, :b, :c)",
                    "ExpressionAttributeNames": {"#status": "status"},
                    "ExpressionAttributeValues": {
                        ":status": {"S": status},
                        ":now": {"S": now.isoformat()},
                        ":rid": {"S": reservation_id or ""},
                        ":reason": {"S": reason},
                        **{k: {"S": s} for k, s in zip((":a", ":b", ":c"), OPEN_STATUSES, strict=True)},
                    },
                }
            },
            {
                "Update": {
                    "TableName": self._table,
                    "Key": _key(intent.slot),
                    "UpdateExpression": "REMOVE open_intent",
                    "ConditionExpression": "open_intent = :id",
                    "ExpressionAttributeValues": {":id": {"S": intent.id}},
                }
            },
        ]
        if status == "failed":
            items.append(self._spend_change(intent, -intent.offering.upfront_fee))
        try:
            self._db.transact_write_items(TransactItems=items)
        except self._db.exceptions.TransactionCanceledException as error:
            # Only a failed condition means another run settled it; a throttled or conflicting
            # item cancels the transaction too, and then nothing was written: the caller retries.
            # https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
            codes = {r.get("Code") for r in error.response.get("CancellationReasons", [])} - {"None", None}
            if codes <= {"ConditionalCheckFailed"}:
                return False
            raise
        return True

    def note_reservation(self, intent: Intent, reservation_id: str) -> None:
        """Keep the reservation id a purchase answered with on the undecided intent (one small
        write, when settling it did not go through): the next run finds the block by its id even
        while the tag listing lags."""
        self._db.update_item(
            TableName=self._table,
            Key=_key(f"intent#{intent.id}"),
            UpdateExpression="SET reservation_id = :rid",
            ConditionExpression="#status = :purchasing",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":rid": {"S": reservation_id}, ":purchasing": {"S": "purchasing"}},
        )

    def refund_payment_failure(self, intent: Intent, *, now: datetime, reason: str) -> bool:
        """A purchased block later went payment-failed: nothing was charged, give the fee back once."""
        try:
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": _key(f"intent#{intent.id}"),
                            "UpdateExpression": "SET #status = :failed, updated_at = :now, reason = :reason",
                            "ConditionExpression": "#status = :purchased",
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": {
                                ":failed": {"S": "failed"},
                                ":purchased": {"S": "purchased"},
                                ":now": {"S": now.isoformat()},
                                ":reason": {"S": reason},
                            },
                        }
                    },
                    self._spend_change(intent, -intent.offering.upfront_fee),
                ]
            )
        except self._db.exceptions.TransactionCanceledException:
            return False
        return True

    def _spend_change(self, intent: Intent, amount: Decimal) -> dict[str, Any]:
        """The transaction item that adds ``amount`` (a fee, or minus a fee for a refund) to the
        spend of the intent's window and budget period."""
        return {
            "Update": {
                "TableName": self._table,
                "Key": _key(f"spend#{intent.budget_key}#{intent.period}"),
                "UpdateExpression": "ADD #total :amount",
                "ExpressionAttributeNames": {"#total": "total"},
                "ExpressionAttributeValues": {":amount": {"N": str(amount)}},
            }
        }

    # --- actions on consumers -----------------------------------------------------------------

    def claim_action(self, action_id: str, *, status: str, details: dict[str, Any], now: datetime) -> bool:
        """Record a new action; False when it was recorded before (a duplicate event or run). The item
        carries this claim's own token: the SDK's resend of this very request after its answer was lost
        finds its own item and is True, where it was refused as another run's (the day's spend never
        read, a notice never sent). ``record_action`` replaces the item, token and all."""
        token = uuid.uuid4().hex
        try:
            self._db.put_item(
                TableName=self._table,
                Item={**_action_item(action_id, status, details, now), "claim_token": {"S": token}},
                ConditionExpression="attribute_not_exists(pk) OR claim_token = :token",
                ExpressionAttributeValues={":token": {"S": token}},
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def record_action(self, action_id: str, *, status: str, details: dict[str, Any], now: datetime) -> None:
        self._db.put_item(TableName=self._table, Item=_action_item(action_id, status, details, now))

    def close_action(self, action_id: str, *, expected: str, status: str, now: datetime) -> bool:
        """Move an action from ``expected`` to ``status``, details kept; False when it was not in
        ``expected`` (another run moved it first)."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": f"action#{action_id}"}},
                UpdateExpression="SET #status = :status, updated_at = :now",
                ConditionExpression="#status = :expected",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":status": {"S": status},
                    ":expected": {"S": expected},
                    ":now": {"S": now.isoformat()},
                },
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def actions(self, prefix: str, statuses: tuple[str, ...]) -> list[tuple[str, str, dict[str, Any]]]:
        """(action id, status, details) of the actions under ``prefix`` in one of ``statuses``."""
        return sorted(
            (i["pk"]["S"].removeprefix("action#"), i["status"]["S"], json.loads(i["details"]["S"]))
            for i in self._scan(f"action#{prefix}", statuses)
        )

    def _transition(self, intent: Intent, status: Status, *, expected: tuple[Status, ...], now: datetime) -> None:
        if not self._move(intent.id, status, expected=expected, now=now):
            raise ClaimRefused(f"intent {intent.id} is no longer {' or '.join(expected)}")

    def _move(self, intent_id: str, status: Status, *, expected: tuple[Status, ...], now: datetime) -> bool:
        """The intent moved from one of ``expected`` to ``status``; False when it was in none of them. Each
        move carries its own token: the SDK's resend of this very request after its answer was lost finds
        its own move and succeeds, where it was refused as another run's (an approved purchase then never
        made: settled failed as never called)."""
        token = uuid.uuid4().hex
        try:
            self._db.update_item(
                TableName=self._table,
                Key=_key(f"intent#{intent_id}"),
                UpdateExpression="SET #status = :status, updated_at = :now, move_token = :token",
                ConditionExpression="#status IN ("
                + ", ".join(f":e{i}" for i in range(len(expected)))
                + ") OR move_token = :token",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":status": {"S": status},
                    ":now": {"S": now.isoformat()},
                    ":token": {"S": token},
                    **{f":e{i}": {"S": s} for i, s in enumerate(expected)},
                },
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True


def _key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}}


def _item(intent: Intent) -> dict[str, Any]:
    offering = intent.offering
    return {
        "pk": {"S": f"intent#{intent.id}"},
        "id": {"S": intent.id},
        "window": {"S": intent.window},
        "occurrence": {"S": intent.occurrence},
        "period": {"S": intent.period},
        "budget": {"S": intent.budget_key},
        "status": {"S": intent.status},
        "created_at": {"S": intent.created_at.isoformat()},
        "updated_at": {"S": intent.updated_at.isoformat()},
        "fee": {"N": str(offering.upfront_fee)},
        "offering": {
            "S": json.dumps(
                {
                    **offering.__dict__,
                    "start": offering.start.isoformat(),
                    "end": offering.end.isoformat(),
                    "upfront_fee": str(offering.upfront_fee),
                },
                sort_keys=True,
            )
        },
    }


def _action_item(action_id: str, status: str, details: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {
        "pk": {"S": f"action#{action_id}"},
        "status": {"S": status},
        "updated_at": {"S": now.isoformat()},
        "details": {"S": json.dumps(details, sort_keys=True, default=str)},
    }


def _intent(item: dict[str, Any]) -> Intent:
    offering = json.loads(item["offering"]["S"])
    return Intent(
        id=item["id"]["S"],
        window=item["window"]["S"],
        occurrence=item["occurrence"]["S"],
        period=item["period"]["S"],
        status=item["status"]["S"],
        created_at=datetime.fromisoformat(item["created_at"]["S"]),
        updated_at=datetime.fromisoformat(item["updated_at"]["S"]),
        reservation_id=item.get("reservation_id", {}).get("S") or None,
        reason=item.get("reason", {}).get("S", ""),
        called_at=datetime.fromisoformat(item["called_at"]["S"]) if "called_at" in item else None,
        budget=item.get("budget", {}).get("S", ""),
        offering=Offering(
            **{
                **offering,
                "start": datetime.fromisoformat(offering["start"]),
                "end": datetime.fromisoformat(offering["end"]),
                "upfront_fee": Decimal(offering["upfront_fee"]),
            }
        ),
    )
