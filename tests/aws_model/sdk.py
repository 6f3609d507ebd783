"""Real botocore clients whose requests a model of AWS answers, so that what the SDK does between
the caller and AWS happens as it does in Lambda: botocore validates and serialises each request,
and its retry handler, configured by the client's own ``Config`` (the controllers' clients are built
with ``common/clients.py``'s), decides whether a throttled request, a 5xx or a request whose answer
was lost (a read timeout after AWS carried it out) is sent again. A request sent again reaches the
model again: a ``SubmitJob`` retried after its answer was lost makes a second job, as on AWS.

The model answers on botocore's ``before-send`` event, in place of the HTTP round trip (a POST whose
body is the request's JSON; for EC2's query protocol, the parameters as the caller gave them, kept
when botocore builds the request), and its answer is handed to the caller on ``before-parse`` as it
is, so a model answers in the shapes it always did. An error
the model raises (a ``ClientError``) becomes an HTTP error answer that botocore parses and, if its
retry handler says so, retries; a ``ReadTimeoutError`` is raised where the HTTP layer raises it;
a :class:`tests.aws_model.batch.Crash` ends the caller.

Every request a client sends (each attempt) is written to a shared :class:`Calls` log with who sent
it, its invocation id (one per call, the same on every retry of it, botocore's
``amz-sdk-invocation-id``), its attempt, its time on the model's clock, and what came of it: the
AWS-side record a scenario's checks read instead of what the controller says it did.

botocore sleeps between attempts (a random backoff of up to seconds); :func:`no_backoff` makes the
retries immediate while a scenario runs, so runs are quick and repeatable (the model's clock does not
move during a retry; no rule of the models turns on a few seconds).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any
from unittest import mock
from xml.sax.saxutils import escape

import boto3
import botocore.endpoint
from botocore import UNSIGNED
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError

# A client built without a config sends each request once (the models' callers that predate this module).
ONE_REQUEST = Config(retries={"mode": "standard", "total_max_attempts": 1})
READ_ONLY = ("Describe", "List", "Get", "Search", "Scan", "Query", "BatchGet")


@dataclass(frozen=True)
class Call:
    """One request a client sent: ``outcome`` is ``answered``, the error code AWS answered with,
    ``timeout`` (AWS carried it out, the answer was lost) or ``crash`` (the caller died)."""

    service: str
    operation: str
    request: dict[str, Any]
    by: str
    invocation: str
    attempt: int
    at: float
    outcome: str

    @property
    def mutating(self) -> bool:
        """Whether the operation may change something (anything but a read)."""
        return not self.operation.startswith(READ_ONLY)


class Calls(list[Call]):
    """The requests a scenario's clients sent, in order."""


class _Body:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


@cache
def session() -> boto3.session.Session:
    """One session for every model client: it reads botocore's service models once (a cold start's new
    clients then cost milliseconds, not the half second of reading them again)."""
    return boto3.session.Session(aws_access_key_id="model", aws_secret_access_key="model", region_name="us-east-1")


def unsigned(config: Config | None) -> Config:
    """``config`` (one request a call when None) with requests left unsigned: no credentials are needed."""
    return (config or ONE_REQUEST).merge(Config(signature_version=UNSIGNED))


def client(
    service: str,
    answer: Callable[[str, dict[str, Any]], dict[str, Any]],
    *,
    now: Callable[[], float],
    config: Config | None = None,
    by: str = "",
    calls: Calls | None = None,
) -> Any:
    """A boto3 client of ``service`` with ``config`` (its retries apply) whose requests
    ``answer(operation, request)`` answers (:func:`serve`)."""
    made = session().client(service, config=unsigned(config))
    serve(made, answer, now=now, by=by, calls=calls)
    return made


def serve(
    made: Any,
    answer: Callable[[str, dict[str, Any]], dict[str, Any]],
    *,
    now: Callable[[], float],
    by: str = "",
    calls: Calls | None = None,
) -> None:
    """Let ``answer(operation, request)`` answer the requests of the boto3 client ``made`` (the request
    as sent on the wire, JSON). ``by`` names the sender in ``calls``; ``now`` is the model's clock."""
    service = made.meta.service_model.service_name
    event = made.meta.service_model.service_id.hyphenize()
    answers: list[dict[str, Any]] = []  # the answer to the request in flight, handed over on before-parse
    query = made.meta.service_model.metadata["protocol"] == "ec2"
    kept: list[dict[str, Any]] = [{}]  # EC2: the parameters of the call in flight (each retry sends them again)

    def keep(params: dict[str, Any], **_: Any) -> None:
        kept[0] = params

    def send(request: Any, event_name: str, **_: Any) -> AWSResponse:
        operation = event_name.rsplit(".", 1)[1]
        body = kept[0] if query else json.loads(request.body or b"{}")
        headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        attempt = int(dict(p.split("=") for p in headers["amz-sdk-request"].split("; "))["attempt"])

        def log(outcome: str) -> None:
            if calls is not None:
                calls.append(
                    Call(
                        service=service,
                        operation=operation,
                        request=body,
                        by=by,
                        invocation=headers["amz-sdk-invocation-id"],
                        attempt=attempt,
                        at=now(),
                        outcome=outcome,
                    )
                )

        try:
            answered = answer(operation, body)
        except ClientError as error:
            log(error.response["Error"]["Code"])
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400)
            code, message = error.response["Error"]["Code"], error.response["Error"]["Message"]
            if query:
                error_xml = f"<Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error>"
                xml = f"<Response><Errors>{error_xml}</Errors></Response>"
                return AWSResponse(request.url, status, {}, _Body(xml.encode()))
            detail = {k: v for k, v in error.response.items() if k not in ("Error", "ResponseMetadata")}
            payload = {"__type": code, "message": message}
            return AWSResponse(request.url, status, {}, _Body(json.dumps({**payload, **detail}).encode()))
        except ReadTimeoutError:
            log("timeout")
            raise
        except BaseException:
            log("crash")
            raise
        log("answered")
        answers.append(answered)
        return AWSResponse(request.url, 200, {}, _Body(b"<Response/>" if query else b"{}"))

    def parse(customized_response_dict: dict[str, Any], response_dict: dict[str, Any], **_: Any) -> None:
        if response_dict["status_code"] < 300:
            customized_response_dict.update(answers.pop())

    if query:
        made.meta.events.register(f"before-parameter-build.{event}", keep)
    made.meta.events.register(f"before-send.{event}", send)
    made.meta.events.register(f"before-parse.{event}", parse)


@contextmanager
def no_backoff() -> Iterator[None]:
    """botocore retries at once (its backoff sleep is skipped) while the block runs."""
    with mock.patch.object(botocore.endpoint, "time", mock.Mock(sleep=lambda seconds: None)):
        yield
