"""Slurm usage from accounting (gpu_governance_runtime.backends.hyperpod_slurm.usage), without a cluster.

The head node is replaced by stand-in `sinfo`, `sdiag` and `sacct` programs that print what the
real ones print (the shapes recorded on tests/slurm/slurm-up.sh's Slurm 22.05); the controller's
command itself runs in `sh`, with the awk a HyperPod head node has (mawk) when installed here and
gawk. The ledger runs on moto's DynamoDB (a stand-in for AWS only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from constructs_lib.model.policy import compile_policy  # noqa: E402
from gpu_governance_runtime.backends.hyperpod_slurm import usage as slurm_usage  # noqa: E402
from gpu_governance_runtime.backends.hyperpod_slurm.adapter import SlurmAdapter  # noqa: E402
from gpu_governance_runtime.backends.hyperpod_slurm.usage import (  # noqa: E402
    END_OF_USAGE,
    HOUR,
    HOURS_PER_COMMAND,
    LOOKBACK_HOURS,
    SETTLE_SECONDS,
    SlurmUsageObserver,
    accounting_command,
    expand_hostlist,
)
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.contract import (  # noqa: E402
    BORROWED_HOURS,
    GUARANTEED_HOURS,
    LENT_HOURS,
    RECLAIM_NAMESPACE,
    SHARE_DIMENSIONS,
    USAGE_METRICS,
    USED_HOURS,
)
from gpu_governance_runtime.policy import parse_policy  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402

from .models import GPUS_PER_NODE, INSTANCE_TYPE, POOL, governance_model  # noqa: E402

POLICY = parse_policy(compile_policy(governance_model()))
TEAMS = ("burst", "critical", "steady")
H = (
    int(time.time()) // HOUR - 3
) * HOUR  # an hour start: settled, with the next one, on the real clock (the handler reads it)
# What `sinfo --noheader --all --format='partition|%R|%N'` prints on the governed test cluster.
SINFO = "partition|all|gpu-[1-3]\npartition|critical|gpu-1\npartition|steady|gpu-2\npartition|burst|gpu-3\npartition|borrow|gpu-[2-3]\n"
SDIAG = "*******************************************************\nServer thread count:  3\nAgent queue size:     0\nDBD Agent queue size: {queue}\n\nJobs submitted: 0\n"


@dataclass(frozen=True)
class Job:
    """One sacct line (Account|Partition|AllocTRES|NodeList|Start|End) and who it should count for."""

    account: str
    partition: str
    tres: str
    nodes: str
    start: str
    end: str
    gpus: int = 0
    borrowed_share: float = 0.0  # the part of its time on other teams' nodes
    lenders: tuple[tuple[str, float], ...] = ()  # (team, part of its time on that team's nodes)

    def line(self) -> str:
        return "|".join((self.account, self.partition, self.tres, self.nodes, self.start, self.end))


def tres(gpus: int, nodes: int = 1, typed: str = "") -> str:
    return f"billing=1,cpu=1,gres/gpu={gpus}{f',gres/gpu:{typed}={gpus}' if typed else ''},node={nodes}"


JOBS = [
    # own partition, across the hour's start: only its part within the hour counts
    Job("critical", "critical", tres(4), "gpu-1", str(H - 600), str(H + 1800), gpus=4),
    # a requeued job: its first run (REQUEUED, --duplicates lists it) and its second, still running
    Job("burst", "burst", tres(2), "gpu-3", str(H + 100), str(H + 400), gpus=2),
    Job("burst", "burst", tres(2), "gpu-3", str(H + 500), "Unknown", gpus=2),
    # cancelled before it started: no start, no GPUs
    Job("burst", "borrow", "", "None assigned", "None", str(H + 700)),
    Job("steady", "steady", "", "None assigned", str(H + 800), str(H + 800)),
    # borrowing steady's node under burst.borrow
    Job(
        "burst",
        "borrow",
        tres(4),
        "gpu-2",
        str(H + 1000),
        str(H + 2800),
        gpus=4,
        borrowed_share=1.0,
        lenders=(("steady", 1.0),),
    ),
    # borrowing on its own lent node: its own use, nothing borrowed or lent
    Job("burst", "borrow", tres(1), "gpu-3", str(H + 1200), str(H + 1500), gpus=1),
    # two nodes, one its own and one steady's; typed GPUs beside the total
    Job(
        "burst",
        "borrow",
        tres(8, 2, "a10g"),
        "gpu-[2-3]",
        str(H + 3000),
        str(H + 3600 + 900),
        gpus=8,
        borrowed_share=0.5,
        lenders=(("steady", 0.5),),
    ),
]


def overlap(job: Job, start: int, end: int) -> int:
    if not job.start.isdigit():
        return 0
    job_end = int(job.end) if job.end.isdigit() else end
    return max(0, min(job_end, end) - max(int(job.start), start))


def expected(hour: int) -> dict[str, dict[str, float]]:
    """Per team, each usage metric's instance-hours in the hour, from the jobs' own figures."""
    figures = {t: {USED_HOURS: 0.0, GUARANTEED_HOURS: 1.0, BORROWED_HOURS: 0.0, LENT_HOURS: 0.0} for t in TEAMS}
    for job in JOBS:
        hours = job.gpus * overlap(job, hour, hour + HOUR) / GPUS_PER_NODE / HOUR
        figures[job.account][USED_HOURS] += hours
        figures[job.account][BORROWED_HOURS] += hours * job.borrowed_share
        for lender, part in job.lenders:
            figures[lender][LENT_HOURS] += hours * part
    return figures


AWKS = [path for path in (shutil.which("mawk"), shutil.which("gawk")) if path]


@pytest.fixture(params=AWKS, ids=lambda path: Path(path).name)
def head_node(request, tmp_path):
    """Runs commands as SSM's AWS-RunShellScript would, against stand-in Slurm programs."""
    return HeadNode(tmp_path, awk=request.param)


