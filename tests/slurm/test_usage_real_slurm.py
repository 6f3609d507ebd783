"""Slurm usage from the real local Slurm's accounting (tests/slurm/slurm-up.sh, make test-slurm).

Jobs run under the governed accounts: on a team's own node, borrowing a lender's node under the
borrow QoS, and one requeued part-way (its first run is a separate accounting record). The
controller's own command runs here as SSM would run it on the head node (in `sh`, with a head
node's odd time zone and time format), and its instance-hours must equal the jobs' GPU-seconds
as sacct reports them per run. The ledger runs on moto's DynamoDB (a stand-in for AWS only).

Accounting lag: sacct reads the job records slurmctld sends slurmdbd as jobs start and end (no
rollup, unlike sreport), so the test waits until every run's record has the fields it reads and
sdiag shows nothing queued for slurmdbd (``cluster.accounting``); the observer itself refuses to
read while something is.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from constructs_lib.model.policy import compile_policy  # noqa: E402
from gpu_governance_runtime.backends.hyperpod_slurm.usage import (  # noqa: E402
    HOUR,
    LOOKBACK_HOURS,
    SETTLE_SECONDS,
    SlurmUsageObserver,
    accounting_command,
    parse_accounting,
    share_hours,
)
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.contract import BORROWED_HOURS, LENT_HOURS, RECLAIM_NAMESPACE, USED_HOURS  # noqa: E402
from gpu_governance_runtime.policy import parse_policy  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402

from .cluster import Cluster, accounting, run  # noqa: E402
from .models import GPUS_PER_NODE, INSTANCE_TYPE, POOL, governance_model  # noqa: E402

pytestmark = pytest.mark.slurm

POLICY = parse_policy(compile_policy(governance_model()))
TEAMS = ("burst", "critical", "steady")
HEAD_NODE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TZ": "Asia/Kolkata", "SLURM_TIME_FORMAT": "relative"}
METRICS = (USED_HOURS, BORROWED_HOURS, LENT_HOURS)


def head_node(commands: list[str]) -> str:
    """SSM Run Command's AWS-RunShellScript, run here: the commands as one `sh` script."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as file:
        file.write("\n".join(commands) + "\n")
        file.flush()
        result = subprocess.run(
            ["sh", file.name], capture_output=True, text=True, timeout=60, env=HEAD_NODE_ENV, check=False
        )
    assert result.returncode == 0, result.stderr
    return result.stdout[:24_000]


def sbatch(user: str, team: str, qos_class: str, *, partition: str | None = None, gpus: int, seconds: int) -> str:
    return (
        run(
            "runuser",
            "-u",
            user,
            "--",
            "sbatch",
            "--parsable",
            f"--account={team}",
            f"--partition={partition or team}",
            f"--qos={team}.{qos_class}",
            f"--gres=gpu:{gpus}",
            "--chdir=/tmp",
            "--output=/dev/null",
            "--wrap",
            f"sleep {seconds}",
        )
        .stdout.strip()
        .split(";")[0]
    )


def runs(job_ids: list[str]) -> tuple[dict[str, str], ...]:
    """Every run of the jobs (a requeued job's earlier ones too), once slurmdbd has recorded each
    one's end. A run cancelled while it waited holds no node nor GPU, so those may be empty."""
    return accounting(
        job_ids,
        ["Account", "Partition", "NodeList", "ElapsedRaw", "AllocTRES", "State", "End"],
        recorded=["Account", "Partition", "ElapsedRaw", "State", "End"],
        duplicates=True,
    ).rows


def gpus(tres: str) -> int:
    return next((int(item.split("=")[1]) for item in tres.split(",") if item.startswith("gres/gpu=")), 0)


