"""Issue 38, row 3: nothing a team submits keeps capacity it borrowed from the team that lent it.

Until issue 38 the planner never took a job its backend could not bring back (a Batch array
job, a job others depend on), and the Batch adapter left out a running job whose instance type
it could not tell in a pool of several types: a team kept lent capacity for ever by submitting
its work as an array, with a PENDING job depending on it, or without the type tag, and the lender
waited below its guarantee (reason ``min_run_time_s``, or nothing at all). The rules now
(docs/reclaim.md, *Jobs that cannot come back*): such a job counts against its own team's quota
first, is reclaimable beyond it and stopped for good; a job of unknown type counts on every type
and is the first to reclaim on each.

The property at the end drives the real adapter: a generated pool, as Batch would describe it,
with the borrowers' jobs in any form they may choose, is read and planned, and the plan is held
against where the jobs really run.
"""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import given, strategies as st

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the handler builds its clients on import

from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter
from gpu_governance_runtime.contract import (
    TAG_CHECKPOINTABLE,
    TAG_INSTANCE_TYPE,
    TAG_REQUEUED_FROM,
    TAG_TIMES_PREEMPTED,
)
from gpu_governance_runtime.planners.reclaim import (
    ANTI_THRASH,
    ANY_TYPE,
    IN_SHARE,
    MIN_RUN_TIME,
    RECLAIM,
    PendingJob,
    Plan,
    PoolState,
    RunningJob,
    Settings,
    Share,
    Strategy,
    apply_plan,
    pending_guarantee_jobs,
    plan_tick,
    starved_shares,
)
from gpu_governance_runtime.policy import PoolPolicy
from gpu_governance_runtime.reclaim.reports import share_metrics

from .safety import check_safety, in_share_victims_of_lower_priority, reclaim_only_borrowed_capacity
from .strategies import NOW, PROPERTY_SETTINGS, pool_states

P4, P5 = "p4", "p5"
UNCAPPED = Settings(min_run_time_s=600, max_preemptions_per_tick=10_000, max_preemption_searches_per_tick=10_000)


def running(job_id, team, count, instance_type=P5, priority=1, started_at=0.0, **extra):
    return RunningJob(
        job_id=job_id,
        share=team,
        instance_type=instance_type,
        count=count,
        priority=priority,
        started_at=started_at,
        **extra,
    )


def pending(job_id, team, count, instance_type=P5, priority=1):
    return PendingJob(
        job_id=job_id, share=team, instance_type=instance_type, count=count, priority=priority, submitted_at=0.0
    )


LENDER = Share(name="lender", quota={P5: 4}, strategy=Strategy.LEND)
BORROWER = Share(name="borrower", quota={P5: 2}, strategy=Strategy.LEND_AND_BORROW, in_share_preemption=True)


def pool(running_jobs, pending_jobs, capacity=None, shares=(LENDER, BORROWER)):
    return PoolState(
        capacity=capacity or {P5: 6},
        shares=shares,
        running=tuple(running_jobs),
        pending=tuple(pending_jobs),
        now=NOW,
    )


# --- the planner's rules, one scenario each ---------------------------------------------------


def test_jobs_that_cannot_come_back_count_against_their_teams_quota_first_and_beyond_it_are_stopped_for_good():
    """The borrower runs two array children (not restartable) and two ordinary jobs on a quota of
    2 and borrows 4 of the lender's. The lender wants 4 back: the ordinary jobs go first (they come
    back), though the children have lower priority and ran for less; then one child, as the
    children alone are beyond the quota too. Until issue 38 the children were never victims and
    the lender waited with reason min_run_time_s."""
    state = pool(
        [
            running("child-0", "borrower", 1, priority=0, started_at=NOW - 10, restartable=False),
            running("child-1", "borrower", 2, priority=0, started_at=NOW - 20, restartable=False),
            running("plain-a", "borrower", 2, priority=5, started_at=NOW - 9_000),
            running("plain-b", "borrower", 1, priority=5, started_at=NOW - 8_000),
        ],
        [pending("claim", "lender", 4)],
    )
    plan = plan_tick(state, UNCAPPED)
    check_safety(state, UNCAPPED, plan)
    assert sorted(p.job_id for p in plan.preemptions) == ["child-0", "plain-a", "plain-b"]
    assert [s.job_id for s in plan.starts] == ["claim"] and plan.waits == ()
    (child,) = [p for p in plan.preemptions if p.job_id == "child-0"]
    assert child.reason.endswith(
        "it cannot be brought back as it was and runs beyond its team's quota: stopped for good"
    )
    after = apply_plan(state, plan)
    assert {j.job_id for j in after.pending} == {"plain-a", "plain-b"}  # requeued; the child is gone
    assert {j.job_id for j in after.running} == {"child-1", "claim"}  # inside the borrower's quota
    assert plan_tick(after, UNCAPPED).preemptions == ()