class HeadNode:
    def __init__(self, directory: Path, *, awk: str, jobs: list[Job] = JOBS):
        self.bin = directory / "bin"
        self.bin.mkdir()
        self.sacct_arguments = directory / "sacct-arguments"
        self.dbd_queue, self.fail = 0, False
        self.commands: list[str] = []
        os.symlink(awk, self.bin / "awk")
        self.program("sinfo", SINFO)
        (directory / "sacct.out").write_text("".join(j.line() + "\n" for j in jobs))
        self.program("sacct", f'echo "$@" > {self.sacct_arguments}; cat {directory / "sacct.out"}')

    def program(self, name: str, output_or_script: str) -> None:
        path = self.bin / name
        body = output_or_script if name == "sacct" else f"cat <<'EOF'\n{output_or_script}EOF"
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def run(self, commands: list[str]) -> str:
        self.commands += commands
        self.program("sdiag", SDIAG.format(queue=self.dbd_queue))
        if self.fail:
            raise RuntimeError("SSM command on i-0123: TimedOut")
        result = subprocess.run(
            ["sh", "-c", "\n".join(commands)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={"PATH": f"{self.bin}:/usr/bin:/bin", "TZ": "Asia/Kolkata", "SLURM_TIME_FORMAT": "relative"},
        )
        return result.stdout[:24_000]


@pytest.fixture
def ledger():
    with reclaim_ledger_table() as table:
        yield Ledger(table)


def observer(head_node: HeadNode, ledger: Ledger, records: list, published: set | None = None) -> SlurmUsageObserver:
    return SlurmUsageObserver(
        head_node.run,
        pool=POLICY.pool(POOL),
        instance_type=INSTANCE_TYPE,
        gpus_per_instance=GPUS_PER_NODE,
        ledger=ledger,
        namespace=RECLAIM_NAMESPACE,
        emit=records.append,
        published=set() if published is None else published,
    )


def figures(records: list) -> dict[int, dict[str, dict[str, float]]]:
    """hour -> team -> metric -> value, from the EMF records."""
    out: dict[int, dict[str, dict[str, float]]] = {}
    for record in records:
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        assert (directive["Namespace"], directive["Dimensions"]) == (RECLAIM_NAMESPACE, [list(SHARE_DIMENSIONS)])
        assert record["Pool"] == POOL
        hour = record["_aws"]["Timestamp"] // 1000
        assert record["Share"] not in out.setdefault(hour, {}), "a share published twice for one hour"
        out[hour][record["Share"]] = {m["Name"]: record[m["Name"]] for m in directive["Metrics"]}
    return out


def settled(hour: int) -> float:
    """The first moment ``hour`` may be read."""
    return hour + HOUR + SETTLE_SECONDS


def published_before(hour: int) -> set[tuple[str, int]]:
    """A container that has seen every hour of the lookback before ``hour`` published."""
    return {(POOL, hour - i * HOUR) for i in range(1, LOOKBACK_HOURS)}


def test_each_hour_counts_the_gpu_seconds_the_jobs_held_in_it(head_node, ledger):
    records: list = []
    published = observer(head_node, ledger, records, published_before(H - 2 * HOUR)).observe(settled(H + HOUR))
    assert published == [H - 2 * HOUR, H - HOUR, H, H + HOUR]
    by_hour = figures(records)
    for hour in (H - HOUR, H, H + HOUR):
        for team in TEAMS:
            assert by_hour[hour][team] == pytest.approx(expected(hour)[team]), (hour, team)
    assert by_hour[H]["burst"][BORROWED_HOURS] > 0 and by_hour[H]["steady"][LENT_HOURS] > 0  # the case is exercised
    # an hour before any job: guarantees only (a team's own nodes, used or not)
    assert by_hour[H - 2 * HOUR] == {t: {**dict.fromkeys(USAGE_METRICS, 0.0), GUARANTEED_HOURS: 1.0} for t in TEAMS}


def test_sacct_is_asked_for_the_hours_read_in_utc_with_requeued_runs_and_the_governed_accounts_only(head_node, ledger):
    observer(head_node, ledger, [], published_before(H)).observe(settled(H + HOUR))
    arguments = head_node.sacct_arguments.read_text().split()
    utc = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))  # noqa: E731
    assert {f"--starttime={utc(H)}", f"--endtime={utc(H + 2 * HOUR)}"} <= set(arguments)
    assert {"--duplicates", "--allocations", "--allusers", f"--accounts={','.join(TEAMS)}"} <= set(arguments)