def test_emitted_instance_hours_are_the_jobs_gpu_seconds(cluster: Cluster) -> None:
    cluster.cancel_all()
    time.sleep(1.1)  # jobs cancelled just now end before the measured window
    start = int(time.time())
    own = sbatch("carol", "burst", "low", gpus=4, seconds=12)  # fills burst's node gpu-3
    assert cluster.wait_running(own).nodes == "gpu-3"
    borrower = sbatch("dave", "burst", "borrow", partition="borrow", gpus=2, seconds=6)
    assert cluster.wait_running(borrower).nodes == "gpu-2"  # steady's lent node, under burst.borrow
    short = sbatch("alice", "critical", "low", gpus=2, seconds=4)
    requeued = sbatch("alice", "critical", "urgent", gpus=2, seconds=600)
    cluster.wait_running(short)
    cluster.wait_running(requeued)
    time.sleep(3)
    run("scontrol", "requeue", requeued)  # its first run ends here; it then waits (BeginTime) and is cancelled
    cluster.wait_requeued(requeued)
    run("scancel", requeued)
    recorded = runs([own, borrower, short, requeued])
    end = int(time.time()) + 1

    # what the jobs held, from sacct's own per-run figures (GPUs x elapsed seconds)
    held = {t: dict.fromkeys(METRICS, 0.0) for t in TEAMS}
    for record in recorded:
        hours = gpus(record["AllocTRES"]) * int(record["ElapsedRaw"]) / GPUS_PER_NODE / HOUR
        held[record["Account"]][USED_HOURS] += hours
        if record["Partition"] == "borrow":
            held[record["Account"]][BORROWED_HOURS] += hours
            held["steady"][LENT_HOURS] += hours
    assert sum(r["State"] == "REQUEUED" for r in recorded) == 1 and held["steady"][LENT_HOURS] > 0

    # the controller's command over exactly [start, end): the same figures
    accounting = parse_accounting(head_node([accounting_command(TEAMS, start, end)]), TEAMS)
    assert accounting.node_owners == {"gpu-1": "critical", "gpu-2": "steady", "gpu-3": "burst"}
    measured = {
        r.share: r
        for r in share_hours(
            accounting, [start], pool=POLICY.pool(POOL), instance_type=INSTANCE_TYPE, gpus_per_instance=GPUS_PER_NODE
        )[start]
    }
    for team in TEAMS:
        row = measured[team]
        assert (row.in_use, row.borrowed, row.lent) == pytest.approx(tuple(held[team][m] for m in METRICS), abs=1e-9), (
            team
        )

    # the observer, on a clock an hour later: the jobs' hour(s) published once, with what ran before them that hour
    first, last = start // HOUR * HOUR, end // HOUR * HOUR
    before = {
        r.share: r
        for r in share_hours(
            parse_accounting(head_node([accounting_command(TEAMS, first, start)]), TEAMS),
            [first],
            pool=POLICY.pool(POOL),
            instance_type=INSTANCE_TYPE,
            gpus_per_instance=GPUS_PER_NODE,
        )[first]
    }
    with reclaim_ledger_table() as table:
        records: list = []

        def observe() -> list[int]:
            seen = {
                (POOL, first - i * HOUR) for i in range(1, LOOKBACK_HOURS)
            }  # a container that published the older hours
            return SlurmUsageObserver(
                head_node,
                pool=POLICY.pool(POOL),
                instance_type=INSTANCE_TYPE,
                gpus_per_instance=GPUS_PER_NODE,
                ledger=Ledger(table),
                namespace=RECLAIM_NAMESPACE,
                emit=records.append,
                published=seen,
            ).observe(last + HOUR + SETTLE_SECONDS)

        assert observe() == list(range(first, last + HOUR, HOUR))
        assert observe() == []  # a second container: the ledger's claims stop a second copy
    published = {t: dict.fromkeys(METRICS, 0.0) for t in TEAMS}
    for record in records:
        for metric in METRICS:
            published[record["Share"]][metric] += record[metric]
    for team in TEAMS:
        earlier = (before[team].in_use, before[team].borrowed, before[team].lent)
        assert tuple(published[team][m] for m in METRICS) == pytest.approx(
            tuple(e + held[team][m] for e, m in zip(earlier, METRICS, strict=False)), abs=1e-9
        ), team
