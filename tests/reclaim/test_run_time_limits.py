"""Run-time limits on a Batch fair-share pool, held by the reclaim controller (issue 43 item 3,
reclaim/run_time.py), against the Batch model (tests/aws_model/batch.py): a job of a limited team is
noticed at its limit minus the pool's grace and stopped for good at its limit, recorded in the ledger
before and after like a preemption, never requeued; a dry run records and stops nothing; a repeated
tick, a lost answer, a refused call and a listing that still shows the stopped job stop it once.
The policy document the library writes carries the limits the runtime reads back."""

from __future__ import annotations

import os

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

import pytest  # noqa: E402

from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Settings  # noqa: E402
from gpu_governance_runtime.policy import parse_policy  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402
from tests.aws_model.batch import Clock, FakeBatch, Faults, LoseAnswer  # noqa: E402
from tests.reclaim.tables import reclaim_ledger_table  # noqa: E402

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
G6E = "g6e.12xlarge"
POOL = "ec2-gpu"
LIMIT, URGENT_LIMIT, GRACE = 1800, 600, 300


def share(name: str, quota: int, strategy: str, **extra) -> dict:
    return {"name": name, "quota": {G6E: quota}, "strategy": strategy, "borrow_limit": None, **extra}


POLICY = parse_policy(
    {
        "version": 1,
        "organisation": "acme",
        "capacity_windows": [],
        "priority_classes": [{"name": "urgent", "weight": 90}, {"name": "standard", "weight": 50}],
        "pools": [
            {
                "name": POOL,
                "backend": "batch_fair_share",
                "capacity": {G6E: 8},
                "shares": [
                    share("research", 4, "lend", max_run={"seconds": LIMIT, "by_priority": {"90": URGENT_LIMIT}}),
                    share("training", 4, "lend"),
                ],
            }
        ],
    }
)


def pool_with_jobs(faults: Faults | None = None):
    """research runs a standard and an urgent job, training one (no limit): all long, started together."""
    batch = FakeBatch(Clock(1_800_000_000.0), capacity={QUEUE: 8}, faults=faults)
    jobs = {
        name: batch.add_job(
            jobName=name,
            jobQueue=QUEUE,
            jobDefinition="train:1",
            shareIdentifier=team,
            schedulingPriorityOverride=priority,
            parameters={"work_seconds": "36000"},
        )
        for name, team, priority in (("standard", "research", 50), ("urgent", "research", 90), ("free", "training", 50))
    }
    batch.advance(1)  # started
    return batch, jobs, batch.clock.now


def tick(batch, table, at, *, dry_run=False, grace=GRACE, adapter=None):
    records = []
    batch.advance(at - batch.clock.now)  # the jobs work on meanwhile
    controller.run_tick(
        POOL,
        adapter or BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool(POOL), submit=batch),
        Ledger(table),
        settings=Settings(grace_s=grace),
        dry_run=dry_run,
        namespace="Test",
        now=at,
        emit=records.append,
    )
    return {r["job_id"]: r for r in records if r.get("event") == "run_time_limit"}


def status(batch, job_id):
    return batch.jobs[job_id]["status"]


def test_a_job_is_noticed_at_its_limit_minus_the_grace_then_stopped_for_good_once():
    batch, jobs, start = pool_with_jobs()
    standard, urgent, free = jobs["standard"], jobs["urgent"], jobs["free"]
    with reclaim_ledger_table() as table:
        assert tick(batch, table, start + 200) == {}  # before any notice
        first = tick(batch, table, start + URGENT_LIMIT - GRACE)
        assert [(j, r["outcome"], r["stop_after"]) for j, r in first.items()] == [
            (urgent, "in_grace", int(start) + URGENT_LIMIT)
        ]  # the urgent class's tighter limit; the standard job is not near its own
        notice = table.get_item(Key={"action_id": f"{POOL}#{urgent}#0#run-time-notice"})["Item"]
        assert (notice["status"], notice["stop_after"]) == ("notice", int(start + URGENT_LIMIT))
        again = tick(batch, table, start + URGENT_LIMIT - 10)  # a duplicate tick: the notice is not restarted
        assert again[urgent]["outcome"] == "in_grace" and status(batch, urgent) == "RUNNING"
        stopped = tick(batch, table, start + URGENT_LIMIT)
        assert stopped[urgent]["outcome"] == "done"
        assert status(batch, urgent) == "FAILED"
        assert batch.jobs[urgent]["statusReason"].startswith("gpu-governance: run-time limit: job ")
        item = table.get_item(Key={"action_id": f"{POOL}#{urgent}#0#run-time-stop"})["Item"]
        assert item["status"] == "done" and item["stopped_for_good"]
        submitted = len(batch.jobs)
        tick(batch, table, start + URGENT_LIMIT + 10)  # a repeated tick: nothing more, and no copy
        tick(batch, table, start + URGENT_LIMIT + 70)
        assert len(batch.jobs) == submitted and not any(
            j["jobName"].startswith("urgent") for j in batch.active.values()
        )
        tick(batch, table, start + LIMIT - GRACE)
        stopped = tick(batch, table, start + LIMIT)
        assert stopped[standard]["outcome"] == "done" and status(batch, standard) == "FAILED"
        assert status(batch, free) == "RUNNING"  # training has no limit
        assert len(batch.jobs) == submitted


