"""A small stateful model of SSM Run Command (``AWS-RunShellScript`` on one managed node), played
by AWS's documented rules (cited beside each), behind the boto3 methods the controllers use:
``send_command``, ``get_command_invocation``, ``cancel_command``.

A command reaches the node ``delivery_delay`` seconds after it is sent (the node's agent may be
slow, offline or busy); the node's shell is ``run(commands) -> stdout``. ``cancel_stops()`` decides
whether a ``CancelCommand`` stops the command: AWS does not promise it does
[aws: ssm.cancel-command-may-not-stop]. Each rule names its row of docs/aws-behaviour.md. Time is the shared
:class:`tests.aws_model.batch.Clock`; the model settles what has become due whenever it is
called or :meth:`FakeSsm.advance` is.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from .batch import Clock, Faults

DEFAULT_DELIVERY_TIMEOUT = 3600  # SendCommand's TimeoutSeconds [aws: ssm.delivery-deadline]
DEFAULT_EXECUTION_TIMEOUT = 3600  # AWS-RunShellScript's executionTimeout parameter


@dataclass
class Invocation:
    command_id: str
    commands: list[str]
    sent_at: float
    deliver_at: float
    delivery_timeout: float
    execution_timeout: float
    status: str = "Pending"
    details: str = "Pending"
    output: str = ""
    ran_at: float | None = None  # when the node's shell ran it (None: never)


class FakeSsm:
    class exceptions:
        class InvocationDoesNotExist(ClientError):
            pass

    def __init__(
        self,
        clock: Clock,
        *,
        instance_id: str,
        run: Callable[[list[str]], str],
        delivery_delay: float | Callable[[], float] = 1.0,
        faults: Faults | None = None,
        cancel_stops: Callable[[], bool] = lambda: True,
    ):
        """``delivery_delay``: seconds, or a function drawing them for each command; ``cancel_stops``:
        drawn at each CancelCommand, False when it leaves the command to run."""
        self.clock, self.instance_id, self.run, self.delivery_delay = clock, instance_id, run, delivery_delay
        self.cancel_stops = cancel_stops
        self.cancels_ignored = 0  # CancelCommand calls that left their command to run
        self.faults = faults or Faults()
        self.invocations: dict[str, Invocation] = {}
        self.pending: dict[str, Invocation] = {}  # not delivered yet (what advance looks at)
        self.executed: list[list[str]] = []  # what the node's shell actually ran, in order
        self._ids = itertools.count(1)

    def send_command(
        self,
        *,
        InstanceIds: list[str],
        DocumentName: str,
        Parameters: dict[str, list[str]],
        Comment: str = "",
        TimeoutSeconds: int = DEFAULT_DELIVERY_TIMEOUT,
    ) -> dict[str, Any]:
        self.faults.check("SendCommand", "before", throttle_code="ThrottlingException", service="ssm")
        # [aws: ssm.delivery-deadline]
        assert (InstanceIds, DocumentName) == ([self.instance_id], "AWS-RunShellScript"), (InstanceIds, DocumentName)
        if not 30 <= TimeoutSeconds <= 2592000:  # the API's range
            raise ClientError(
                {"Error": {"Code": "ValidationException", "Message": "TimeoutSeconds must be 30..2592000"}},
                "SendCommand",
            )
        command_id = f"{next(self._ids):08d}-0000-0000-0000-000000000000"
        execution = float(Parameters.get("executionTimeout", [DEFAULT_EXECUTION_TIMEOUT])[0])
        delay = self.delivery_delay() if callable(self.delivery_delay) else self.delivery_delay
        self.invocations[command_id] = self.pending[command_id] = Invocation(
            command_id,
            list(Parameters["commands"]),
            self.clock.now,
            self.clock.now + delay,
            float(TimeoutSeconds),
            execution,
        )
        self.faults.check("SendCommand", "after", throttle_code="ThrottlingException", service="ssm")
        return {"Command": {"CommandId": command_id, "TimeoutSeconds": TimeoutSeconds, "Status": "Pending"}}

    def get_command_invocation(self, *, CommandId: str, InstanceId: str) -> dict[str, Any]:
        self.faults.check("GetCommandInvocation", "before", throttle_code="ThrottlingException", service="ssm")
        self.advance(0)
        invocation = self.invocations.get(CommandId)
        # Right after SendCommand the invocation may not exist yet [aws: ssm.invocation-eventually-consistent].
        if invocation is None or self.clock.now - invocation.sent_at < 0.5:
            raise self.exceptions.InvocationDoesNotExist(
                {"Error": {"Code": "InvocationDoesNotExist", "Message": ""}}, "GetCommandInvocation"
            )
        return {
            "CommandId": CommandId,
            "InstanceId": InstanceId,
            "Status": invocation.status,
            "StatusDetails": invocation.details,
            "StandardOutputContent": invocation.output[:24000],  # [aws: ssm.output-24000]
            "StandardErrorContent": "",
        }

    def cancel_command(self, *, CommandId: str, InstanceIds: list[str] | None = None) -> dict[str, Any]:
        self.faults.check("CancelCommand", "before", throttle_code="ThrottlingException", service="ssm")
        self.advance(0)
        invocation = self.invocations[CommandId]
        # No guarantee that the command is stopped [aws: ssm.cancel-command-may-not-stop]: one not delivered yet
        # is Cancelled and never runs when cancel_stops() says so, else it runs as if never cancelled; one that ran
        # has finished already (the model's commands run at once). Cancelled is final [aws: ssm.invocation-statuses].
        if invocation.status in ("Pending", "Delayed"):
            if self.cancel_stops():
                invocation.status = invocation.details = "Cancelled"
                self.pending.pop(CommandId, None)
            else:
                self.cancels_ignored += 1
        return {}

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        for invocation in sorted(self.pending.values(), key=lambda i: i.deliver_at):
            if self.clock.now < invocation.deliver_at:
                continue
            del self.pending[invocation.command_id]
            # A command not delivered in time is not run (DeliveryTimedOut). The API reference's deadline is
            # TimeoutSeconds, the user guide's TimeoutSeconds plus the execution timeout: the model plays the later
            # [aws: ssm.delivery-deadline].
            if invocation.deliver_at - invocation.sent_at > self.deadline(invocation):
                invocation.status, invocation.details = "TimedOut", "DeliveryTimedOut"
                continue
            self.executed.append(invocation.commands)
            invocation.ran_at = invocation.deliver_at
            invocation.output = self.run(invocation.commands)
            invocation.status = invocation.details = "Success"

    @staticmethod
    def deadline(invocation: Invocation) -> float:
        """Seconds after it was sent until which a command may still be delivered and run."""
        return invocation.delivery_timeout + invocation.execution_timeout
