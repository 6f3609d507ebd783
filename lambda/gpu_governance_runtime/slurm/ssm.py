"""Shell commands on a HyperPod Slurm head node through SSM Run Command (``AWS-RunShellScript``).

One transport for every controller that acts on Slurm: the reclaim controller's adapter and the
capacity controller's window nodes (``capacity/slurm_window.py``). Slurm offers no AWS API, so
both send shell lines to the head node and read their standard output.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError

# Always fullmatch: with .match a `$` anchor accepts a trailing newline, i.e. a second shell line.
SLURM_JOB_ID = re.compile(r"\d+(_\d+)?")
SLURM_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def checked(value: str, pattern: re.Pattern) -> str:
    # values end up in a shell command on the head node: only plain identifiers pass (and are quoted anyway)
    if not pattern.fullmatch(value):
        raise ValueError(f"refusing unsafe Slurm identifier {value!r}")
    return value


def if_unchanged(job_id: str, expected: str, command: str) -> str:
    """Shell: run ``command`` only while the job shows ``expected`` (``State|RestartCnt``); prints
    ``done``, or ``now <state|restarts>`` (``now gone`` for a job that ended), so a job that
    ended, started or was requeued since it was read is left alone."""
    return (
        f"now=$(squeue --noheader --array --jobs={shlex.quote(job_id)} --Format='State:0|,RestartCnt:0' 2>/dev/null); "
        f'if [ "$now" = {shlex.quote(expected)} ]; then {command} && echo done; else echo "now ${{now:-gone}}"; fi'
    )


# SendCommand's TimeoutSeconds is how long a command may wait to be *delivered*; past it, one not
# yet started never runs (default 3,600 s: a command the controller gave up on could run up to an hour
# later). 30 s is the smallest value the API takes. The user guide counts the execution timeout in
# too, so a command may start up to DELIVERY_SECONDS + EXECUTION_SECONDS after it was sent
# [aws: ssm.delivery-deadline]; every command re-checks on the head node what it acts on.
DELIVERY_SECONDS = 30
# AWS-RunShellScript's executionTimeout: the longest a command may run once started (default
# 3,600 s, https://docs.aws.amazon.com/systems-manager/latest/userguide/monitor-commands.html).
# Every controller command is a few Slurm client calls.
EXECUTION_SECONDS = 60
# GetCommandInvocation statuses after which the command does nothing more (Pending, InProgress,
# Delayed and Cancelling are not; https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetCommandInvocation.html).
FINAL_STATUSES = ("Success", "Cancelled", "TimedOut", "Failed")


class CommandAbandoned(RuntimeError):
    """The controller stopped waiting for a command and asked SSM to cancel it. A cancel may or may
    not stop it [aws: ssm.cancel-command-may-not-stop]: the command may still run until its delivery
    deadline, and one already running finishes within EXECUTION_SECONDS. Its outcome is read back
    later with :meth:`HeadNode.outcome`; each command checks what it acts on before it changes it,
    so a late run changes nothing that moved since the controller read it."""

    def __init__(self, command_id: str, message: str):
        super().__init__(message)
        self.command_id = command_id


class HeadNode:
    """Runs shell commands on one head node (an SSM target id: ``i-...`` or ``mi-...``) and
    returns their standard output; never waits past the invocation's time left (less a margin
    to record the outcome). Every command carries a delivery deadline and an execution timeout,
    and one the controller stops waiting for is cancelled (which may not stop it), so none runs
    long after the controller decided. SSM returns only the first 24,000 characters of output."""

    def __init__(
        self,
        ssm: Any,
        *,
        instance_id: str,
        comment: str,
        poll_seconds: float = 1.0,
        timeout_seconds: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
        time_left: Callable[[], float] = lambda: float("inf"),
    ):
        self.ssm, self.instance_id, self.comment = ssm, instance_id, comment
        self.poll_seconds, self.timeout_seconds, self.sleep, self.time_left = (
            poll_seconds,
            timeout_seconds,
            sleep,
            time_left,
        )

    def run(self, commands: list[str]) -> str:
        wait = min(self.timeout_seconds, self.time_left() - 5)
        if wait < self.poll_seconds:
            raise RuntimeError(
                f"SSM command on {self.instance_id} not sent: {self.time_left():.0f} s of the invocation left"
            )
        sent = self.ssm.send_command(
            InstanceIds=[self.instance_id],
            DocumentName="AWS-RunShellScript",
            Comment=self.comment,
            TimeoutSeconds=DELIVERY_SECONDS,
            Parameters={"commands": commands, "executionTimeout": [str(EXECUTION_SECONDS)]},
        )
        command_id = sent["Command"]["CommandId"]
        waited = 0.0
        while True:
            self.sleep(self.poll_seconds)
            waited += self.poll_seconds
            try:
                result = self.outcome(command_id)
            except (ClientError, BotoCoreError) as error:  # throttled, timed out: the command may still run
                self._abandon(command_id, f"reading its result failed after {waited:.0f} s ({error})")
            if result["Status"] == "Success":
                return result.get("StandardOutputContent", "")
            if result["Status"] in FINAL_STATUSES:
                raise RuntimeError(
                    f"SSM command {command_id} on {self.instance_id}: {result['Status']}: {result.get('StandardErrorContent', '')[:500]}"
                )
            if waited >= wait:
                self._abandon(command_id, f"no result after {waited:.0f} s")

    def _abandon(self, command_id: str, why: str) -> NoReturn:
        """Stop waiting for a command: cancel it, so it is less likely to run later, and leave its
        outcome to be read back. A cancel that fails, or does not stop it, leaves it to its delivery
        deadline [aws: ssm.cancel-command-may-not-stop]."""
        try:
            self.ssm.cancel_command(CommandId=command_id, InstanceIds=[self.instance_id])
        except (ClientError, BotoCoreError) as error:
            why += f"; cancelling failed ({error})"
        else:
            why += "; cancelled"
        raise CommandAbandoned(command_id, f"SSM command {command_id} on {self.instance_id}: {why}")

    def outcome(self, command_id: str) -> dict[str, Any]:
        """The command's invocation as SSM has it (``Status`` Pending until SSM knows of it:
        [aws: ssm.invocation-eventually-consistent])."""
        try:
            return self.ssm.get_command_invocation(CommandId=command_id, InstanceId=self.instance_id)
        except self.ssm.exceptions.InvocationDoesNotExist:
            return {"Status": "Pending"}
