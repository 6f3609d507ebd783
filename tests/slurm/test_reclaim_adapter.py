"""The reclaim controller's Slurm adapter against the real local Slurm (tests/slurm/slurm-up.sh)
with the generated governance applied. Only the transport is replaced: the adapter's own shell
commands run here, the way SSM Run Command runs them on the head node, instead of over SSM.
The ledger runs on moto's DynamoDB (a stand-in for AWS only).

Slurm's own QoS preemption of borrowing jobs is switched off for this module (an hour's
`PreemptExemptTime` on the borrow QoS, removed afterwards), so every requeue seen here is the
controller's: the case of a cluster whose running slurmctld does not preempt yet (the apply
script warns rather than restart it), and the proof that the controller alone reclaims.

Nodes: gpu-1 is team critical's (reserve), gpu-2 team steady's (lend), gpu-3 team burst's (lend
and borrow); partition `borrow` spans gpu-2 and gpu-3.
"""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from constructs_lib.model.policy import compile_policy  # noqa: E402
from gpu_governance_runtime.backends.hyperpod_slurm.adapter import SlurmAdapter  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.planners.reclaim import PoolState, Settings, plan_tick  # noqa: E402
from gpu_governance_runtime.policy import parse_policy  # noqa: E402
from gpu_governance_runtime.reclaim.handler import TickResult, run_tick  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402

from .cluster import HEAD_NODE, Cluster, LocalRunCommand, governed_cluster, run  # noqa: E402
from .models import INSTANCE_TYPE, POOL, governance_model  # noqa: E402

pytestmark = pytest.mark.slurm

BORROW_QOS = "burst.borrow"


POLICY = parse_policy(compile_policy(governance_model()))


