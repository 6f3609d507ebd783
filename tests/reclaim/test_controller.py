"""The reclaim controller against AWS stand-ins: moto for DynamoDB (the ledger), botocore
Stubber for Batch (moto drops shareIdentifier and finishes jobs at once, so it cannot hold a
running fair-share queue; quota-share snapshots it lacks entirely) and for SSM command output
(moto's send_command runs nothing). Stubber checks every request against the service model."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace

import boto3
import pytest
from botocore.config import Config
from botocore.stub import ANY, Stubber

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.backends.batch_quota_share.observer import BatchQuotaShareObserver  # noqa: E402
from gpu_governance_runtime.backends.hyperpod_slurm.adapter import SlurmAdapter, parse_squeue, slurm_time_limit  # noqa: E402
from gpu_governance_runtime.common.action_ledger import ActionKey, Ledger  # noqa: E402
from gpu_governance_runtime.contract import SHARE_METRICS  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Settings  # noqa: E402
from gpu_governance_runtime.policy import parse_policy  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
G6E = "g6e.12xlarge"
NOW = 1_800_000_000.0
POLICY = parse_policy(
    {
        "version": 1,
        "organisation": "acme",
        "capacity_windows": [],
        "priority_classes": [{"name": "urgent", "weight": 90}, {"name": "standard", "weight": 50}],
        "pools": [
            {
                "name": "ec2-gpu",
                "backend": "batch_fair_share",
                "capacity": {G6E: 8},
                "shares": [
                    {
                        "name": "research",
                        "quota": {G6E: 2},
                        "strategy": "lend_and_borrow",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 10,
                    },
                    {
                        "name": "training",
                        "quota": {G6E: 6},
                        "strategy": "lend",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 10,
                    },
                ],
            },
            {
                "name": "slurm",
                "backend": "hyperpod_slurm",
                "capacity": {"ml.p5.48xlarge": 4},
                "shares": [
                    {
                        "name": "research",
                        "quota": {"ml.p5.48xlarge": 1},
                        "strategy": "lend_and_borrow",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 10,
                    },
                    {
                        "name": "training",
                        "quota": {"ml.p5.48xlarge": 3},
                        "strategy": "lend",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 10,
                    },
                ],
            },
            {
                "name": "sagemaker",
                "backend": "batch_quota_share",
                "capacity": {"ml.p5.48xlarge": 8},
                "shares": [
                    {
                        "name": "research",
                        "quota": {"ml.p5.48xlarge": 2},
                        "strategy": "lend_and_borrow",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 10,
                    }
                ],
            },
        ],
    }
)
SETTINGS = Settings()
LISTED = 4  # statuses the fair-share adapter lists


def batch_job(job_id, share, status, nodes=1, priority=10, started=NOW - 3600, attempts=0, checkpointable="false"):
    return {
        "jobId": job_id,
        "jobName": job_id,
        "jobArn": f"arn:aws:batch:us-east-1:111122223333:job/{job_id}",
        "jobQueue": QUEUE,
        "status": status,
        "shareIdentifier": share,
        "schedulingPriority": priority,
        "createdAt": int((started - 60) * 1000),
        "startedAt": int(started * 1000),
        "jobDefinition": "arn:aws:batch:us-east-1:111122223333:job-definition/train:1",
        "attempts": [{"exitCode": 143}] * attempts,
        "tags": {"gpu-governance:checkpointable": checkpointable},
        **(
            {"nodeProperties": {"numNodes": nodes, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:"}]}}
            if nodes > 1
            else {}
        ),
    }


def summary(job):
    return {"jobId": job["jobId"], "jobName": job["jobName"]}


@pytest.fixture
def ledger_table():
    with reclaim_ledger_table() as table:
        yield table


def stubbed(service):
    client = boto3.client(service, config=Config(retries={"max_attempts": 1}))  # let faults surface
    return client, Stubber(client)


RUNNING = [
    batch_job("borrow-big", "research", "RUNNING", nodes=4, started=NOW - 600),
    batch_job("borrow-small", "research", "RUNNING", nodes=2, started=NOW - 300),
    batch_job("base", "research", "RUNNING", nodes=2, started=NOW - 9000),
]
WAITING = [batch_job("train", "training", "RUNNABLE", nodes=6, priority=50)]


def expect_read(stubber, running=RUNNING, waiting=WAITING, pending=()):
    """The adapter lists each status, then describes every listed job once."""
    listed = []
    for status, jobs in (("STARTING", []), ("RUNNING", running), ("RUNNABLE", waiting), ("PENDING", pending))[:LISTED]:
        stubber.add_response(
            "list_jobs", {"jobSummaryList": [summary(j) for j in jobs]}, {"jobQueue": QUEUE, "jobStatus": status}
        )
        listed += jobs
    if listed:
        stubber.add_response("describe_jobs", {"jobs": listed}, {"jobs": [j["jobId"] for j in listed]})


def tick(adapter, table, *, dry_run, records):
    return controller.run_tick(
        adapter.pool.name,
        adapter,
        Ledger(table),
        settings=SETTINGS,
        dry_run=dry_run,
        namespace="Test",
        now=NOW,
        emit=records.append,
    )


def test_dry_run_plans_logs_and_publishes_but_terminates_nothing(ledger_table):
    client, stubber = stubbed("batch")
    expect_read(stubber)
    records = []
    with stubber:  # any terminate_job call would fail: none is queued
        result = tick(
            BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client),
            ledger_table,
            dry_run=True,
            records=records,
        )
    stubber.assert_no_pending_responses()
    assert (result.preemptions, result.acted) == (2, 0)
    decisions = [r for r in records if r.get("event") == "preemption"]
    assert {d["job_id"] for d in decisions} == {"borrow-big", "borrow-small"}
    assert all(d["outcome"] == "planned" and d["dry_run"] for d in decisions)
    assert ledger_table.scan()["Items"] == []


def test_acting_terminates_each_victim_once_with_its_reason_and_records_it(ledger_table):
    client, stubber = stubbed("batch")
    adapter = BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client)
    expect_read(stubber)
    for job_id in ("borrow-small", "borrow-big"):  # most recently started first
        stubber.add_response(
            "describe_jobs", {"jobs": [next(j for j in RUNNING if j["jobId"] == job_id)]}, {"jobs": [job_id]}
        )
        stubber.add_response("terminate_job", {}, {"jobId": job_id, "reason": ANY})
        # Batch does not retry a terminated job: its copy is looked for (none yet) and submitted
        stubber.add_response(
            "list_jobs",
            {"jobSummaryList": []},
            {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": [job_id]}]},
        )
        stubber.add_response(
            "submit_job",
            {
                "jobId": f"copy-of-{job_id}",
                "jobName": job_id,
                "jobArn": f"arn:aws:batch:us-east-1:111122223333:job/copy-of-{job_id}",
            },
            {
                "jobName": job_id,
                "jobQueue": QUEUE,
                "jobDefinition": ANY,
                "shareIdentifier": "research",
                "schedulingPriorityOverride": 10,
                "tags": {
                    "gpu-governance:checkpointable": "false",
                    "gpu-governance:requeued-from": job_id,
                    "gpu-governance:times-preempted": "1",
                },
                "nodeOverrides": {"numNodes": ANY},
            },
        )
    records = []
    with stubber:
        result = tick(adapter, ledger_table, dry_run=False, records=records)
    stubber.assert_no_pending_responses()
    assert (result.acted, result.failed) == (2, 0)
    items = {i["job_id"]: i for i in ledger_table.scan()["Items"] if "job_id" in i}
    assert {k: (v["status"], v["new_job"]) for k, v in items.items()} == {
        "borrow-big": ("done", "copy-of-borrow-big"),
        "borrow-small": ("done", "copy-of-borrow-small"),
    }
    assert "lent by team training to team research, for job train" in items["borrow-big"]["reason"]

    # A duplicate tick over the same (not yet updated) queue claims nothing and terminates nothing.
    client2, stubber2 = stubbed("batch")
    expect_read(stubber2)
    with stubber2:
        again = tick(
            BatchFairShareAdapter(client2, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client2),
            ledger_table,
            dry_run=False,
            records=records,
        )
    stubber2.assert_no_pending_responses()
    assert again.acted == 0
    assert [r["outcome"] for r in records[-20:] if r.get("event") == "preemption"][-2:] == [
        "already_claimed",
        "already_claimed",
    ]


def test_a_job_that_finished_meanwhile_is_skipped_and_a_throttled_terminate_fails_alone(ledger_table):
    client, stubber = stubbed("batch")
    adapter = BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client)
    expect_read(stubber)
    finished = {**RUNNING[1], "status": "SUCCEEDED"}
    stubber.add_response("describe_jobs", {"jobs": [finished]}, {"jobs": ["borrow-small"]})  # planned first
    stubber.add_response("describe_jobs", {"jobs": [RUNNING[0]]}, {"jobs": ["borrow-big"]})
    stubber.add_client_error("terminate_job", service_error_code="TooManyRequestsException", http_status_code=429)
    records = []
    with stubber:
        result = tick(adapter, ledger_table, dry_run=False, records=records)
    stubber.assert_no_pending_responses()
    outcomes = {r["job_id"]: r["outcome"] for r in records if r.get("event") == "preemption"}
    assert outcomes == {"borrow-small": "skipped", "borrow-big": "failed"}
    assert result.failed == 1
    start = next(r for r in records if r.get("event") == "start")
    assert (start["job_id"], start["outcome"]) == ("train", "blocked")
    # the failed (throttled) terminate may be retried next tick; the skipped one is settled
    ledger = Ledger(ledger_table)
    assert ledger.claim(
        ActionKey(pool="ec2-gpu", job_id="borrow-big", attempt="0", action="preempt"), now=NOW, reason="retry"
    )
    assert not ledger.claim(
        ActionKey(pool="ec2-gpu", job_id="borrow-small", attempt="0", action="preempt"), now=NOW, reason="retry"
    )


def test_jobs_of_ungoverned_shares_are_never_read_into_the_plan(ledger_table):
    client, stubber = stubbed("batch")
    stranger = batch_job("stranger", "someone-else", "RUNNING", nodes=8)
    expect_read(stubber, running=[stranger, *RUNNING])
    with stubber:
        state = BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client).read(NOW)
    assert "stranger" not in {j.job_id for j in state.running}
    assert {j.job_id: j.count for j in state.running} == {"base": 2, "borrow-big": 4, "borrow-small": 2}


def test_emf_metrics_per_share(ledger_table):
    client, stubber = stubbed("batch")
    expect_read(stubber)
    records = []
    with stubber:
        tick(
            BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client),
            ledger_table,
            dry_run=True,
            records=records,
        )
    metrics = {r["Share"]: r for r in records if "_aws" in r and "InUse" in r}  # the share metrics (the others: usage)
    research, training = metrics["research"], metrics["training"]
    definition = research["_aws"]["CloudWatchMetrics"][0]
    assert definition["Namespace"] == "Test" and definition["Dimensions"] == [["Pool", "Share"]]
    assert {m["Name"] for m in definition["Metrics"]} == set(SHARE_METRICS)
    assert (research["Guaranteed"], research["InUse"], research["Borrowed"], research["Preemptions"]) == (2, 8, 6, 2)
    assert research["LostCapacitySeconds"] == 4 * 600 + 2 * 300  # neither victim checkpoints
    # training waits inside its guarantee right now: starved until the reclaim takes effect
    assert (training["Pending"], training["Lent"], training["StarvedBelowGuarantee"]) == (6, 6, 1)
    assert research["StarvedBelowGuarantee"] == 0
    json.dumps(records)  # every record is one JSON log line


def test_a_fair_share_jobs_timeout_is_its_declared_run_time():
    client, stubber = stubbed("batch")  # DescribeJobs responses checked against the real JobDetail shape
    expect_read(
        stubber, running=[{**RUNNING[0], "timeout": {"attemptDurationSeconds": 7_200}}, *RUNNING[1:]], waiting=[]
    )
    with stubber:
        state = BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client).read(NOW)
    assert {j.job_id: j.max_run_time_s for j in state.running} == {
        "borrow-big": 7_200,
        "borrow-small": None,
        "base": None,
    }


def test_quota_share_queues_are_observed_only(ledger_table):
    client, stubber = stubbed("batch")
    stubber.add_response(
        "get_job_queue_snapshot",
        {
            "queueUtilization": {
                "quotaShareUtilization": {
                    "topCapacityUtilization": [
                        {
                            "quotaShareName": "research",
                            "capacityUsage": [{"capacityUnit": "ml.p5.48xlarge", "quantity": 5.0}],
                        }
                    ]
                }
            }
        },
        {"jobQueue": QUEUE},
    )
    stubber.add_response(
        "list_service_jobs",
        {"jobSummaryList": []},
        {"jobQueue": QUEUE, "jobStatus": "RUNNABLE", "filters": [{"name": "QUOTA_SHARE_NAME", "values": ["research"]}]},
    )
    records = []
    with stubber:
        result = tick(
            BatchQuotaShareObserver(client, job_queue=QUEUE, pool=POLICY.pool("sagemaker")),
            ledger_table,
            dry_run=False,
            records=records,
        )
    assert (result.preemptions, result.starts, result.acted) == (0, 0, 0)
    (metric,) = [r for r in records if "_aws" in r and "InUse" in r]  # the share metrics (the other record: usage)
    assert (metric["InUse"], metric["Borrowed"]) == (5, 3)


SQUEUE_OUTPUT = "\n".join(
    [
        "101|research|research.borrow|RUNNING|2|2027-01-15T08:00:00|2027-01-15T07:59:00|0|30:00|None",
        "102|research|research.standard|RUNNING|1|2027-01-15T06:00:00|2027-01-15T05:00:00|1|UNLIMITED|None",
        "103|training|training.urgent|PENDING|3|N/A|2027-01-15T08:10:00|0|1-02:04:00|Resources",
        "104|outsider|outsider.x|RUNNING|1|2027-01-15T06:00:00|2027-01-15T05:00:00|0|1:00|None",
        "105|training|training.urgent|PENDING|1|N/A|2027-01-15T08:10:00|0|NOT_SET|JobHeldUser",
        "gg-end-of-queue",
    ]
)


class Mentions:
    """Matches a command list whose script contains ``fragment`` (Stubber compares with ==)."""

    def __init__(self, fragment):
        self.fragment = fragment

    def __eq__(self, commands):
        return any(self.fragment in command for command in commands)


def expect_ssm(stubber, command_fragment, output, command_id):
    stubber.add_response(
        "send_command",
        {"Command": {"CommandId": command_id}},
        {
            "InstanceIds": ["i-0123456789abcdef0"],
            "DocumentName": "AWS-RunShellScript",
            "Parameters": {"commands": Mentions(command_fragment), "executionTimeout": ["60"]},
            "Comment": ANY,
            "TimeoutSeconds": 30,
        },
    )
    stubber.add_response(
        "get_command_invocation",
        {"Status": "Success", "StandardOutputContent": output},
        {"CommandId": command_id, "InstanceId": "i-0123456789abcdef0"},
    )


def test_slurm_reads_squeue_and_requeues_victims_over_ssm(ledger_table):
    client, stubber = stubbed("ssm")
    adapter = SlurmAdapter(
        client,
        instance_id="i-0123456789abcdef0",
        instance_type="ml.p5.48xlarge",
        pool=POLICY.pool("slurm"),
        policy=POLICY,
        sleep=lambda s: None,
    )
    expect_ssm(
        stubber,
        "squeue --noheader --array --states=RUNNING,PENDING --account=research,training",
        SQUEUE_OUTPUT,
        "11111111-2222-3333-4444-555555555555",
    )
    expect_ssm(
        stubber,
        "= 'RUNNING|0' ]; then scontrol requeue 101 && echo done",
        "done\n",
        "11111111-2222-3333-4444-666666666666",
    )
    records = []
    with stubber:
        result = tick(adapter, ledger_table, dry_run=False, records=records)
    stubber.assert_no_pending_responses()
    (preemption,) = [r for r in records if r.get("event") == "preemption"]
    assert (preemption["job_id"], preemption["outcome"], preemption["count"]) == ("101", "done", 2)
    assert result.acted == 1


def test_parse_squeue_maps_accounts_qos_and_skips_outsiders_and_held_jobs():
    running, pending = parse_squeue(SQUEUE_OUTPUT, POLICY.pool("slurm"), POLICY, "ml.p5.48xlarge")
    assert {j.job_id: (j.priority, j.count, j.times_preempted) for j in running} == {
        "101": (0, 2, 0),
        "102": (50, 1, 1),
    }
    assert {j.job_id: (j.priority, j.count) for j in pending} == {"103": (90, 3)}  # 105 is held: it cannot start
    # squeue's TimeLimit (--time) is the declared run time; UNLIMITED declares none
    assert {j.job_id: j.max_run_time_s for j in (*running, *pending)} == {"101": 1_800, "102": None, "103": 93_840}


@pytest.mark.parametrize(
    "limit, seconds",
    [
        ("30", 1_800),
        ("45:30", 2_730),
        ("1:00", 60),
        ("1:30:00", 5_400),
        ("2-0", 172_800),
        ("2-3:04", 183_840),
        ("1-02:03:04", 93_784),
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("NOT_SET", None),
        ("Partition_Limit", None),
        ("N/A", None),
    ],
)
def test_every_slurm_time_format_is_read(limit, seconds):
    assert slurm_time_limit(limit) == seconds


@pytest.mark.parametrize("limit", ["1:2:3:4", "1-", "1.5", "-5", "soon", "1-2-3"])
def test_a_garbled_time_limit_is_an_error_not_a_guess(limit):
    with pytest.raises(ValueError, match="is not a Slurm time"):
        slurm_time_limit(limit)
    with pytest.raises(RuntimeError, match="squeue line"):
        parse_squeue(
            f"101|research|x|RUNNING|1|2027-01-15T08:00:00|N/A|0|{limit}|None\ngg-end-of-queue",
            POLICY.pool("slurm"),
            POLICY,
            "ml.p5.48xlarge",
        )


def test_a_cut_short_squeue_output_is_never_planned_on(ledger_table):
    # GetCommandInvocation returns the first 24,000 characters only; without the end marker the
    # queue may be partial, and planning on part of it could preempt wrongly.
    truncated = SQUEUE_OUTPUT.rsplit("\n", 2)[0]
    with pytest.raises(RuntimeError, match="squeue output ends without 'gg-end-of-queue'"):
        parse_squeue(truncated, POLICY.pool("slurm"), POLICY, "ml.p5.48xlarge")
    with pytest.raises(RuntimeError, match=re.escape("squeue line '101|research|x|RUNNING|two|")):
        parse_squeue(
            "101|research|x|RUNNING|two|N/A|N/A|0|30:00|None\ngg-end-of-queue",
            POLICY.pool("slurm"),
            POLICY,
            "ml.p5.48xlarge",
        )


def test_slurm_refuses_identifiers_that_could_inject_shell():
    from gpu_governance_runtime.planners.reclaim import Preemption

    adapter = SlurmAdapter(
        object(), instance_id="i-1", instance_type="ml.p5.48xlarge", pool=POLICY.pool("slurm"), policy=POLICY
    )
    for job_id in ("1; rm -rf /", "101\n", "101\nscancel --user=root"):  # `$` with .match accepts a trailing newline
        with pytest.raises(ValueError, match="unsafe Slurm identifier"):
            adapter.preempt(
                Preemption(
                    job_id=job_id,
                    share="research",
                    instance_type="ml.p5.48xlarge",
                    count=1,
                    kind="reclaim",
                    for_job="2",
                    reason="r",
                )
            )


def test_handler_reads_policy_and_targets_from_the_environment(ledger_table, tmp_path, monkeypatch):
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme",
                "priority_classes": [],
                "capacity_windows": [],
                "pools": [
                    {
                        "name": "ec2-gpu",
                        "backend": "batch_fair_share",
                        "capacity": {G6E: 8},
                        "shares": [
                            {
                                "name": "research",
                                "quota": {G6E: 2},
                                "strategy": "lend_and_borrow",
                                "borrow_limit": None,
                                "in_share_preemption": False,
                                "fair_share_weight": 10,
                            },
                            {
                                "name": "training",
                                "quota": {G6E: 6},
                                "strategy": "lend",
                                "borrow_limit": None,
                                "in_share_preemption": False,
                                "fair_share_weight": 10,
                            },
                        ],
                    }
                ],
            }
        )
    )
    client, stubber = stubbed("batch")
    expect_read(stubber)
    monkeypatch.setattr(controller, "batch", client)
    monkeypatch.setattr(controller, "dynamodb", boto3.resource("dynamodb"))
    monkeypatch.setenv("POLICY_PATH", str(policy_path))
    monkeypatch.setenv("LEDGER_TABLE", "ledger")
    monkeypatch.setenv("RECLAIM_TARGETS", json.dumps([{"pool": "ec2-gpu", "job_queue": QUEUE}]))
    monkeypatch.delenv("DRY_RUN", raising=False)
    with stubber:
        result = controller.handler({}, None)
    assert result["dry_run"] is True
    assert result["pools"] == [{"pool": "ec2-gpu", "preemptions": 2, "starts": 1, "acted": 0, "failed": 0}]


def test_handler_plans_each_pool_with_its_reclaim_settings_from_the_policy(ledger_table, tmp_path, monkeypatch):
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme",
                "priority_classes": [],
                "capacity_windows": [],
                "pools": [
                    {
                        "name": "ec2-gpu",
                        "backend": "batch_fair_share",
                        "capacity": {G6E: 8},
                        "reclaim": {"reborrow_backoff_s": 7_200, "borrow_horizon_s": 600},
                        "shares": [
                            {
                                "name": "research",
                                "quota": {G6E: 8},
                                "strategy": "lend_and_borrow",
                                "borrow_limit": None,
                                "in_share_preemption": False,
                                "fair_share_weight": 10,
                            }
                        ],
                    }
                ],
            }
        )
    )
    client, stubber = stubbed("batch")
    expect_read(stubber, running=[], waiting=[batch_job("w", "research", "RUNNABLE")])
    planned_with = []
    monkeypatch.setattr(
        controller,
        "plan_tick",
        lambda state, settings: (
            planned_with.append(settings) or controller.Plan(starts=(), preemptions=(), capped=False)
        ),
    )
    monkeypatch.setattr(controller, "batch", client)
    monkeypatch.setattr(controller, "dynamodb", boto3.resource("dynamodb"))
    for name, value in (
        ("POLICY_PATH", str(policy_path)),
        ("LEDGER_TABLE", "ledger"),
        ("MIN_RUN_TIME_S", "30"),
        ("RECLAIM_TARGETS", json.dumps([{"pool": "ec2-gpu", "job_queue": QUEUE}])),
    ):
        monkeypatch.setenv(name, value)
    with stubber:
        controller.handler({}, None)
    assert planned_with == [Settings(min_run_time_s=30, reborrow_backoff_s=7_200, borrow_horizon_s=600)]


def test_slurm_borrowing_start_is_rerouted_to_the_borrow_partition(ledger_table):
    client, stubber = stubbed("ssm")
    adapter = SlurmAdapter(
        client,
        instance_id="i-0123456789abcdef0",
        instance_type="ml.p5.48xlarge",
        pool=POLICY.pool("slurm"),
        policy=POLICY,
        sleep=lambda s: None,
    )
    expect_ssm(
        stubber,
        "squeue",
        "105|research|research.standard|PENDING|2|N/A|2027-01-15T07:00:00|0|UNLIMITED|Priority\ngg-end-of-queue",
        "11111111-2222-3333-4444-777777777777",
    )
    expect_ssm(
        stubber,
        "= 'PENDING|0' ]; then scontrol update JobId=105 Partition=borrow QOS=research.borrow && echo done",
        "done\n",
        "11111111-2222-3333-4444-888888888888",
    )
    records = []
    with stubber:
        tick(adapter, ledger_table, dry_run=False, records=records)
    stubber.assert_no_pending_responses()
    (start,) = [r for r in records if r.get("event") == "start"]
    assert (start["job_id"], start["borrowed"], start["outcome"]) == ("105", 1, "done")


def test_hyperpod_eks_pools_are_refused_as_targets():
    policy = parse_policy(
        {
            "version": 1,
            "organisation": "o",
            "priority_classes": [],
            "capacity_windows": [],
            "pools": [{"name": "eks", "backend": "hyperpod_eks", "capacity": {"ml.p5.48xlarge": 1}, "shares": []}],
        }
    )
    with pytest.raises(ValueError, match="HyperPod EKS reclaims natively"):
        controller.build_adapter({"pool": "eks"}, policy)


# --- time: nothing is started that the invocation cannot finish ----------------------------------


def test_the_slurm_wait_and_every_action_fit_the_functions_timeout():
    from gpu_governance_runtime.backends.hyperpod_slurm.adapter import SSM_WAIT_SECONDS
    from gpu_governance_runtime.common.action_ledger import FUNCTION_TIMEOUT_SECONDS

    adapter = SlurmAdapter(
        object(), instance_id="i-1", instance_type="ml.p5.48xlarge", pool=POLICY.pool("slurm"), policy=POLICY
    )
    # One tick reads the queue (one SSM round trip) and can then act at least once.
    assert adapter.timeout_seconds == SSM_WAIT_SECONDS and 2 * adapter.action_seconds <= FUNCTION_TIMEOUT_SECONDS


def test_an_ssm_wait_stops_at_the_invocations_time_left(ledger_table):
    client, stubber = stubbed("ssm")
    left = [30.0]

    def sleep(seconds):
        left[0] -= seconds

    adapter = SlurmAdapter(
        client,
        instance_id="i-0123456789abcdef0",
        instance_type="ml.p5.48xlarge",
        pool=POLICY.pool("slurm"),
        policy=POLICY,
        sleep=sleep,
        timeout_seconds=60,
        time_left=lambda: left[0],
    )
    stubber.add_response("send_command", {"Command": {"CommandId": "11111111-2222-3333-4444-555555555555"}}, None)
    for _ in range(25):
        stubber.add_response("get_command_invocation", {"Status": "InProgress"}, None)
    # given up on: cancelled, so it can never run after the controller stopped waiting
    stubber.add_response(
        "cancel_command",
        {},
        {"CommandId": "11111111-2222-3333-4444-555555555555", "InstanceIds": ["i-0123456789abcdef0"]},
    )
    with stubber, pytest.raises(RuntimeError, match="no result after 25 s; cancelled"):
        adapter.run(["squeue"])
    assert left[0] == 5  # stopped with time left to record the outcome
    with pytest.raises(RuntimeError, match="not sent: 5 s of the invocation left"):
        adapter.run(["squeue"])


def test_an_action_without_time_left_is_deferred_unclaimed(ledger_table):
    client, stubber = stubbed("ssm")
    left = [100.0]
    adapter = SlurmAdapter(
        client,
        instance_id="i-0123456789abcdef0",
        instance_type="ml.p5.48xlarge",
        pool=POLICY.pool("slurm"),
        policy=POLICY,
        sleep=lambda s: left.__setitem__(0, adapter.action_seconds - 1),
        time_left=lambda: left[0],
    )
    expect_ssm(stubber, "squeue", SQUEUE_OUTPUT, "11111111-2222-3333-4444-555555555555")
    records = []
    with stubber:
        result = controller.run_tick(
            "slurm",
            adapter,
            Ledger(ledger_table),
            settings=SETTINGS,
            dry_run=False,
            namespace="ns",
            now=NOW,
            emit=records.append,
            time_left=lambda: left[0],
        )
    stubber.assert_no_pending_responses()  # no requeue command was sent
    (preemption,) = [r for r in records if r.get("event") == "preemption"]
    assert preemption["outcome"] == "deferred" and result.acted == 0
    assert "Item" not in ledger_table.get_item(Key={"action_id": "slurm#101#0#preempt"})  # the next tick is free to act


def test_a_claim_left_by_a_killed_invocation_is_taken_again_after_the_timeout(ledger_table):
    from gpu_governance_runtime.common.action_ledger import FUNCTION_TIMEOUT_SECONDS

    ledger = Ledger(ledger_table)
    key = ActionKey(pool="ec2-gpu", job_id="borrow-big", attempt="0", action="preempt")
    assert ledger.claim(key, now=NOW, reason="r")  # the invocation dies here, outcome never recorded
    assert not ledger.claim(key, now=NOW + FUNCTION_TIMEOUT_SECONDS - 1, reason="r")  # it may still be running
    assert ledger.claim(key, now=NOW + FUNCTION_TIMEOUT_SECONDS + 1, reason="r")  # it cannot be: not stuck for 7 days
    ledger.record(key, status="done")
    assert not ledger.claim(key, now=NOW + 3600, reason="r")  # a recorded outcome is never redone


def test_a_guarantee_job_held_by_the_preemption_cap_is_logged_with_that_limit(ledger_table):
    # The same queue as above with no preemption allowed this tick: training's job waits inside
    # its guarantee, and the log says which anti-thrash limit keeps it waiting.
    client, stubber = stubbed("batch")
    expect_read(stubber)
    records = []
    with stubber:
        controller.run_tick(
            "ec2-gpu",
            BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client),
            Ledger(ledger_table),
            settings=replace(SETTINGS, max_preemptions_per_tick=0),
            dry_run=True,
            namespace="Test",
            now=NOW,
            emit=records.append,
        )
    waits = [r for r in records if r.get("event") == "guarantee_wait"]
    assert [(w["share"], w["reason"], w["dry_run"]) for w in waits] == [("training", "max_preemptions_per_tick", True)]
    assert not [r for r in records if r.get("event") == "preemption"]
