"""The adapter of a SageMaker HyperPod Slurm pool, through SSM Run Command on the head node: reads
``squeue``, requeues victims (``scontrol requeue``) and re-routes borrowing starts to the shared
``borrow`` partition under the team's borrow QoS (the mapping in ``gpu_governance_runtime.slurm.plan``).
Own-capacity starts are left to Slurm's scheduler. It decides nothing.
"""

from __future__ import annotations

import calendar
import re
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from ...common.action_ledger import ABANDONED, DONE, FAILED, SKIPPED, ActionKey, Ledger
from ...planners.reclaim import PendingJob, PoolState, Preemption, RunningJob, Start
from ...policy import Policy, PoolPolicy
from ...slurm.plan import BORROW_PARTITION, borrow_qos_name
from ...slurm.ssm import FINAL_STATUSES, SLURM_JOB_ID, SLURM_NAME, CommandAbandoned, HeadNode, checked, if_unchanged
from ..base import ActionResult, pool_state, unrecorded

# Longest wait for one SSM command's result; with the read and one action, within the function's
# timeout (common.action_ledger.FUNCTION_TIMEOUT_SECONDS).
SSM_WAIT_SECONDS = 20.0


# One line per job (per array task with --array, so every id is one scontrol can name), fields
# '|'-separated and unpadded (size 0).
SQUEUE_FORMAT = "JobArrayID:0|,Account:0|,QOS:0|,State:0|,NumNodes:0|,StartTime:0|,SubmitTime:0|,RestartCnt:0|,TimeLimit:0|,Reason:0"
# SSM returns only the first 24,000 characters of output: this last line proves the queue was read whole.
END_OF_QUEUE = "gg-end-of-queue"
# Pending for these reasons a job cannot start however much capacity is free (held, waiting on
# another job or on its begin time; a requeued job waits about two minutes with BeginTime), so
# nothing is preempted or moved for it.
NOT_STARTABLE = frozenset({"JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied", "BeginTime"})


def squeue_command(accounts: Iterable[str]) -> str:
    """The queue of the governed accounts, times in UTC ISO format whatever the head node's time
    zone or ``SLURM_TIME_FORMAT``."""
    names = ",".join(checked(a, SLURM_NAME) for a in sorted(accounts))
    return (
        f"TZ=UTC SLURM_TIME_FORMAT=standard squeue --noheader --array --states=RUNNING,PENDING "
        f"--account={shlex.quote(names)} --Format='{SQUEUE_FORMAT}' && echo {END_OF_QUEUE}"
    )


class SlurmAdapter:
    acts = True
    reroutes_borrowers = True
    usage_from_queue = False
    preemptions_seen: Mapping[str, int] = {}  # not read yet: Slurm's own QoS preemptions (docs/reclaim.md)

    def __init__(
        self,
        ssm: Any,
        *,
        instance_id: str,
        instance_type: str,
        pool: PoolPolicy,
        policy: Policy,
        poll_seconds: float = 1.0,
        timeout_seconds: float = SSM_WAIT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        time_left: Callable[[], float] = lambda: float("inf"),
    ):
        self.instance_id, self.instance_type = instance_id, instance_type
        self.pool, self.policy = pool, policy
        self.timeout_seconds = timeout_seconds
        self.head_node = HeadNode(
            ssm,
            instance_id=instance_id,
            comment="gpu-governance reclaim controller",
            poll_seconds=poll_seconds,
            timeout_seconds=timeout_seconds,
            sleep=sleep,
            time_left=time_left,
        )
        self.action_seconds = timeout_seconds + 5  # the wait plus sending the command
        self._restarts: dict[str, int] = {}

    def run(self, commands: list[str]) -> str:
        """Run shell commands on the head node (``slurm.ssm.HeadNode``) and return their output."""
        return self.head_node.run(commands)

    def read(self, now: float) -> PoolState:
        output = self.run([squeue_command(s.name for s in self.pool.shares)])
        running, pending = parse_squeue(output, self.pool, self.policy, self.instance_type)
        self._restarts = {job.job_id: job.times_preempted for job in (*running, *pending)}
        return pool_state(self.pool, running, pending, now)

    def attempt_of(self, job_id: str) -> str:
        return str(self._restarts.get(job_id, 0))

    def resume(self, ledger: Ledger, now: float) -> list[ActionResult]:
        """Read back the commands earlier ticks stopped waiting for and cancelled (``abandoned``):
        each one's outcome closes its action (``done``/``skipped`` if it ran, ``failed`` if not,
        so a later tick may act again); one still in SSM's hands stays open. ``scontrol requeue``
        puts a job itself back in the queue: nothing else is ever left open."""
        results = []
        for item in ledger.open_actions(self.pool.name):
            if item["status"] != ABANDONED:
                continue
            key = ActionKey(pool=item["pool"], job_id=item["job_id"], attempt=item["attempt"], action=item["action"])
            invocation = self.head_node.outcome(item["command_id"])
            if invocation["Status"] not in FINAL_STATUSES:
                continue
            output = invocation.get("StandardOutputContent", "").strip()
            outcome = (DONE if output == "done" else SKIPPED) if invocation["Status"] == "Success" else FAILED
            result = ActionResult(
                job_id=key.job_id,
                outcome=outcome,
                detail=f"command {item['command_id']}: {invocation['Status']} {output}"[:500],
            )
            ledger.record(key, status=outcome, detail=result.detail)
            ledger.close(key)
            results.append(result)
        return results

    def preempt(self, preemption: Preemption, progress: Callable[..., None] = unrecorded) -> ActionResult:
        job_id = checked(preemption.job_id, SLURM_JOB_ID)
        return self._if_unchanged(job_id, "RUNNING", f"scontrol requeue {shlex.quote(job_id)}", progress)

    def start(self, start: Start, progress: Callable[..., None] = unrecorded) -> ActionResult:
        """Only borrowing starts come here: inside its own nodes Slurm starts a job by itself."""
        job_id = checked(start.job_id, SLURM_JOB_ID)
        qos = checked(borrow_qos_name(start.share), SLURM_NAME)
        result = self._if_unchanged(
            job_id,
            "PENDING",
            f"scontrol update {shlex.quote(f'JobId={job_id}')} {shlex.quote(f'Partition={BORROW_PARTITION}')} {shlex.quote(f'QOS={qos}')}",
            progress,
        )
        return replace(result, detail=f"moved to {BORROW_PARTITION} as {qos}") if result.outcome == "done" else result

    def _if_unchanged(self, job_id: str, state: str, command: str, progress: Callable[..., None]) -> ActionResult:
        """Run ``command`` only while the job is as read (state and restart count): a job that
        ended, started or was requeued since is left alone and reported ``skipped``. A command
        given up on (and cancelled) is recorded ``abandoned`` with its id, for ``resume``."""
        expected = f"{state}|{self.attempt_of(job_id)}"
        try:
            output = self.run([if_unchanged(job_id, expected, command)])
        except CommandAbandoned as abandoned:
            progress(ABANDONED, command_id=abandoned.command_id)
            raise
        if output.strip() == "done":
            return ActionResult(job_id=job_id, outcome="done")
        return ActionResult(job_id=job_id, outcome="skipped", detail=f"{output.strip()}, read as {expected}")


