"""Facts about a Batch job come from AWS, not from its owner (issue 23, outcome 7): the size and
instance type the reclaim adapter plans with are what Batch reports; a tag the submitter writes
can make its job a cheaper victim, never hide it; a malformed tag is ignored with a log line."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the handler builds its clients on import

from gpu_governance_runtime.backends.batch_fair_share import adapter
from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter
from gpu_governance_runtime.planners.reclaim import ANY_TYPE, Settings, plan_tick
from gpu_governance_runtime.policy import parse_policy
from tests.aws_model.batch import Clock, FakeBatch
from tests.reclaim.tables import reclaim_ledger_table
from tests.reclaim.test_controller import G6E, POLICY
from tests.reclaim.test_preempted_jobs_come_back import tick

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
P5 = "p5.48xlarge"
TWO_TYPES = parse_policy(
    {
        "version": 1,
        "organisation": "acme",
        "priority_classes": [],
        "capacity_windows": [],
        "pools": [
            {
                "name": "mixed",
                "backend": "batch_fair_share",
                "capacity": {G6E: 4, P5: 4},
                "shares": [
                    {
                        "name": "research",
                        "quota": {G6E: 1, P5: 1},
                        "strategy": "lend_and_borrow",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 10,
                    },
                    {
                        "name": "training",
                        "quota": {G6E: 3, P5: 3},
                        "strategy": "lend",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 10,
                    },
                ],
            }
        ],
    }
).pool("mixed")


def submit(batch, share, *, nodes=1, tags=None, node_type=None, priority=0):
    request = {
        "jobName": f"{share}-job",
        "jobQueue": QUEUE,
        "jobDefinition": "train:1",
        "shareIdentifier": share,
        "tags": tags or {},
        "schedulingPriorityOverride": priority,
    }
    if nodes > 1:
        request["nodeOverrides"] = {
            "numNodes": nodes,
            "nodePropertyOverrides": [
                {"targetNodes": "0:", "containerOverrides": {"instanceType": node_type} if node_type else {}}
            ],
        }
    return batch.add_job(**request)


@pytest.fixture
def logged(monkeypatch):
    records = []
    monkeypatch.setattr(adapter.log, "write", records.append)
    return records


def test_a_borrower_tagged_with_another_instance_type_is_still_reclaimed(logged):
    batch = FakeBatch(Clock(), capacity={QUEUE: 8})
    borrower = submit(
        batch, "research", nodes=6, tags={"gpu-governance:instance-type": P5, "gpu-governance:instances": "0"}
    )
    batch.advance(3600)
    owner = submit(batch, "training", nodes=6, priority=50)
    adapter = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch)
    state = adapter.read(batch.clock.now)
    assert [(j.job_id, j.instance_type, j.count) for j in state.running] == [(borrower, G6E, 6)]
    assert [j.job_id for j in state.pending] == [owner]
    assert [p.job_id for p in plan_tick(state, Settings()).preemptions] == [borrower]


@pytest.mark.parametrize("instances", ["lots", "0", "-8", "999"])
def test_the_instances_tag_neither_sizes_a_job_nor_stops_the_tick(instances, logged):
    batch = FakeBatch(Clock(), capacity={QUEUE: 8})
    job = submit(batch, "research", nodes=2, tags={"gpu-governance:instances": instances})
    batch.advance(60)
    state = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch).read(
        batch.clock.now
    )
    assert [(j.job_id, j.count) for j in state.running] == [(job, 2)]


def test_a_malformed_checkpointable_tag_is_ignored_with_a_log_line_and_true_only_cheapens(logged):
    batch = FakeBatch(Clock(), capacity={QUEUE: 8})
    odd = submit(batch, "research", tags={"gpu-governance:checkpointable": "maybe"})
    cheap = submit(batch, "research", tags={"gpu-governance:checkpointable": "TRUE"})
    batch.advance(60)
    state = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=batch).read(
        batch.clock.now
    )
    assert {j.job_id: j.checkpointable for j in state.running} == {odd: False, cheap: True}
    assert [(r["job_id"], r["tag"], r["value"]) for r in logged if r["event"] == "tag_ignored"] == [
        (odd, "gpu-governance:checkpointable", "maybe")
    ]


def test_in_a_pool_of_several_types_batch_named_types_win_and_a_foreign_hint_is_ignored(logged):
    """A foreign hint is ignored with a log line; the running job then counts on every type
    (ANY_TYPE, issue 38) rather than not at all, so a wrong tag hides no borrowing."""
    batch = FakeBatch(Clock(), capacity={QUEUE: 8})
    named = submit(batch, "research", nodes=2, node_type=P5, tags={"gpu-governance:instance-type": G6E})
    hinted = submit(batch, "research", tags={"gpu-governance:instance-type": G6E})
    foreign = submit(batch, "research", tags={"gpu-governance:instance-type": "t3.micro"})
    batch.advance(60)
    state = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=TWO_TYPES, submit=batch).read(batch.clock.now)
    assert {j.job_id: j.instance_type for j in state.running} == {named: P5, hinted: G6E, foreign: ANY_TYPE}
    assert [(r["job_id"], r["value"]) for r in logged if r["event"] == "tag_ignored"] == [(foreign, "t3.micro")]
    assert [r["job_id"] for r in logged if r["event"] == "job_not_planned"] == []


def test_in_a_pool_of_several_types_a_borrower_that_leaves_the_type_tag_out_hides_no_borrowing(logged):
    """Issue 38's lead: research runs four one-instance jobs without the type tag where Batch put
    them, on all four p5 (research's p5 quota is 1). Until issue 38 they were left out of the plan,
    p5 looked idle, and training's job inside its p5 quota was planned to start with nothing
    reclaimed: it waited for ever. Now each counts on every type (ANY_TYPE) and one is reclaimed,
    stopped for good with the reason on the job, since its copy would be as unplaceable."""
    batch = FakeBatch(Clock(), capacity={QUEUE: 4})  # the instances Batch has for these jobs: the p5
    hidden = {submit(batch, "research") for _ in range(4)}
    batch.advance(3600)
    owner = submit(batch, "training", tags={"gpu-governance:instance-type": P5}, priority=50)
    adapter = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=TWO_TYPES, submit=batch)
    state = adapter.read(batch.clock.now)
    assert {j.job_id: j.instance_type for j in state.running} == dict.fromkeys(hidden, ANY_TYPE)
    records = []
    with reclaim_ledger_table() as table:
        result = tick(batch, table, records, pool=TWO_TYPES)
    (stopped,) = [r for r in records if r.get("event") == "preemption"]
    assert result.preemptions == 1 and stopped["job_id"] in hidden and stopped["instance_type"] == P5
    assert (stopped["outcome"], stopped["stopped_for_good"]) == ("done", True)
    assert "resubmit it with the tag gpu-governance:instance-type" in batch.jobs[stopped["job_id"]]["statusReason"]
    assert [j for j in batch.jobs.values() if j["jobId"] not in hidden and j["jobId"] != owner] == []  # no copy
    batch.advance(60)
    assert batch.jobs[owner]["status"] == "STARTING"