def test_a_dry_run_records_nothing_and_stops_nothing():
    batch, jobs, start = pool_with_jobs()
    with reclaim_ledger_table() as table:
        assert (
            tick(batch, table, start + URGENT_LIMIT - GRACE, dry_run=True)[jobs["urgent"]]["outcome"] == "would_notify"
        )
        late = tick(batch, table, start + LIMIT + 60, dry_run=True)
        assert {late[j]["outcome"] for j in (jobs["urgent"], jobs["standard"])} == {"would_stop"}
        assert table.scan()["Items"] == []
    assert {status(batch, j) for j in jobs.values()} == {"RUNNING"}


def test_a_job_first_seen_past_its_limit_still_gets_its_full_notice():
    batch, jobs, start = pool_with_jobs()
    urgent = jobs["urgent"]
    with reclaim_ledger_table() as table:
        seen = start + URGENT_LIMIT + 100  # the controller was down until after the limit
        late = tick(batch, table, seen)
        assert (late[urgent]["outcome"], late[urgent]["stop_after"]) == ("in_grace", int(seen) + GRACE)
        assert status(batch, urgent) == "RUNNING"
        assert tick(batch, table, seen + GRACE)[urgent]["outcome"] == "done"
    # without a grace the stop comes at the limit, with no notice
    batch, jobs, start = pool_with_jobs()
    with reclaim_ledger_table() as table:
        assert tick(batch, table, start + URGENT_LIMIT, grace=0)[jobs["urgent"]]["outcome"] == "done"
        assert [i["action_id"].rpartition("#")[2] for i in table.scan()["Items"] if "#job-" in i["action_id"]] == [
            "run-time-stop"
        ]


def test_a_stop_whose_answer_was_lost_is_read_back_next_tick_and_owes_no_copy():
    plan = LoseAnswer("TerminateJob")
    batch, jobs, start = pool_with_jobs(Faults(plan))
    urgent = jobs["urgent"]
    with reclaim_ledger_table() as table:
        tick(batch, table, start + URGENT_LIMIT - GRACE)
        lost = tick(batch, table, start + URGENT_LIMIT)
        assert plan.lost == 1 and lost[urgent]["outcome"] == "terminating" and status(batch, urgent) == "FAILED"
        item = table.get_item(Key={"action_id": f"{POOL}#{urgent}#0#run-time-stop"})["Item"]
        assert item["status"] == "terminating" and item["stopped_for_good"]
        submitted = len(batch.jobs)
        tick(batch, table, start + URGENT_LIMIT + 60)  # resume reads it stopped: done, no copy
        item = table.get_item(Key={"action_id": f"{POOL}#{urgent}#0#run-time-stop"})["Item"]
        assert item["status"] == "done" and len(batch.jobs) == submitted
        assert not Ledger(table).open_actions(POOL)


def test_a_refused_stop_is_made_by_the_next_tick():
    refuse = {"armed": True}

    def plan(operation, phase):
        if operation == "TerminateJob" and phase == "before" and refuse["armed"]:
            refuse["armed"] = False
            return "throttle"
        return None

    batch, jobs, start = pool_with_jobs(Faults(plan))
    urgent = jobs["urgent"]
    with reclaim_ledger_table() as table:
        tick(batch, table, start + URGENT_LIMIT - GRACE)
        assert tick(batch, table, start + URGENT_LIMIT)[urgent]["outcome"] == "terminating"
        assert status(batch, urgent) == "RUNNING"  # refused: nothing stopped
        assert tick(batch, table, start + URGENT_LIMIT + 60)[urgent]["outcome"] == "done"
        assert status(batch, urgent) == "FAILED"