def parse_squeue(
    output: str, pool: PoolPolicy, policy: Policy, instance_type: str
) -> tuple[list[RunningJob], list[PendingJob]]:
    """The governed accounts' jobs in the output of :func:`squeue_command`, as planner jobs. The
    QoS ``<team>.<class>`` gives the priority; a borrow QoS job runs at priority 0. Slurm's
    restart count is the number of times a job was preempted (requeued); its time limit is the
    job's declared maximum run time (``--time``), which the planner's borrow horizon reads."""
    lines = output.splitlines()
    if not lines or lines[-1].strip() != END_OF_QUEUE:
        raise RuntimeError(
            f"squeue output ends without {END_OF_QUEUE!r}: more than SSM's 24,000 characters, or cut short; not planning on part of the queue"
        )
    shares = {s.name for s in pool.shares}
    weights = {p.name: p.weight for p in policy.priority_classes}
    running, pending = [], []
    for line in lines[:-1]:
        parts = line.strip().split("|", 9)
        if len(parts) != 10 or parts[1] not in shares:
            continue
        job_id, account, qos, state, nodes, start, submit, restarts, limit, reason = parts
        priority_class = qos.split(".", 1)[1] if qos.startswith(account + ".") else ""
        try:
            fields = dict(
                job_id=job_id,
                share=account,
                instance_type=instance_type,
                count=int(nodes),
                priority=weights.get(priority_class, 0),
                checkpointable=False,
                times_preempted=int(restarts),
                max_run_time_s=slurm_time_limit(limit),
            )
            if state == "RUNNING":
                running.append(RunningJob(started_at=_utc(start), **fields))
            elif reason not in NOT_STARTABLE:
                pending.append(PendingJob(submitted_at=_utc(submit), **fields))
        except ValueError as error:
            raise RuntimeError(f"squeue line {line!r}: {error}") from None
    return running, pending


# Time limits that are no limit, or none set: the job declares no run time.
NO_TIME_LIMIT = frozenset({"", "UNLIMITED", "INFINITE", "NOT_SET", "N/A", "NONE", "PARTITION_LIMIT"})
_SLURM_TIME = re.compile(r"(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?")


def slurm_time_limit(text: str) -> float | None:
    """Seconds of a Slurm time limit as squeue / scontrol / sacct print it or ``--time`` takes it:
    "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S"; None for no limit ("UNLIMITED", "NOT_SET",
    "Partition_Limit", ...). Anything else raises ValueError."""
    text = text.strip()
    if text.upper() in NO_TIME_LIMIT:
        return None
    match = _SLURM_TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"time limit {text!r} is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED)")
    days, a, b, c = (int(part) if part is not None else None for part in match.group("days", "a", "b", "c"))
    if days is None:  # M, M:S, H:M:S
        hours, minutes, seconds = (0, a, b or 0) if c is None else (a, b, c)
    else:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = a, b or 0, c or 0
    return float((((days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds)


def _utc(text: str) -> float:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))  # squeue_command asks for UTC