def test_jobs_that_cannot_come_back_inside_their_teams_quota_are_never_reclaimed():
    state = pool(
        [
            running("child", "borrower", 2, priority=0, restartable=False),
            running("plain", "borrower", 4, priority=9, started_at=NOW - 1),
        ],
        [pending("claim", "lender", 4)],
    )
    plan = plan_tick(state, UNCAPPED)
    assert [(p.job_id, p.kind) for p in plan.preemptions] == [("plain", RECLAIM)]


def test_in_share_preemption_never_stops_the_teams_own_work_for_good():
    """The pool is full; the borrower's urgent job fits its quota only by taking its own array
    child. It does not: the urgent job is no guarantee job then (it waits, nothing starves, nothing
    is taken). Were the child restartable, it would be preempted in-share."""
    lender = Share(name="lender", quota={P5: 2}, strategy=Strategy.LEND)
    state = pool(
        [running("child", "borrower", 2, priority=0, restartable=False), running("own", "lender", 2)],
        [pending("urgent", "borrower", 2, priority=9)],
        capacity={P5: 4},
        shares=(lender, BORROWER),
    )
    plan = plan_tick(state, UNCAPPED)
    assert (plan.preemptions, plan.starts, plan.waits, starved_shares(state)) == ((), (), (), set())
    restartable = replace(state, running=(running("child", "borrower", 2, priority=0), state.running[1]))
    assert [(p.job_id, p.kind) for p in plan_tick(restartable, UNCAPPED).preemptions] == [("child", IN_SHARE)]


def test_a_job_of_unknown_type_counts_on_every_type_is_reclaimed_first_and_once_and_not_requeued():
    """The borrower's job whose type Batch does not report (no type tag, several types) runs,
    truly, on p5; the planner cannot tell. It counts on both types, so the lender's p5 claim
    reclaims it before the borrower's own borrowed p5 job (which comes back; the unknown one would
    come back just as unplaceable), and the p4 planner, after it, does not take it again."""
    lender = Share(name="lender", quota={P4: 2, P5: 2}, strategy=Strategy.LEND)
    borrower = Share(name="borrower", quota={P4: 2, P5: 1}, strategy=Strategy.LEND_AND_BORROW)
    state = pool(
        [
            running("unknown", "borrower", 1, ANY_TYPE, started_at=NOW - 9_000),
            running("typed", "borrower", 2, P5, started_at=NOW - 1),
        ],
        [pending("claim-p5", "lender", 1, P5), pending("claim-p4", "lender", 2, P4)],
        capacity={P4: 3, P5: 3},
        shares=(lender, borrower),
    )
    plan = plan_tick(state, UNCAPPED)
    assert [(p.job_id, p.instance_type) for p in plan.preemptions] == [("unknown", P5)]
    assert "its instance type is not known" in plan.preemptions[0].reason
    assert sorted(s.job_id for s in plan.starts) == ["claim-p4", "claim-p5"] and plan.waits == ()
    after = apply_plan(state, plan)
    assert "unknown" not in {j.job_id for j in (*after.running, *after.pending)}
    # within its team's quota on both types, the unknown job is still the first to go
    inside = replace(state, running=(state.running[0],), pending=(pending("claim", "lender", 2, P4),))
    assert [p.job_id for p in plan_tick(replace(inside, capacity={P4: 2, P5: 3}), UNCAPPED).preemptions] == ["unknown"]


# --- the property: a generated pool through the real Batch adapter ------------------------------