def adapter(transport: LocalRunCommand, kind: type[SlurmAdapter] = SlurmAdapter) -> SlurmAdapter:
    return kind(
        transport,
        instance_id=HEAD_NODE,
        instance_type=INSTANCE_TYPE,
        pool=POLICY.pool(POOL),
        policy=POLICY,
        sleep=lambda seconds: None,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    cluster = governed_cluster(tmp_path_factory.mktemp("slurm-reclaim"))
    # Slurm's own reclaim off: a borrow job is exempt from QoS preemption for an hour (this
    # leaves the generated preempt lists alone; `scontrol requeue` ignores the exemption).
    run("sacctmgr", "-i", "modify", "qos", "where", f"name={BORROW_QOS}", "set", "PreemptExemptTime=01:00:00")
    yield cluster
    cluster.cancel_all()
    run("sacctmgr", "-i", "modify", "qos", "where", f"name={BORROW_QOS}", "set", "PreemptExemptTime=-1")
    exempt = run("sacctmgr", "-n", "-P", "show", "qos", BORROW_QOS, "format=preemptexempttime").stdout.strip()
    assert exempt == "", f"{BORROW_QOS} is still exempt from preemption: {exempt}"


@pytest.fixture
def idle(cluster: Cluster) -> Cluster:
    cluster.cancel_all()
    yield cluster
    cluster.cancel_all()


@pytest.fixture
def ledger():
    with reclaim_ledger_table() as table:
        yield table


def submit(
    cluster: Cluster, user: str, team: str, qos_class: str, *, partition: str | None = None, gpus: int = 4
) -> str:
    qos = f"{team}.{qos_class}"
    return cluster.submit(user, account=team, partition=partition or team, qos=qos, gpus=gpus)


def tick(slurm: SlurmAdapter, table, records: list) -> TickResult:
    """One controller tick, acting (not a dry run), as the Lambda function runs it."""
    return run_tick(
        POOL,
        slurm,
        Ledger(table),
        settings=Settings(),
        dry_run=False,
        namespace="Test",
        now=time.time(),
        emit=records.append,
    )


def events(records: list, kind: str) -> list[dict]:
    return [r for r in records if r.get("event") == kind]


def lender_waits_on_its_lent_node(cluster: Cluster) -> tuple[str, str, str]:
    """burst runs on its own node and borrows steady's idle one; then steady submits."""
    own = cluster.wait_running(submit(cluster, "carol", "burst", "low"))
    borrower = cluster.wait_running(submit(cluster, "carol", "burst", "borrow", partition="borrow"))
    assert (own.nodes, borrower.nodes) == ("gpu-3", "gpu-2")
    lender = cluster.wait_pending_for(submit(cluster, "bob", "steady", "low"), "Resources")
    return own.id, borrower.id, lender.id


def test_the_adapter_reads_the_real_queue_into_planner_jobs(idle: Cluster) -> None:
    before = int(time.time())
    urgent = idle.wait_running(submit(idle, "alice", "critical", "urgent"))
    own = idle.wait_running(submit(idle, "carol", "burst", "low"))
    borrower = idle.wait_running(submit(idle, "carol", "burst", "borrow", partition="borrow", gpus=2))
    waiting = idle.wait_pending_for(submit(idle, "dave", "burst", "low"), "Resources")
    held = run(
        "runuser",
        "-u",
        "bob",
        "--",
        "sbatch",
        "--parsable",
        "--hold",
        "--account=steady",
        "--partition=steady",
        "--qos=steady.urgent",
        "--gres=gpu:4",
        "--chdir=/tmp",
        "--output=/dev/null",
        "--wrap",
        "sleep 600",
    ).stdout.strip()
    outsider = run(
        "sbatch",
        "--parsable",
        "--hold",
        "--account=root",
        "--partition=all",
        "--chdir=/tmp",
        "--output=/dev/null",
        "--wrap",
        "sleep 600",
    ).stdout.strip()
    after = time.time()

    state = adapter(LocalRunCommand()).read(time.time())

    running = {j.job_id: (j.share, j.priority, j.count, j.instance_type, j.times_preempted) for j in state.running}
    assert running == {
        urgent.id: ("critical", 90, 1, INSTANCE_TYPE, 0),  # QoS critical.urgent: the class weight
        own.id: ("burst", 10, 1, INSTANCE_TYPE, 0),
        borrower.id: ("burst", 0, 1, INSTANCE_TYPE, 0),  # 2 of 4 GPUs still hold one instance; borrow QoS = 0
    }
    assert all(before - 1 <= j.started_at <= after + 1 for j in state.running), [j.started_at for j in state.running]
    # The held job cannot start whatever is freed, so it is not planned (it would reclaim the
    # borrower for nothing); the root job is not a governed team's.
    assert {j.job_id: (j.share, j.priority, j.count) for j in state.pending} == {waiting.id: ("burst", 10, 1)}
    assert before - 1 <= state.pending[0].submitted_at <= after + 1
    assert held and outsider
    # What the planner makes of it: burst's low job replaces burst's own priority-0 borrower
    # (in-share preemption is on for burst); the held job reclaims nothing.
    plan = plan_tick(state, Settings())
    assert [(p.job_id, p.for_job, p.kind) for p in plan.preemptions] == [(borrower.id, waiting.id, "in_share")]


def test_a_tick_requeues_the_borrower_and_the_lender_starts(idle: Cluster, ledger) -> None:
    own, borrower, lender = lender_waits_on_its_lent_node(idle)
    records: list = []
    result = tick(adapter(LocalRunCommand()), ledger, records)

    (preemption,) = events(records, "preemption")
    assert (preemption["job_id"], preemption["for_job"], preemption["kind"], preemption["outcome"]) == (
        borrower,
        lender,
        "reclaim",
        "done",
    )
    assert "lent by team steady to team burst" in preemption["reason"]
    assert (result.preemptions, result.acted, result.failed) == (1, 1, 0)
    started = idle.wait_running(lender)
    assert started.nodes == "gpu-2"  # the node the borrower gave back
    idle.wait_requeued(borrower)
    assert (idle.job(own).state, idle.job(own).restarts) == ("RUNNING", 0)  # burst's own job untouched
    (item,) = [i for i in ledger.scan()["Items"] if "job_id" in i]  # beside the pool's open-actions item
    assert (item["job_id"], item["action"], item["status"]) == (borrower, "preempt", "done")


def test_a_second_tick_preempts_nothing_more(idle: Cluster, ledger) -> None:
    own, borrower, lender = lender_waits_on_its_lent_node(idle)
    tick(adapter(LocalRunCommand()), ledger, [])
    idle.wait_running(lender)
    idle.wait_requeued(borrower)

    records: list = []
    again = tick(adapter(LocalRunCommand()), ledger, records)

    assert (again.preemptions, again.acted, again.failed) == (0, 0, 0)
    assert events(records, "preemption") == []
    assert [(j.state, j.restarts) for j in map(idle.job, (own, borrower, lender))] == [
        ("RUNNING", 0),
        ("PENDING", 1),
        ("RUNNING", 0),
    ]
    assert (
        len([i for i in ledger.scan()["Items"] if "job_id" in i]) == 1
    )  # only the first tick's requeue was ever claimed


class VictimEndsAfterRead(SlurmAdapter):
    """The borrower ends (here: is cancelled) between the controller's read and its act."""

    victim = ""

    def read(self, now: float) -> PoolState:
        state = super().read(now)
        run("scancel", self.victim)
        deadline = time.monotonic() + 30
        while run("squeue", "-h", "-j", self.victim, "-O", "State:0").stdout.strip():  # until squeue lists it no more
            assert time.monotonic() < deadline, f"job {self.victim} did not end"
            time.sleep(0.25)
        return state


def test_a_victim_that_ended_between_read_and_act_is_skipped_without_error(idle: Cluster, ledger) -> None:
    _, borrower, lender = lender_waits_on_its_lent_node(idle)
    slurm = adapter(LocalRunCommand(), VictimEndsAfterRead)
    slurm.victim = borrower
    records: list = []
    result = tick(slurm, ledger, records)

    (preemption,) = events(records, "preemption")
    assert (preemption["job_id"], preemption["outcome"]) == (borrower, "skipped")
    assert (result.acted, result.failed) == (0, 0)
    assert idle.job(borrower).restarts == 0  # never requeued: it had ended
    (item,) = [i for i in ledger.scan()["Items"] if "job_id" in i]  # beside the pool's open-actions item
    assert item["status"] == "skipped" and "gone" in item["detail"]
    (start,) = events(records, "start")
    assert (start["job_id"], start["outcome"]) == (lender, "left_to_scheduler")
    assert idle.wait_running(lender).nodes == "gpu-2"


def test_a_borrowing_start_is_moved_onto_the_borrow_partition(idle: Cluster, ledger) -> None:
    idle.wait_running(submit(idle, "carol", "burst", "low"))
    waiting = idle.wait_pending_for(submit(idle, "dave", "burst", "low"), "Resources")  # own node busy
    records: list = []
    tick(adapter(LocalRunCommand()), ledger, records)

    (start,) = events(records, "start")
    assert (start["job_id"], start["borrowed"], start["outcome"]) == (waiting.id, 1, "done")
    moved = idle.wait_running(waiting.id)
    assert moved.nodes == "gpu-2"  # steady's idle, lent node
    fields = run("squeue", "-h", "-j", waiting.id, "-O", "Partition:0|,QOS:0").stdout.strip()
    assert fields == "borrow|burst.borrow"


def test_the_adapter_reads_each_jobs_time_limit_as_its_declared_run_time(idle: Cluster) -> None:
    jobs = {}
    # minutes; D-H:M:S; M:S (1 GPU each, running); none (the partition has no limit), 2 GPUs: it waits
    # for the one GPU left, since Slurm's backfill scheduler gives a job without a limit that it
    # starts in such a partition 365 days (sched/backfill, YEAR_MINUTES): not a limit the job declared.
    for limit, gpus in (("90", 1), ("1-02:03:04", 1), ("45:30", 1), (None, 2)):
        jobs[limit] = (
            run(
                "runuser",
                "-u",
                "carol",
                "--",
                "sbatch",
                "--parsable",
                "--account=burst",
                "--partition=burst",
                "--qos=burst.low",
                f"--gres=gpu:{gpus}",
                *([f"--time={limit}"] if limit else []),
                "--chdir=/tmp",
                "--output=/dev/null",
                "--wrap",
                "sleep 600",
            )
            .stdout.strip()
            .split(";")[0]
        )
    for limit in ("90", "1-02:03:04", "45:30"):
        idle.wait_running(jobs[limit])
    idle.wait_pending_for(jobs[None], "Resources")

    state = adapter(LocalRunCommand()).read(time.time())

    declared = {j.job_id: j.max_run_time_s for j in (*state.running, *state.pending)}
    # Slurm keeps limits in whole minutes, rounding up: 1-02:03:04 is printed 1-02:04:00, 45:30 is 46:00
    assert declared == {jobs["90"]: 5_400, jobs["1-02:03:04"]: 93_840, jobs["45:30"]: 2_760, jobs[None]: None}
