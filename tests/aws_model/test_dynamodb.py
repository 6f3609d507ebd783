"""The in-memory DynamoDB model (tests/aws_model/dynamodb.py) answers as moto does: the same call
sequences, including failing conditions and cancelled transactions, run on both and must give
identical results and errors, and the same table contents after. The sequences use the
expressions both ledgers send (common/action_ledger.py, capacity/ledger.py), and the ledgers
themselves run on both."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from gpu_governance_runtime.capacity.ledger import Ledger as CapacityLedger
from gpu_governance_runtime.common.action_ledger import ActionKey, Ledger as ReclaimLedger
from tests.aws_model.batch import Faults
from tests.aws_model.dynamodb import FakeDynamoDB

TABLE = "ledger"


@contextmanager
def moto_client(key: str) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def model_client(key: str, **options: Any) -> Any:
    model = FakeDynamoDB(**options)
    model.create_table(TABLE, key=key)
    return model.client()


def outcome(call: Callable[[], Any]) -> Any:
    """What a caller can see of one call: the answer, or the error code with the cancellation reasons."""
    try:
        answer = call()
    except ClientError as error:
        return (
            "error",
            error.response["Error"]["Code"],
            [r.get("Code") for r in error.response.get("CancellationReasons", [])],
        )
    answer.pop("ResponseMetadata", None)
    # moto adds ConsumedCapacity and ItemCollectionMetrics unasked; DynamoDB returns them only with
    # ReturnConsumedCapacity / ReturnItemCollectionMetrics, which the ledgers never set [aws: ddb.consumed-capacity-on-request]
    answer.pop("ConsumedCapacity", None)
    answer.pop("ItemCollectionMetrics", None)
    return answer


def trimmed(value: Any) -> Any:
    """Numbers as DynamoDB stores them, leading and trailing zeroes trimmed [aws: ddb.numbers-trimmed];
    moto keeps the zeros of its decimal arithmetic (1000.0), the model trims them."""
    if isinstance(value, dict):
        return {k: (format(Decimal(v).normalize(), "f") if k == "N" else trimmed(v)) for k, v in value.items()}
    return [trimmed(v) for v in value] if isinstance(value, list) else value


def contents(client: Any, key: str) -> list[dict[str, Any]]:
    items, start = [], None
    while True:
        page = client.scan(TableName=TABLE, **({"ExclusiveStartKey": start} if start else {}))
        items += page["Items"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return trimmed(sorted(items, key=lambda item: item[key]["S"]))


def on_both(key: str, sequence: Callable[[Any], list[Any]]) -> tuple[list[Any], list[Any]]:
    with moto_client(key) as moto:
        expected = sequence(moto) + [contents(moto, key)]
    model = model_client(key)
    return expected, sequence(model) + [contents(model, key)]


def pk(value: str) -> dict[str, Any]:
    return {"pk": {"S": value}}


def status_sequence(db: Any) -> list[Any]:
    """Conditional puts and updates with the capacity ledger's status expressions."""
    names = {"#status": "status"}
    return [
        outcome(
            lambda: db.put_item(
                TableName=TABLE,
                Item={**pk("action#a"), "status": {"S": "open"}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        ),
        outcome(
            lambda: db.put_item(
                TableName=TABLE,
                Item={**pk("action#a"), "status": {"S": "other"}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        ),
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("action#a"),
                UpdateExpression="SET #status = :status, updated_at = :now",
                ConditionExpression="#status = :expected",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":status": {"S": "done"}, ":expected": {"S": "open"}, ":now": {"S": "t1"}},
            )
        ),
        # the same move again: the status is no longer the expected one
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("action#a"),
                UpdateExpression="SET #status = :status, updated_at = :now",
                ConditionExpression="#status = :expected",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":status": {"S": "done"}, ":expected": {"S": "open"}, ":now": {"S": "t2"}},
            )
        ),
        # a condition on an item that does not exist fails, and the update creates nothing
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("intent#missing"),
                UpdateExpression="SET called_at = :at",
                ConditionExpression="#status = :purchasing",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":at": {"S": "t"}, ":purchasing": {"S": "purchasing"}},
            )
        ),
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("action#a"),
                UpdateExpression="SET #status = :status",
                ConditionExpression="#status IN (:e0, :e1, :e2)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={
                    ":status": {"S": "closed"},
                    ":e0": {"S": "x"},
                    ":e1": {"S": "done"},
                    ":e2": {"S": "y"},
                },
            )
        ),
        outcome(lambda: db.update_item(TableName=TABLE, Key=pk("action#a"), UpdateExpression="REMOVE updated_at")),
        outcome(lambda: db.get_item(TableName=TABLE, Key=pk("action#a"), ConsistentRead=True)),
        outcome(lambda: db.get_item(TableName=TABLE, Key=pk("action#none"), ConsistentRead=True)),
        # an upsert without a condition creates the item
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("note"),
                UpdateExpression="SET reservation_id = :rid",
                ExpressionAttributeValues={":rid": {"S": "cr-1"}},
            )
        ),
    ]


