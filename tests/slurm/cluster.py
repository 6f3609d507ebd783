"""Drive the real local Slurm (tests/slurm/slurm-up.sh): apply generated governance, submit
sleep jobs as tenant users, and read back what Slurm did."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from constructs_lib.model import GovernanceModel
from constructs_lib.slurm import slurm_plan
from gpu_governance_runtime.slurm import render_apply_script

from .models import NODE_MAP, POOL, governance_model

# The cluster users the test organisation's members map to.
MEMBER_USERS = {"alice", "bob", "carol", "dave"}

STATE = Path("/var/lib/gpu-governance-slurm")  # slurm-up.sh's state directory
UP_HINT = "start it with `bash tests/slurm/slurm-up.sh` (as root), or run `make test-slurm`"
SUMMARY = re.compile(r"summary changed=(\d+) unchanged=(\d+) warnings=(\d+)")


# How long a test waits for Slurm to show a change: generous, since the suite runs on a machine
# doing other work, and the wait ends as soon as the change shows.
WAIT_SECONDS = 90.0

Reading = TypeVar("Reading")


def run(*command: str, check: bool = True, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, check=check, timeout=120, env={**os.environ, **env} if env else None
    )


def wait_until(
    what: str, read: Callable[[], Reading], ready: Callable[[Reading], bool], timeout: float = WAIT_SECONDS
) -> Reading:
    """Read until ``ready`` holds for a reading, and return that reading: the caller asserts on
    exactly what was waited for, never on a second, later read. Slurm shows a change in steps (a
    requeued job is COMPLETING or REQUEUED before PENDING; slurmdbd learns of a job after
    slurmctld, and can print its QoS as Unknown or lack its end for a while), so waiting for one
    field and then reading another races. Fails with the last reading, never on a timing."""
    deadline = time.monotonic() + timeout
    while True:
        reading = read()
        if ready(reading):
            return reading
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s; last seen: {reading}")
        time.sleep(0.25)


# What sacct prints for a field slurmdbd has not recorded (yet): no time, no node, or a QoS id it
# cannot name ("Unknown").
UNRECORDED = ("", "Unknown", "None", "None assigned")


@dataclass(frozen=True, kw_only=True)
class Accounting:
    text: str  # sacct --parsable2 output, header first
    rows: tuple[dict[str, str], ...]
    queued: int  # messages slurmctld had not yet sent slurmdbd just before sacct ran (sdiag)


def accounting(
    job_ids: Iterable[str], fields: Iterable[str], *, recorded: Iterable[str] | None = None, duplicates: bool = False
) -> Accounting:
    """The jobs' allocations as sacct reports them (times in UTC), once slurmdbd holds all of it:
    a row for every job, every ``recorded`` field (default: all of ``fields``) set in every row, and
    nothing queued in slurmctld for slurmdbd. slurmctld sends job records to slurmdbd on its own
    agent thread, so right after a job ends sacct may not have its end, its state or its QoS yet.
    ``duplicates``: every run of a requeued job, each its own record."""
    ids, fields = list(job_ids), ["JobID", *(f for f in fields if f != "JobID")]
    required = list(recorded) if recorded is not None else fields

    def read() -> Accounting:
        queued = int(re.search(r"DBD Agent queue size: (\d+)", run("sdiag").stdout)[1])
        text = run(
            "sacct",
            "--allusers",
            "--allocations",
            "--parsable2",
            *(["--duplicates"] if duplicates else []),
            "--format=" + ",".join(fields),
            "-j",
            ",".join(ids),
            env={"TZ": "UTC"},
        ).stdout
        header, *lines = text.splitlines()
        return Accounting(
            text=text,
            rows=tuple(dict(zip(header.split("|"), line.split("|"), strict=False)) for line in lines),
            queued=queued,
        )

    def complete(seen: Accounting) -> bool:
        return (
            seen.queued == 0
            and {row["JobID"] for row in seen.rows} >= set(ids)
            and all(row[field] not in UNRECORDED for row in seen.rows for field in required)
        )

    return wait_until(f"slurmdbd's records of jobs {ids} with {required}", read, complete)


@dataclass(frozen=True, kw_only=True)
class Applied:
    output: str
    changed: int
    warnings: int


@dataclass(frozen=True, kw_only=True)
class Job:
    id: str
    state: str
    reason: str
    nodes: str
    restarts: int


class Cluster:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        # Beside the cluster's state (slurm-up.sh), where tenants can traverse to their directory.
        self.data_root = STATE / "tenant-data"
        self.node_map = workdir / "node-map"
        self.node_map.write_text("".join(f"{group} {node}\n" for group, node in NODE_MAP.items()))

    def apply(self, model: GovernanceModel, *flags: str) -> Applied:
        script = self.workdir / "apply.sh"
        script.write_text(render_apply_script(slurm_plan(model, POOL, data_root=str(self.data_root))))
        result = subprocess.run(
            ["bash", str(script), *flags],
            capture_output=True,
            text=True,
            timeout=300,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "GG_NODE_MAP": str(self.node_map)},
        )
        assert result.returncode == 0, f"apply failed:\n{result.stdout}\n{result.stderr}"
        summary = SUMMARY.search(result.stdout)
        assert summary, result.stdout
        return Applied(output=result.stdout, changed=int(summary[1]), warnings=int(summary[3]))

    def submit(
        self, user: str, *, account: str, partition: str, qos: str, gpus: int, minutes: int | None = None
    ) -> str:
        """``minutes``: the job's time limit (--time), which Slurm counts against a GrpTRESMins limit before it starts the job."""
        result = run(
            "runuser",
            "-u",
            user,
            "--",
            "sbatch",
            "--parsable",
            f"--account={account}",
            f"--partition={partition}",
            f"--qos={qos}",
            f"--gres=gpu:{gpus}",
            *([f"--time={minutes}"] if minutes else []),
            "--chdir=/tmp",
            "--output=/dev/null",
            "--wrap",
            "sleep 600",
        )
        return result.stdout.strip().split(";")[0]

    def submit_refused(
        self, user: str, *, account: str, partition: str, qos: str, gpus: int, minutes: int | None = None
    ) -> str:
        """Submit what Slurm must refuse; returns its error message."""
        result = run(
            "runuser",
            "-u",
            user,
            "--",
            "sbatch",
            f"--account={account}",
            f"--partition={partition}",
            f"--qos={qos}",
            f"--gres=gpu:{gpus}",
            *([f"--time={minutes}"] if minutes else []),
            "--chdir=/tmp",
            "--output=/dev/null",
            "--wrap",
            "sleep 600",
            check=False,
        )
        assert result.returncode != 0, f"sbatch accepted the job: {result.stdout}"
        return result.stderr

    def job(self, job_id: str) -> Job:
        fields = dict(
            pair.split("=", 1) for pair in run("scontrol", "-o", "show", "job", job_id).stdout.split() if "=" in pair
        )
        return Job(
            id=job_id,
            state=fields["JobState"],
            reason=fields["Reason"],
            nodes=fields["NodeList"],
            restarts=int(fields["Restarts"]),
        )

    def wait_for(self, job_id: str, what: str, predicate: Callable[[Job], bool]) -> Job:
        """The job as scontrol shows it once the scheduler has acted (see :func:`wait_until`)."""
        return wait_until(f"job {job_id} {what}", lambda: self.job(job_id), predicate)

    def wait_running(self, job_id: str) -> Job:
        return self.wait_for(job_id, "started", lambda j: j.state == "RUNNING")

    def wait_pending_for(self, job_id: str, reason: str) -> Job:
        return self.wait_for(job_id, f"pended for {reason}", lambda j: j.state == "PENDING" and j.reason == reason)

    def wait_requeued(self, job_id: str) -> Job:
        """Back in the queue once: requeued and PENDING, past COMPLETING and REQUEUED."""
        return self.wait_for(job_id, "requeued", lambda j: j.state == "PENDING" and j.restarts == 1)

    def cancel_all(self) -> None:
        """No job left, in slurmctld nor in slurmdbd: sacctmgr refuses to remove an account that
        slurmdbd still sees running jobs in, and usage read from accounting would count them."""
        jobs = self._job_ids()
        if jobs:
            run("scancel", *jobs, check=False)
        wait_until("every job ended", self._job_ids, lambda left: not left)
        if jobs:
            accounting(jobs, ["State", "End"])

    def _job_ids(self) -> list[str]:
        return run("squeue", "-h", "-o", "%i").stdout.split()

    def accounting(self) -> str:
        """Everything the apply script manages in slurmdbd, as sacctmgr prints it."""
        return "\n".join(
            run("sacctmgr", "-n", "-P", "show", *what).stdout
            for what in (
                ("assoc", "format=account,user,parentname,fairshare,qos,defaultqos,grptres"),
                ("qos", "format=name,priority,preempt,grptres,description"),
            )
        )


