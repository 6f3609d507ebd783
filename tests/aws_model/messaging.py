"""Small models of the two message services the submission guard talks to: an SNS topic's
``Publish`` (every message it accepted, by topic) and an SQS standard queue (the guard's dead-letter
queue: ``ReceiveMessage`` and ``DeleteMessage``, served behind a real boto3 client,
:mod:`tests.aws_model.sdk`), faulted at the call boundary like the others (``Faults``).

SNS speaks the query protocol, which :mod:`tests.aws_model.sdk` does not serve (it serves JSON
bodies): :class:`FakeSns` is called directly, so botocore's retries do not apply to ``Publish``
here; a throttle or a lost answer reaches the caller at once, as it would after the retries.

Each rule names its row of the register (docs/aws-behaviour.md) as ``[aws: <row id>]``.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

from . import sdk
from .batch import Clock, Faults

SAMPLED = 0.7  # the chance that a short poll samples the server holding a given visible message


class FakeSns:
    """The account's topics: each message accepted, with its topic, its time and its body read as JSON."""

    def __init__(self, clock: Clock, *, faults: Faults | None = None):
        self.clock, self.faults = clock, faults or Faults()
        self.published: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def publish(self, *, TopicArn: str, Message: str, Subject: str = "", **_: Any) -> dict[str, Any]:
        # A message whose MessageId is returned is saved and delivered [aws: events.sns-publish-delivers];
        # one whose answer was lost may have been delivered too (the "after" fault).
        self.faults.check("Publish", "before", throttle_code="Throttling", service="sns")
        self.published.append(
            {"TopicArn": TopicArn, "Subject": Subject, "Message": json.loads(Message), "_at": self.clock.now}
        )
        self.faults.check("Publish", "after", throttle_code="Throttling", service="sns")
        return {"MessageId": f"message-{next(self._ids)}"}


class FakeSqs:
    """One standard queue (its URL ``url``): messages the service put there (:meth:`send`, Lambda's
    dead-letter writes), handed out by ``ReceiveMessage`` as a short poll does, hidden for the
    visibility timeout asked for, deleted by their latest receipt handle."""

    def __init__(self, clock: Clock, rng: random.Random, url: str, *, faults: Faults | None = None):
        self.clock, self.rng, self.url, self.faults = clock, rng, url, faults or Faults()
        self.messages: dict[str, dict[str, Any]] = {}  # message id -> body, visible from, latest receipt handle
        self.deleted: dict[str, str] = {}  # message id -> body, of the messages deleted
        self._ids = itertools.count(1)

    def client(self, *, config: Any = None, by: str, calls: sdk.Calls | None = None) -> Any:
        def answer(operation: str, request: dict[str, Any]) -> dict[str, Any]:
            return {"ReceiveMessage": self.receive_message, "DeleteMessage": self.delete_message}[operation](**request)

        return sdk.client("sqs", answer, now=lambda: self.clock.now, config=config, by=by, calls=calls)

    def send(self, body: str) -> None:
        """A message the service itself writes (Lambda dead-lettering an event): never faulted."""
        message_id = f"m-{next(self._ids):06d}"
        self.messages[message_id] = {"Body": body, "visible_at": self.clock.now, "handle": None}

    def receive_message(
        self, *, QueueUrl: str, MaxNumberOfMessages: int = 1, VisibilityTimeout: int | None = None, **_: Any
    ) -> dict[str, Any]:
        self._check("ReceiveMessage", "before")
        assert QueueUrl == self.url, QueueUrl
        # A short poll samples some of the servers: a small queue gives fewer messages than asked for, at
        # times none [aws: events.sqs-receive-short-poll]; those returned are hidden for the visibility
        # timeout.
        visible = [m for m, message in self.messages.items() if message["visible_at"] <= self.clock.now]
        sampled = [m for m in visible if self.rng.random() < SAMPLED][: min(MaxNumberOfMessages, 10)]
        answered = []
        for message_id in sampled:
            message = self.messages[message_id]
            message["handle"] = f"{message_id}#{next(self._ids)}"
            message["visible_at"] = self.clock.now + (30 if VisibilityTimeout is None else VisibilityTimeout)
            answered.append({"MessageId": message_id, "ReceiptHandle": message["handle"], "Body": message["Body"]})
        self._check("ReceiveMessage", "after")
        return {"Messages": answered} if answered else {}

    def delete_message(self, *, QueueUrl: str, ReceiptHandle: str) -> dict[str, Any]:
        self._check("DeleteMessage", "before")
        # Only the latest receipt handle deletes; an old one succeeds and may delete nothing
        # [aws: events.sqs-delete-by-latest-receipt-handle].
        message_id = ReceiptHandle.split("#")[0]
        message = self.messages.get(message_id)
        if message is not None and message["handle"] == ReceiptHandle:
            self.deleted[message_id] = self.messages.pop(message_id)["Body"]
        self._check("DeleteMessage", "after")
        return {}

    def _check(self, operation: str, phase: str) -> None:
        self.faults.check(operation, phase, throttle_code="RequestThrottled", service="sqs")