def counter_and_set_sequence(db: Any) -> list[Any]:
    """The reclaim ledger's per-minute cap (ADD with a bound) and open set (ADD / DELETE of a string set)."""
    take = lambda: db.update_item(
        TableName=TABLE,
        Key={"action_id": {"S": "cap#p#1"}},
        UpdateExpression="ADD taken :one SET expires_at = :expires",
        ConditionExpression="attribute_not_exists(taken) OR taken < :cap",
        ExpressionAttributeValues={":one": {"N": "1"}, ":cap": {"N": "2"}, ":expires": {"N": "100"}},
    )
    add = lambda ids: db.update_item(
        TableName=TABLE,
        Key={"action_id": {"S": "open#p"}},
        UpdateExpression="ADD ids :id SET expires_at = :expires",
        ExpressionAttributeValues={":id": {"SS": ids}, ":expires": {"N": "100"}},
    )
    delete = lambda ids: db.update_item(
        TableName=TABLE,
        Key={"action_id": {"S": "open#p"}},
        UpdateExpression="DELETE ids :id",
        ExpressionAttributeValues={":id": {"SS": ids}},
    )
    get = lambda: db.get_item(TableName=TABLE, Key={"action_id": {"S": "open#p"}}, ConsistentRead=True)
    return [
        outcome(take),
        outcome(take),
        outcome(take),
        outcome(lambda: add(["a"])),
        outcome(lambda: add(["b", "a"])),
        sorted(outcome(get)["Item"]["ids"]["SS"]),
        outcome(lambda: delete(["a"])),
        outcome(get),
        outcome(lambda: delete(["b"])),
        outcome(get),
        outcome(lambda: delete(["c"])),
        outcome(get),
    ]


def claim_transaction(db: Any, *, seq: int, intent: str, fee: str, limit: str) -> Any:
    """The capacity ledger's claim: slot, intent and spend in one transaction."""
    slot_condition = (
        ("seq = :seq AND attribute_not_exists(open_intent)", {":seq": {"N": str(seq)}})
        if seq
        else ("attribute_not_exists(pk)", {})
    )
    return outcome(
        lambda: db.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": pk("slot#w@1"),
                        "UpdateExpression": "SET seq = :next, open_intent = :id",
                        "ConditionExpression": slot_condition[0],
                        "ExpressionAttributeValues": {
                            ":next": {"N": str(seq + 1)},
                            ":id": {"S": intent},
                            **slot_condition[1],
                        },
                    }
                },
                {
                    "Put": {
                        "TableName": TABLE,
                        "Item": {**pk(f"intent#{intent}"), "status": {"S": "purchasing"}, "fee": {"N": fee}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": pk("spend#w#2026-12"),
                        "UpdateExpression": "ADD #total :fee",
                        "ConditionExpression": "attribute_not_exists(#total) OR #total <= :limit",
                        "ExpressionAttributeNames": {"#total": "total"},
                        "ExpressionAttributeValues": {":fee": {"N": fee}, ":limit": {"N": limit}},
                    }
                },
            ]
        )
    )


