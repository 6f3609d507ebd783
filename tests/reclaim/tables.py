"""The reclaim controller's ledger table in moto, keyed as the construct declares it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from moto import mock_aws


@contextmanager
def reclaim_ledger_table() -> Iterator[Any]:
    with mock_aws():
        yield boto3.resource("dynamodb").create_table(
            TableName="ledger",
            KeySchema=[{"AttributeName": "action_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "action_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