class Lagging(BatchFairShareAdapter):
    """Reads the pool as it was at first: a listing that still shows the jobs stopped since."""

    first = None

    def read(self, now):
        state = super().read(now)
        if Lagging.first is None:
            Lagging.first = state
        return Lagging.first.__class__(**{**vars(Lagging.first), "now": now})


def test_a_listing_that_still_shows_the_stopped_job_stops_it_once():
    batch, jobs, start = pool_with_jobs()
    urgent = jobs["urgent"]
    Lagging.first = None
    with reclaim_ledger_table() as table:
        adapter = Lagging(batch, job_queue=QUEUE, pool=POLICY.pool(POOL), submit=batch)
        tick(batch, table, start + URGENT_LIMIT - GRACE, adapter=adapter)
        assert tick(batch, table, start + URGENT_LIMIT, adapter=adapter)[urgent]["outcome"] == "done"
        terminations = [r for r in batch.requests if r[0] == "TerminateJob"]
        adapter = Lagging(batch, job_queue=QUEUE, pool=POLICY.pool(POOL), submit=batch)
        again = tick(batch, table, start + URGENT_LIMIT + 60, adapter=adapter)
        assert again[urgent]["outcome"] == "already_claimed"
        assert [r for r in batch.requests if r[0] == "TerminateJob"] == terminations


def test_the_library_writes_the_limits_where_the_reclaim_controller_holds_them_and_the_runtime_reads_them():
    from constructs_lib.model import GovernanceModel
    from constructs_lib.model.policy import compile_policy
    from tests.foundation.org import default_data

    data = default_data()
    next(c for c in data["priority_classes"] if c["name"] == "opportunistic")["max_run_minutes"] = 30
    data["teams"][1]["max_run_minutes"] = 60
    model = GovernanceModel.from_dict(data)
    document = compile_policy(model)
    runtime = parse_policy(document)
    weight = next(c.weight for c in model.priority_classes if c.name == "opportunistic")
    by_pool = {p["name"]: {s["name"]: s for s in p["shares"]} for p in document["pools"]}
    assert by_pool["ec2-gpu"]["training"]["max_run"] == {"seconds": 3600, "by_priority": {str(weight): 1800}}
    assert by_pool["ec2-gpu"]["research"]["max_run"] == {"seconds": None, "by_priority": {str(weight): 1800}}
    # elsewhere the backend holds them (Slurm, the guard, admission): not the controller's to stop
    assert not any("max_run" in s for name, shares in by_pool.items() if name != "ec2-gpu" for s in shares.values())
    (training,) = [s for s in runtime.pool("ec2-gpu").shares if s.name == "training"]
    assert (training.max_run_of(weight), training.max_run_of(weight + 1)) == (1800, 3600)
    (research,) = [s for s in runtime.pool("ec2-gpu").shares if s.name == "research"]
    assert (research.max_run_of(weight), research.max_run_of(weight + 1)) == (1800, None)


@pytest.mark.parametrize(
    "max_run, problem",
    [
        ({"seconds": 0}, "max_run.seconds: 0"),
        ({"seconds": "1h"}, "max_run.seconds: '1h'"),
        ({"seconds": 60, "by_priority": {"high": 60}}, "max_run.by_priority: 'high'"),
        ({"seconds": 60, "by_priority": {"50": -1}}, "max_run.by_priority.50: -1"),
        ("60", "max_run: '60'"),
    ],
)
def test_a_bad_limit_in_the_policy_document_is_refused_naming_it(max_run, problem):
    from gpu_governance_runtime.policy import PolicyError

    document = {
        "version": 1,
        "organisation": "acme",
        "capacity_windows": [],
        "priority_classes": [{"name": "standard", "weight": 50}],
        "pools": [
            {
                "name": POOL,
                "backend": "batch_fair_share",
                "capacity": {G6E: 8},
                "shares": [share("research", 8, "lend", max_run=max_run)],
            }
        ],
    }
    with pytest.raises(PolicyError) as error:
        parse_policy(document)
    assert problem in str(error.value)