def require_running_slurm() -> None:
    """The suite fails (never skips) when Slurm is not up: it was selected to prove something."""
    missing = [tool for tool in ("sbatch", "sacctmgr", "scontrol", "runuser") if shutil.which(tool) is None]
    assert not missing, f"Slurm tools {missing} are not installed; {UP_HINT}"
    for command in (("scontrol", "ping"), ("sacctmgr", "-n", "list", "cluster")):
        result = run(*command, check=False)
        assert result.returncode == 0 and "DOWN" not in result.stdout, (
            f"`{' '.join(command)}` failed ({result.stdout.strip()} {result.stderr.strip()}); {UP_HINT}"
        )


def ensure_os_users(names: set[str]) -> None:
    """Tenant logins exist before governance is applied (on HyperPod, the identity source or
    the add-users lifecycle step creates them)."""
    for name in sorted(names):
        if run("id", "-u", name, check=False).returncode != 0:
            run("useradd", "--create-home", name)


# Held, once taken, until this test process ends (the kernel drops the lock with the process).
_held: list = []


def hold_the_cluster(timeout: float = 900) -> None:
    """One test run at a time on the machine's one cluster: a second run's cancel_all and
    re-applied governance would cancel this run's jobs and remove its partitions under it (seen
    with two engineers' runs on one machine). Waits for the other run to end, bounded."""
    if _held:
        return
    lock = open(STATE / "test-suite.lock", "a+")  # noqa: SIM115 - held open until the process ends: it is the lock
    wait_until(
        "the cluster free of another test run",
        lambda: _other_holder(lock),
        lambda holder: holder is None,
        timeout=timeout,
    )
    lock.truncate(0)
    lock.write(f"pid {os.getpid()}\n")
    lock.flush()
    _held.append(lock)


