"""Drive the real local Slurm (tests/slurm/slurm-up.sh): apply generated governance, submit
sleep jobs as tenant users, and read back what Slurm did."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from constructs_lib.model import GovernanceModel
from constructs_lib.slurm import slurm_plan
from gpu_governance_runtime.slurm import render_apply_script

from .models import NODE_MAP, POOL, governance_model

# The cluster users the test organisation's members map to.
MEMBER_USERS = {"alice", "bob", "carol", "dave"}

UP_HINT = "start it with `bash tests/slurm/slurm-up.sh` (as root), or run `make test-slurm`"
SUMMARY = re.compile(r"summary changed=(\d+) unchanged=(\d+) warnings=(\d+)")


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=check, timeout=120)


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
        self.data_root = Path("/var/lib/gpu-governance-slurm/tenant-data")
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

    def submit(self, user: str, *, account: str, partition: str, qos: str, gpus: int) -> str:
        result = run(
            "runuser", "-u", user, "--", "sbatch", "--parsable", f"--account={account}",
            f"--partition={partition}", f"--qos={qos}", f"--gres=gpu:{gpus}", "--chdir=/tmp",
            "--output=/dev/null", "--wrap", "sleep 600",
        )
        return result.stdout.strip().split(";")[0]

    def submit_refused(self, user: str, *, account: str, partition: str, qos: str, gpus: int) -> str:
        """Submit what Slurm must refuse; returns its error message."""
        result = run(
            "runuser", "-u", user, "--", "sbatch", f"--account={account}", f"--partition={partition}",
            f"--qos={qos}", f"--gres=gpu:{gpus}", "--chdir=/tmp", "--output=/dev/null", "--wrap", "sleep 600",
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

    def wait_for(self, job_id: str, what: str, predicate, timeout: float = 30) -> Job:
        """Poll until the scheduler has acted; fails with the job's last state, not a timing."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if predicate(job):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} never {what}: {job}")
            time.sleep(0.25)

    def wait_running(self, job_id: str) -> Job:
        return self.wait_for(job_id, "started", lambda j: j.state == "RUNNING")

    def wait_pending_for(self, job_id: str, reason: str) -> Job:
        return self.wait_for(job_id, f"pended for {reason}", lambda j: j.state == "PENDING" and j.reason == reason)

    def cancel_all(self) -> None:
        jobs = self._job_ids()
        if jobs:
            run("scancel", *jobs, check=False)
        deadline = time.monotonic() + 30
        while self._job_ids():
            assert time.monotonic() < deadline, f"jobs did not end: {self._job_ids()}"
            time.sleep(0.25)

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


def governed_cluster(directory: Path) -> "Cluster":
    """The running local Slurm with the test organisation applied and no jobs left."""
    require_running_slurm()
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
            result = subprocess.run(["sh", file.name], capture_output=True, text=True, timeout=60, env=HEAD_NODE_ENV, check=False)
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