def test_an_hour_is_published_once_however_often_it_is_read(head_node, ledger):
    records: list = []
    seen = published_before(H)
    first = observer(head_node, ledger, records, seen).observe(settled(H))
    assert first == [H] and len(records) == len(TEAMS)
    # the same container, a minute later: nothing left to read, no command sent
    sent = len(head_node.commands)
    assert observer(head_node, ledger, records, seen).observe(settled(H) + 60) == []
    assert len(head_node.commands) == sent
    # a new container (cold start) reads again, but the ledger's claims stop a second copy
    assert observer(head_node, ledger, records, published_before(H)).observe(settled(H) + 120) == []
    assert len(head_node.commands) == sent + 1 and len(records) == len(TEAMS)


def test_missed_ticks_and_failed_reads_lose_no_hour(head_node, ledger):
    records: list = []
    seen: set = set()
    watcher = observer(head_node, ledger, records, seen)
    caught_up = []
    while published := watcher.observe(settled(H)):  # catch up with the lookback, a few hours per tick
        assert len(published) <= HOURS_PER_COMMAND
        caught_up += published
    assert caught_up == [H - i * HOUR for i in reversed(range(LOOKBACK_HOURS))]
    head_node.fail = True  # the next hour's read times out
    with pytest.raises(RuntimeError):
        watcher.observe(settled(H + HOUR))
    head_node.fail = False
    head_node.dbd_queue = 3  # slurmdbd is behind: nothing is read as final
    assert watcher.observe(settled(H + HOUR) + 60) == []
    head_node.dbd_queue = 0
    # the controller is down for two more hours; then one tick publishes the three missed ones
    assert watcher.observe(settled(H + 3 * HOUR)) == [H + HOUR, H + 2 * HOUR, H + 3 * HOUR]
    assert sorted(figures(records)) == [*caught_up, H + HOUR, H + 2 * HOUR, H + 3 * HOUR]