class DescribedQueue:
    """A Batch client over fixed DescribeJobs records: ListJobs by queue and status (array
    children by their parent, and by queue only when ``children_listed``: no page says which),
    DescribeJobs by id."""

    def __init__(self, records: list[dict], children_listed: bool):
        self.records = {r["jobId"]: r for r in records}
        self.children_listed = children_listed

    def get_paginator(self, operation: str):
        assert operation == "list_jobs"
        return self

    def paginate(self, *, jobStatus: str, jobQueue: str | None = None, arrayJobId: str | None = None):
        def listed(record):
            child = "index" in record.get("arrayProperties", {})
            if arrayJobId is not None:
                return child and record["jobId"].startswith(arrayJobId + ":")
            return self.children_listed or not child

        yield {
            "jobSummaryList": [
                {"jobId": r["jobId"], "jobName": r["jobName"]}
                for r in self.records.values()
                if r["status"] == jobStatus and listed(r)
            ]
        }

    def describe_jobs(self, *, jobs: list[str]):
        assert len(jobs) <= 100
        return {"jobs": [self.records[i] for i in jobs if i in self.records]}


@st.composite
def borrowers_submit_anything(draw):
    """A pool as it truly runs (``pool_states``, times in whole milliseconds as Batch keeps them),
    and how Batch describes it when each job's team chose its form freely: a job that cannot come
    back is an array child or has a PENDING dependant; a one-instance job in a pool of two types
    may leave its type tag out; any job may have failed attempts of its own behind it, declare a
    timeout or not, and say it checkpoints."""
    truth = draw(pool_states(paused=True))
    truth = replace(
        truth,
        running=tuple(replace(j, started_at=round(j.started_at, 3)) for j in truth.running),
        pending=tuple(replace(j, submitted_at=round(j.submitted_at, 3)) for j in truth.pending),
    )
    several_types = len(truth.capacity) > 1
    records, renamed, untagged = [], {}, set()
    for job in (*truth.running, *truth.pending):
        is_running = isinstance(job, RunningJob)
        leaves_tag_out = several_types and job.count == 1 and draw(st.booleans())
        record = {
            "jobId": job.job_id,
            "jobName": job.job_id,
            "jobQueue": "queue",
            "status": draw(st.sampled_from(["RUNNING", "STARTING"])) if is_running else "RUNNABLE",
            "shareIdentifier": job.share,
            "schedulingPriority": job.priority,
            "createdAt": int((job.started_at if is_running else job.submitted_at) * 1000),
            "attempts": [{"exitCode": 1}] * draw(st.integers(0, 3)),  # its own failures, retried
            "tags": {TAG_CHECKPOINTABLE: str(job.checkpointable).lower()},
        }
        if draw(st.booleans()):
            record["timeout"] = {"attemptDurationSeconds": draw(st.integers(60, 10**6))}
        if is_running:
            record["startedAt"] = record["createdAt"]
            if job.times_preempted:  # the controllers' own count, on the copy they submitted
                record["tags"] |= {TAG_REQUEUED_FROM: "earlier", TAG_TIMES_PREEMPTED: str(job.times_preempted)}
        if job.count > 1:
            record["nodeProperties"] = {
                "numNodes": job.count,
                "nodeRangeProperties": [{"targetNodes": "0:", "container": {"instanceType": job.instance_type}}],
            }
        elif leaves_tag_out:
            untagged.add(job.job_id)
        else:
            record["tags"][TAG_INSTANCE_TYPE] = job.instance_type
        if is_running and not job.restartable:
            if draw(st.booleans()):  # an array child; its parent PENDING, a sibling done
                parent = f"array-{job.job_id}"
                renamed[job.job_id] = record["jobId"] = f"{parent}:0"
                record["arrayProperties"] = {"index": 0}
                tags = record["tags"]
                if draw(st.booleans()):  # no page says a child shows its parent's share and tags
                    del record["tags"], record["shareIdentifier"]
                records.append(
                    {
                        "jobId": parent,
                        "jobName": parent,
                        "jobQueue": "queue",
                        "status": "PENDING",
                        "shareIdentifier": job.share,
                        "createdAt": record["createdAt"],
                        "tags": tags,
                        "arrayProperties": {"size": 2}
                        | ({"statusSummary": {record["status"]: 1, "SUCCEEDED": 1}} if draw(st.booleans()) else {}),
                    }
                )
            else:  # a job that waits on it, of any team
                records.append(
                    {
                        "jobId": f"after-{job.job_id}",
                        "jobName": "after",
                        "jobQueue": "queue",
                        "status": "PENDING",
                        "shareIdentifier": draw(st.sampled_from(truth.shares)).name,
                        "createdAt": record["createdAt"],
                        "dependsOn": [{"jobId": job.job_id}],
                        "tags": {},
                    }
                )
        records.append(record)
    truth = replace(truth, running=tuple(replace(j, job_id=renamed.get(j.job_id, j.job_id)) for j in truth.running))
    untagged = {renamed.get(i, i) for i in untagged}
    return truth, DescribedQueue(records, children_listed=draw(st.booleans())), untagged