def _other_holder(lock) -> str | None:
    """None once this process holds the lock; else who does, as the holder wrote it."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        lock.seek(0)
        return lock.read().strip() or "a run that has not written its pid yet"


def governed_cluster(directory: Path) -> Cluster:
    """The running local Slurm, this run's alone, with the test organisation applied and no jobs left."""
    require_running_slurm()
    hold_the_cluster()
    ensure_os_users(MEMBER_USERS)
    cluster = Cluster(directory)
    cluster.cancel_all()
    cluster.apply(governance_model())
    return cluster


HEAD_NODE = "i-0123456789abcdef0"
SSM_OUTPUT_LIMIT = 24_000  # GetCommandInvocation returns the first 24,000 characters of stdout
# A head node whose clock is not in UTC and whose environment asks for relative times: the
# adapter's commands must read the queue correctly all the same.
HEAD_NODE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TZ": "Asia/Kolkata", "SLURM_TIME_FORMAT": "relative"}


class LocalRunCommand:
    """SSM Run Command, `AWS-RunShellScript` on the head node, run on this machine instead: like
    the SSM agent's aws:runShellScript plugin it writes the commands to a script and runs it with
    `sh`, and it reports like GetCommandInvocation (Success on exit 0, else Failed; the first
    24,000 characters of output)."""

    def __init__(self) -> None:
        self.invocations: dict[str, dict] = {}
        self.scripts: list[str] = []

    def send_command(self, *, InstanceIds, DocumentName, Parameters, Comment, TimeoutSeconds):
        assert (InstanceIds, DocumentName) == ([HEAD_NODE], "AWS-RunShellScript")
        assert TimeoutSeconds >= 30 and Parameters["executionTimeout"]  # never a command that may run an hour late
        script = "\n".join(Parameters["commands"])
        self.scripts.append(script)
        with tempfile.NamedTemporaryFile("w", suffix=".sh") as file:
            file.write(script + "\n")
            file.flush()
            result = subprocess.run(
                ["sh", file.name], capture_output=True, text=True, timeout=60, env=HEAD_NODE_ENV, check=False
            )
        command_id = str(uuid.uuid4())
        self.invocations[command_id] = {
            "Status": "Success" if result.returncode == 0 else "Failed",
            "StandardOutputContent": result.stdout[:SSM_OUTPUT_LIMIT],
            "StandardErrorContent": result.stderr[:8_000],
        }
        return {"Command": {"CommandId": command_id}}

    def get_command_invocation(self, *, CommandId, InstanceId):
        assert InstanceId == HEAD_NODE
        return self.invocations[CommandId]