def test_a_ledger_failure_publishes_nothing_and_a_later_tick_publishes_the_hour_once(head_node, ledger):
    from botocore.exceptions import ClientError

    class FailingOnce(Ledger):
        failed = False

        def record(self, key, **fields):
            if not self.failed:
                self.failed = True
                raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "UpdateItem")
            super().record(key, **fields)

    records: list = []
    failing = FailingOnce(ledger.table)
    with pytest.raises(ClientError):
        observer(head_node, failing, records, published_before(H)).observe(settled(H))
    assert records == []
    # the claim is left as claimed: taken again once no invocation can still hold it (the function's timeout)
    assert observer(head_node, failing, records, published_before(H)).observe(settled(H) + 30) == []
    assert observer(head_node, failing, records, published_before(H)).observe(settled(H) + 60) == [H]
    assert sorted(figures(records)) == [H]


def test_cut_output_publishes_and_claims_nothing(ledger):
    records: list = []
    runs = {
        "output": f"partition|critical|gpu-1\ndbd-queue|0\ngpu-seconds|{H}|critical|critical||3600\n"
    }  # no end marker
    watcher = SlurmUsageObserver(
        lambda commands: runs["output"],
        pool=POLICY.pool(POOL),
        instance_type=INSTANCE_TYPE,
        gpus_per_instance=GPUS_PER_NODE,
        ledger=ledger,
        namespace=RECLAIM_NAMESPACE,
        emit=records.append,
        published=published_before(H),
    )
    with pytest.raises(RuntimeError, match=END_OF_USAGE):
        watcher.observe(settled(H))
    runs["output"] += END_OF_USAGE + "\n"
    assert watcher.observe(settled(H)) == [H]  # unclaimed: the next tick publishes it
    assert figures(records)[H]["critical"][USED_HOURS] == pytest.approx(3600 / GPUS_PER_NODE / HOUR)


def test_account_names_are_checked_before_they_reach_the_head_nodes_shell():
    with pytest.raises(ValueError, match="unsafe"):
        accounting_command(["burst; reboot"], H, H + HOUR)