@PROPERTY_SETTINGS
@given(
    borrowers_submit_anything(),
    st.sampled_from([UNCAPPED, Settings(), Settings(min_run_time_s=3_600, max_preemptions_per_tick=2)]),
)
def test_the_planner_never_leaves_a_lender_below_its_guarantee_because_of_what_a_borrower_submitted(
    generated, settings
):
    """Whatever form the other teams gave their jobs, a team that named its jobs' types gets every
    job inside its guarantee started, or the plan names the anti-thrash limit it waits for
    (``min_run_time_s`` only behind a job the controller itself stopped and restarted); every
    start fits the pool as the jobs truly run; and no job whose type its team named is taken from
    inside its team's guarantee."""
    truth, batch, untagged = generated
    policy = PoolPolicy(name="pool", backend="batch_fair_share", capacity=dict(truth.capacity), shares=truth.shares)
    seen = BatchFairShareAdapter(batch, job_queue="queue", pool=policy, submit=batch).read(truth.now)
    plan = plan_tick(seen, settings)
    by_type = {j.job_id: j.instance_type for j in seen.running}

    after = apply_plan(truth, plan)
    for instance_type, capacity in truth.capacity.items():  # where the jobs truly run
        used = sum(j.count for j in after.running if j.instance_type == instance_type)
        assert used <= capacity, f"the plan starts jobs on {instance_type} that it does not have ({used} > {capacity})"

    named = {w.job_id: w for w in plan.waits}
    assert {w.reason for w in plan.waits} <= set(ANTI_THRASH), plan.waits
    controllers_own = {
        j.job_id for j in seen.running if j.times_preempted and NOW - j.started_at < settings.min_run_time_s
    }
    for wait in plan.waits:
        if wait.reason == MIN_RUN_TIME:
            assert controllers_own, f"{wait.job_id} waits for {MIN_RUN_TIME} behind no job the controller stopped"
    guessing = {j.share for j in truth.running if j.job_id in untagged}  # counted on every type: their own choice
    if not plan.capped:
        left_waiting = {
            j.job_id
            for j in pending_guarantee_jobs(after.shares, after.running, after.pending)
            if j.share not in guessing and j.job_id not in untagged
        }
        assert left_waiting <= set(named), f"below its guarantee, no reason named: {sorted(left_waiting - set(named))}"

    typed = Plan(
        starts=plan.starts,
        preemptions=tuple(p for p in plan.preemptions if by_type[p.job_id] != ANY_TYPE),
        capped=plan.capped,
    )
    reclaim_only_borrowed_capacity(truth, settings, typed)
    in_share_victims_of_lower_priority(truth, settings, plan)
    # what the adapter read: every running job, those without a type tag of ANY_TYPE, the rest as they run
    assert {i for i, t in by_type.items() if t == ANY_TYPE} == untagged & {j.job_id for j in truth.running}
    assert {j.job_id: j.restartable for j in seen.running} == {j.job_id: j.restartable for j in truth.running}


def test_a_job_stopped_for_good_counts_its_whole_run_as_lost_even_if_it_checkpoints():
    """Nothing requeues it, so its checkpoints resume nothing: the LostCapacitySeconds metric
    counts it, and the event says it was stopped for good."""
    state = pool(
        [running("child", "borrower", 4, started_at=NOW - 100, checkpointable=True, restartable=False)],
        [pending("claim", "lender", 4)],
    )
    plan = plan_tick(state, UNCAPPED)
    assert [p.job_id for p in plan.preemptions] == ["child"]
    (borrower,) = [r for r in share_metrics("pool", state, plan, namespace="Test", now=NOW) if r["Share"] == "borrower"]
    assert (borrower["Preemptions"], borrower["LostCapacitySeconds"]) == (1, 400.0)