def transaction_sequence(db: Any) -> list[Any]:
    settle = lambda intent, status: outcome(
        lambda: db.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": pk(f"intent#{intent}"),
                        "UpdateExpression": "SET #status = :status",
                        "ConditionExpression": "#status IN (:a, :b, :c)",
                        "ExpressionAttributeNames": {"#status": "status"},
                        "ExpressionAttributeValues": {
                            ":status": {"S": status},
                            ":a": {"S": "awaiting_approval"},
                            ":b": {"S": "approved"},
                            ":c": {"S": "purchasing"},
                        },
                    }
                },
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": pk("slot#w@1"),
                        "UpdateExpression": "REMOVE open_intent",
                        "ConditionExpression": "open_intent = :id",
                        "ExpressionAttributeValues": {":id": {"S": intent}},
                    }
                },
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": pk("spend#w#2026-12"),
                        "UpdateExpression": "ADD #total :amount",
                        "ExpressionAttributeNames": {"#total": "total"},
                        "ExpressionAttributeValues": {":amount": {"N": "-1500.5"}},
                    }
                },
            ]
        )
    )
    return [
        claim_transaction(db, seq=0, intent="i1", fee="1500.5", limit="2000"),
        claim_transaction(db, seq=0, intent="i1", fee="1500.5", limit="2000"),  # the same claim again: the slot exists
        claim_transaction(db, seq=1, intent="i2", fee="1500.5", limit="2000"),  # the occurrence is still open
        settle("i1", "failed"),
        settle("i1", "failed"),  # settled before: only the conditions failed
        claim_transaction(
            db, seq=1, intent="i2", fee="3000", limit="-1000"
        ),  # over budget: only the spend's condition fails
        claim_transaction(db, seq=1, intent="i2", fee="1000", limit="1000"),
        # one item twice in a transaction is refused outright
        outcome(
            lambda: db.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": TABLE,
                            "Key": pk("x"),
                            "UpdateExpression": "SET a = :a",
                            "ExpressionAttributeValues": {":a": {"S": "1"}},
                        }
                    },
                    {
                        "Update": {
                            "TableName": TABLE,
                            "Key": pk("x"),
                            "UpdateExpression": "SET b = :b",
                            "ExpressionAttributeValues": {":b": {"S": "1"}},
                        }
                    },
                ]
            )
        ),
    ]


def invalid_request_sequence(db: Any) -> list[Any]:
    return [
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("a"),
                UpdateExpression="SET b = :b",
                ExpressionAttributeValues={":b": {"S": "1"}, ":unused": {"S": "2"}},
            )
        ),
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("a"),
                UpdateExpression="SET #b = :b",
                ExpressionAttributeNames={"#c": "c"},
                ExpressionAttributeValues={":b": {"S": "1"}},
            )
        ),
        outcome(lambda: db.put_item(TableName=TABLE, Item={"other": {"S": "1"}})),
        outcome(lambda: db.get_item(TableName=TABLE, Key={"other": {"S": "1"}})),
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("a"),
                UpdateExpression="SET pk = :b",
                ExpressionAttributeValues={":b": {"S": "1"}},
            )
        ),
        outcome(
            lambda: db.update_item(
                TableName=TABLE,
                Key=pk("a"),
                UpdateExpression="SET b = :b SET c = :b",
                ExpressionAttributeValues={":b": {"S": "1"}},
            )
        ),
        outcome(lambda: db.get_item(TableName="missing", Key=pk("a"))),
    ]


def comparison_sequence(db: Any) -> list[Any]:
    """Numbers compare as numbers, values of different types and missing attributes compare false."""
    db.put_item(TableName=TABLE, Item={**pk("c"), "n": {"N": "10"}, "s": {"S": "10"}})
    check = lambda condition, values: outcome(
        lambda: db.put_item(
            TableName=TABLE,
            Item={**pk("c"), "n": {"N": "10"}, "s": {"S": "10"}},
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
        )
    )
    return [
        check("n < :v", {":v": {"N": "9"}}),
        check("n < :v", {":v": {"N": "11"}}),
        check("n = :v", {":v": {"S": "10"}}),
        check("s < :v", {":v": {"S": "9"}}),
        check("gone < :v", {":v": {"N": "1"}}),
        check("NOT (n = :v)", {":v": {"N": "10"}}),
        check("n <> :v", {":v": {"N": "10"}}),
        check("n = :a OR (s = :b AND attribute_exists(n))", {":a": {"N": "1"}, ":b": {"S": "10"}}),
        check("n BETWEEN :a AND :b", {":a": {"N": "1"}, ":b": {"N": "10"}}),
    ]


@pytest.mark.parametrize("sequence", [status_sequence, invalid_request_sequence, comparison_sequence])
def test_the_model_answers_the_capacity_ledgers_calls_as_moto_does(sequence):
    expected, modelled = on_both("pk", sequence)
    assert modelled == expected


def test_a_cancelled_transaction_gives_one_reason_per_action_and_writes_nothing():
    expected, modelled = on_both("pk", transaction_sequence)
    assert modelled == expected
    over_budget = ("error", "TransactionCanceledException", ["None", "None", "ConditionalCheckFailed"])
    assert expected[5] == modelled[5] == over_budget
    assert expected[4] == (
        "error",
        "TransactionCanceledException",
        ["ConditionalCheckFailed", "ConditionalCheckFailed", "None"],
    )