@pytest.mark.parametrize(
    "hostlist, hosts",
    [
        ("gpu-1", ["gpu-1"]),
        ("gpu-[1-3]", ["gpu-1", "gpu-2", "gpu-3"]),
        ("ip-10-1-2-[3,5-6],ip-10-1-3-4", ["ip-10-1-2-3", "ip-10-1-2-5", "ip-10-1-2-6", "ip-10-1-3-4"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("", []),
    ],
)
def test_slurm_host_lists_expand_as_slurm_writes_them(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


def test_the_handler_reads_every_usage_target_and_a_slurm_reclaim_tick_no_longer_counts_the_queue(
    head_node, monkeypatch, capsys, tmp_path
):
    from gpu_governance_runtime.reclaim import handler

    class Ssm:  # SSM Run Command to the stand-in head node
        class exceptions:
            InvocationDoesNotExist = KeyError

        def send_command(self, *, InstanceIds, DocumentName, Parameters, Comment, TimeoutSeconds):
            self.output = head_node.run(Parameters["commands"])
            return {"Command": {"CommandId": "c-1"}}

        def get_command_invocation(self, *, CommandId, InstanceId):
            return {"Status": "Success", "StandardOutputContent": self.output}

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(compile_policy(governance_model())))
    # the container has published every hour before H + 1 (H + 2 may be settled too on the real clock)
    monkeypatch.setattr(slurm_usage, "PUBLISHED", published_before(H + HOUR))
    monkeypatch.setattr(handler, "ssm", Ssm())
    monkeypatch.setenv("POLICY_PATH", str(policy))
    monkeypatch.setenv("LEDGER_TABLE", "ledger")
    monkeypatch.setenv("RECLAIM_TARGETS", "[]")
    monkeypatch.setenv(
        "USAGE_TARGETS",
        json.dumps(
            [
                {
                    "pool": POOL,
                    "instance_id": "i-0123",
                    "instance_type": INSTANCE_TYPE,
                    "gpus_per_instance": GPUS_PER_NODE,
                }
            ]
        ),
    )
    with reclaim_ledger_table():
        monkeypatch.setattr(handler, "dynamodb", boto3.resource("dynamodb"))
        handler.handler({}, None)
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert figures([r for r in lines if "_aws" in r])[H + HOUR]["burst"] == pytest.approx(
            expected(H + HOUR)["burst"]
        )
        head_node.fail = True  # a head node that does not answer: the pool's error metric, the invocation succeeds
        slurm_usage.PUBLISHED.discard((POOL, H))  # an hour to read, whatever the minute of the real clock
        handler.handler({}, None)
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [r["PoolErrors"] for r in lines if "PoolErrors" in r] == [1]

    class QueueRead:  # a pool's queue, observed
        acts, reroutes_borrowers, usage_from_queue, action_seconds, preemptions_seen = False, False, True, 1.0, {}

        def read(self, now):
            from gpu_governance_runtime.planners.reclaim import PoolState, RunningJob

            pool = POLICY.pool(POOL)
            return PoolState(
                capacity=pool.capacity,
                shares=pool.shares,
                now=now,
                pending=(),
                running=(
                    RunningJob(
                        job_id="1", share="burst", instance_type=INSTANCE_TYPE, count=1, priority=1, started_at=0
                    ),
                ),
            )

    class SlurmQueueRead(QueueRead):  # the same queue, read from Slurm
        usage_from_queue = SlurmAdapter.usage_from_queue

    for adapter, counted in ((QueueRead(), True), (SlurmQueueRead(), False)):
        records: list = []
        handler.run_tick(
            POOL,
            adapter,
            ledger=None,
            settings=handler.Settings(),
            dry_run=True,
            namespace=RECLAIM_NAMESPACE,
            now=H,
            emit=records.append,
        )
        assert any(USED_HOURS in r for r in records) is counted


def test_an_hour_whose_claim_was_answered_too_late_is_published_by_the_next_tick_of_the_same_container(head_node):
    """The claim's PutItem carried out, its answer lost, and the client's resend (the reclaim handler's
    WITHIN_A_TICK: SDK retries) refused by that very write: the hour is claimed and not done. The old
    observer marked it published all the same, so a warm container (the module's ``PUBLISHED``) never read
    it again; only a cold start within ``LOOKBACK_HOURS`` would have."""
    from gpu_governance_runtime.common.clients import WITHIN_A_TICK
    from tests.aws_model import sdk
    from tests.aws_model.batch import Faults, LoseAnswer
    from tests.aws_model.dynamodb import FakeDynamoDB

    plan = LoseAnswer("PutItem")
    dynamodb = FakeDynamoDB(faults=Faults(plan))
    dynamodb.create_table("ledger", key="action_id")
    ledger = Ledger(dynamodb.table("ledger", config=WITHIN_A_TICK))
    records: list = []
    seen = published_before(H)  # one warm container: the same set on every tick
    with sdk.no_backoff():
        assert observer(head_node, ledger, records, seen).observe(settled(H)) == []
        assert plan.lost == 1 and records == []
        assert observer(head_node, ledger, records, seen).observe(settled(H) + 60) == [H]
        assert observer(head_node, ledger, records, seen).observe(settled(H) + 120) == []
    assert sorted(figures(records)) == [H] and len(records) == len(TEAMS)
