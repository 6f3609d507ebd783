"""One pool's bad day is its own (issue 23, outcome 6): whatever goes wrong reading or acting on
one pool is logged with the pool and counted in PoolErrors, and every other pool still gets its
tick; a job listed under two states while it moves on is read once, in its later state. Batch is
the stateful model in tests/aws_model (it lets a job move between two listings)."""

from __future__ import annotations

import json
import os

import boto3

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from tests.aws_model.batch import Clock, FakeBatch  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402
from tests.reclaim.test_controller import G6E, POLICY  # noqa: E402

QUEUE_A = "arn:aws:batch:us-east-1:111122223333:job-queue/a"
QUEUE_B = "arn:aws:batch:us-east-1:111122223333:job-queue/b"
SHARES = [
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
]
TWO_POOLS = {
    "version": 1,
    "organisation": "acme",
    "priority_classes": [],
    "capacity_windows": [],
    "pools": [
        {"name": "a", "backend": "batch_fair_share", "capacity": {G6E: 8}, "shares": SHARES},
        {"name": "b", "backend": "batch_fair_share", "capacity": {G6E: 8}, "shares": SHARES},
    ],
}


def job(batch, queue, share, *, nodes=1):
    request = {"jobName": f"{share}-job", "jobQueue": queue, "jobDefinition": "train:1", "shareIdentifier": share}
    if nodes > 1:
        request["nodeOverrides"] = {"numNodes": nodes}
    return batch.add_job(**request)


def test_a_job_listed_under_two_states_is_read_once_in_the_later_one():
    batch = FakeBatch(Clock(), capacity={QUEUE_A: 8})
    moving = job(batch, QUEUE_A, "research")
    batch.advance(60)
    assert batch.jobs[moving]["status"] == "STARTING"
    listed = batch.list_jobs

    def racing(**request):  # the job starts running between the STARTING and the RUNNING listings
        answer = listed(**request)
        if request.get("jobStatus") == "STARTING":
            batch.jobs[moving]["status"] = "RUNNING"
        return answer

    batch.list_jobs = racing
    state = BatchFairShareAdapter(batch, job_queue=QUEUE_A, pool=POLICY.pool("ec2-gpu"), submit=batch).read(
        batch.clock.now
    )
    assert [j.job_id for j in state.running] == [moving]
    assert state.pending == ()


def test_one_pools_failure_is_counted_and_every_other_pool_still_ticks(tmp_path, monkeypatch):
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(json.dumps(TWO_POOLS))
    batch = FakeBatch(Clock(), capacity={QUEUE_A: 8, QUEUE_B: 8})
    job(batch, QUEUE_B, "research")
    published, logged = [], []
    built = controller.build_adapter

    def broken_for_a(target, policy, time_left=lambda: float("inf")):
        adapter = built(target, policy, time_left)
        if target["pool"] == "a":  # a bug, not an AWS error: a KeyError from a response shape nobody expected
            adapter.read = lambda now: {}["jobId"]
        return adapter

    with reclaim_ledger_table():
        monkeypatch.setattr(controller, "batch", batch)
        monkeypatch.setattr(controller, "batch_submit", batch)
        monkeypatch.setattr(controller, "dynamodb", boto3.resource("dynamodb"))
        monkeypatch.setattr(controller, "build_adapter", broken_for_a)
        monkeypatch.setattr(
            controller.metrics, "publish", lambda namespace, dimensions, values: published.append((dimensions, values))
        )
        monkeypatch.setattr(controller, "log", logged.append)
        for name, value in (
            ("POLICY_PATH", str(policy_path)),
            ("LEDGER_TABLE", "ledger"),
            ("RECLAIM_TARGETS", json.dumps([{"pool": "a", "job_queue": QUEUE_A}, {"pool": "b", "job_queue": QUEUE_B}])),
        ):
            monkeypatch.setenv(name, value)
        result = controller.handler({}, None)
    assert [r["pool"] for r in result["pools"]] == ["b"]
    assert published == [({"Pool": "a"}, {"PoolErrors": (1, "Count")})]
    assert [(r["pool"], r["error"]) for r in logged if r.get("event") == "pool_failed"] == [("a", "KeyError: 'jobId'")]


def test_a_target_without_its_queue_fails_alone(tmp_path, monkeypatch):
    policy_path = tmp_path / "policy.json"
    policy_path.write_text(json.dumps(TWO_POOLS))
    batch = FakeBatch(Clock(), capacity={QUEUE_B: 8})
    published = []
    with reclaim_ledger_table():
        monkeypatch.setattr(controller, "batch", batch)
        monkeypatch.setattr(controller, "batch_submit", batch)
        monkeypatch.setattr(controller, "dynamodb", boto3.resource("dynamodb"))
        monkeypatch.setattr(
            controller.metrics, "publish", lambda namespace, dimensions, values: published.append(dimensions)
        )
        for name, value in (
            ("POLICY_PATH", str(policy_path)),
            ("LEDGER_TABLE", "ledger"),
            ("RECLAIM_TARGETS", json.dumps([{"pool": "a"}, {"pool": "b", "job_queue": QUEUE_B}])),
        ):
            monkeypatch.setenv(name, value)
        result = controller.handler({}, None)
    assert [r["pool"] for r in result["pools"]] == ["b"]
    assert published == [{"Pool": "a"}]