def test_the_model_answers_the_reclaim_ledgers_counter_and_set_updates_as_moto_does():
    expected, modelled = on_both("action_id", counter_and_set_sequence)
    assert modelled == expected
    assert expected[2] == ("error", "ConditionalCheckFailedException", [])  # the third take is over the cap of two


def scan_pages(db: Any) -> list[Any]:
    for i in range(7):
        db.put_item(
            TableName=TABLE,
            Item={
                **pk(f"action#requeue#{i}" if i % 2 else f"intent#{i}"),
                "status": {"S": "claimed" if i < 5 else "done"},
            },
        )
    pages, start = [], None
    while True:
        page = db.scan(
            TableName=TABLE,
            FilterExpression="begins_with(pk, :prefix) AND #status IN (:s0, :s1)",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={":prefix": {"S": "action#"}, ":s0": {"S": "claimed"}, ":s1": {"S": "x"}},
            ConsistentRead=True,
            Limit=3,
            **({"ExclusiveStartKey": start} if start else {}),
        )
        pages.append(page)
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    # DynamoDB's order is its own (moto's and the model's differ): what pages compare is how many items each one
    # evaluated, whether another follows, and all that was found
    return [
        [(p["ScannedCount"], "LastEvaluatedKey" in p) for p in pages],
        sorted(i["pk"]["S"] for p in pages for i in p["Items"]),
    ]


def test_scan_pages_with_a_filter_as_moto_does():
    expected, modelled = on_both("pk", scan_pages)
    assert modelled == expected
    assert expected[1] == ["action#requeue#1", "action#requeue#3"]


def test_the_ledgers_themselves_get_the_same_answers_from_the_model_and_moto():
    def reclaim(table: Any) -> list[Any]:
        ledger, key = ReclaimLedger(table), ActionKey(pool="p", job_id="j1", attempt="0", action="preempt")
        answers = [
            ledger.claim(key, now=1000, reason="borrowed"),
            ledger.claim(key, now=1001, reason="again"),
            ledger.take_preemption("p", now=1000, cap=1),
            ledger.take_preemption("p", now=1010, cap=1),
        ]
        ledger.mark_open(key, now=1000)
        ledger.record(key, status="failed", detail="throttled", new_job="job-2")
        answers += [ledger.open_actions("p"), ledger.claim(key, now=1002, reason="retry after failed")]
        ledger.close(key)
        return answers + [ledger.open_actions("p")]

    def capacity(db: Any) -> list[Any]:
        ledger, now = CapacityLedger(client=db, table_name=TABLE), datetime(2026, 12, 1, tzinfo=UTC)
        answers = [
            ledger.claim_action(f"requeue#job-{i}", status="claimed", details={"job": i}, now=now) for i in range(4)
        ]
        answers += [
            ledger.claim_action("requeue#job-1", status="claimed", details={}, now=now),
            ledger.close_action("requeue#job-1", expected="claimed", status="done", now=now),
            ledger.close_action("requeue#job-1", expected="claimed", status="done", now=now),
        ]
        return answers + [ledger.actions("requeue#", ("claimed",))]

    with mock_aws():
        resource = boto3.resource("dynamodb", region_name="us-east-1")
        table = resource.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "action_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "action_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        expected_reclaim = reclaim(table)
    with moto_client("pk") as moto:
        expected_capacity = capacity(moto)
    model = FakeDynamoDB(max_page_items=1)  # one item a page: the ledger's paging is exercised
    model.create_table(TABLE, key="pk")
    model_reclaim = FakeDynamoDB()
    model_reclaim.create_table(TABLE, key="action_id")
    assert reclaim(model_reclaim.table(TABLE)) == expected_reclaim
    assert capacity(model.client()) == expected_capacity
    assert expected_reclaim[:4] == [True, False, True, False] and expected_capacity[-1][0][0] == "requeue#job-0"


def test_a_fault_is_the_services_own_throttle_or_a_lost_answer_after_the_write():
    faults = Faults(lambda operation, phase: "throttle" if phase == "before" else None)
    model = FakeDynamoDB(faults=faults)
    model.create_table(TABLE, key="pk")
    db = model.client()
    with pytest.raises(db.exceptions.ClientError, match="ThrottlingException"):
        db.put_item(TableName=TABLE, Item=pk("a"))
    assert model.tables[TABLE][1] == {}
    faults.plan = lambda operation, phase: "timeout" if phase == "after" else None
    with pytest.raises(Exception, match="Read timeout"):
        db.put_item(TableName=TABLE, Item=pk("a"))
    assert list(model.tables[TABLE][1]) == ["a"]  # DynamoDB wrote it; the caller never heard
