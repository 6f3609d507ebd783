"""Drive the real reclaim controller (``handler.run_tick`` with the Batch fair-share adapter) over
simulated time against the Batch model, with faults injected at every Batch call boundary, and
check the invariants after every step:

- no job lost: every job a team submitted is running, waiting, SUCCEEDED, FAILED on its own, or
  stopped by the controller and brought back (its copy exists, or its preemption is still open in
  the ledger and is finished once the faults stop);
- never two copies of one job running (STARTING / RUNNING) at once;
- the per-tick cap held: at most ``max_preemptions_per_tick`` TerminateJob requests per pool and minute;
- nothing changed in dry run: no TerminateJob and no SubmitJob of a copy.

Used by tests/aws_model/test_scenarios.py (a short scenario) and benchmarks/aws_scenarios.py (a month).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from gpu_governance_runtime.common.batch_copy import stopped_by_us
from gpu_governance_runtime.contract import TAG_REQUEUED_FROM
from gpu_governance_runtime.policy import parse_policy
from gpu_governance_runtime.reclaim import handler
from gpu_governance_runtime.reclaim.adapters import BatchFairShareAdapter
from gpu_governance_runtime.reclaim.ledger import Ledger
from gpu_governance_runtime.reclaim.planner import Settings

from .batch import Clock, Crash, FakeBatch, Faults
from .dynamodb import FakeDynamoDB

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
G6E = "g6e.12xlarge"
POOL = "ec2-gpu"
POLICY = parse_policy(
    {
        "version": 1,
        "organisation": "acme",
        "capacity_windows": [],
        "priority_classes": [],
        "pools": [
            {
                "name": POOL,
                "backend": "batch_fair_share",
                "capacity": {G6E: 16},
                "shares": [
                    {
                        "name": "research",
                        "quota": {G6E: 4},
                        "strategy": "lend_and_borrow",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 10,
                    },
                    {
                        "name": "training",
                        "quota": {G6E: 12},
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
TICK = 60.0
# Faults per Batch call: each call is throttled, answered too late (after AWS did it) or the
# caller killed with these probabilities (on the calls the controller makes, not the teams').
FAULT_RATES = {"throttle": 0.02, "timeout": 0.02, "crash": 0.005}
RECLAIM_SETTINGS = Settings(max_preemptions_per_tick=3)
# The teams' jobs (share, instances, hours, priority, mean seconds between two): research about
# 6 instance-hours an hour (above its quota of 4: it borrows), training about 6 in bursts of 2-8
# instances (it takes its quota back), 12 on 16 instances (74 %, before the work preemptions lose).
# Above the pool's capacity the waiting jobs pile up without end and every tick reads more of them.
WORKLOAD = (("research", (1, 2, 4), (0.5, 3), 10, 2400.0), ("training", (2, 4, 8), (1, 4), 50, 7200.0))


@dataclass
class Report:
    ticks: int = 0
    submitted: int = 0
    preempted: int = 0
    copies: int = 0
    faults: Counter = field(default_factory=Counter)
    crashes: int = 0
    failed_ticks: int = 0

    def summary(self) -> str:
        return (
            f"{self.ticks} ticks, {self.submitted} jobs submitted, {self.preempted} preemptions, {self.copies} copies, "
            f"{self.failed_ticks} failed and {self.crashes} crashed ticks"
        )


class InvariantBroken(AssertionError):
    pass


def run(
    *,
    days: float,
    seed: int = 1,
    dry_run: bool = False,
    settings: Settings = RECLAIM_SETTINGS,
    fault_rates: dict[str, float] = FAULT_RATES,
    duplicate_rate: float = 0.05,
) -> Report:
    """Simulate ``days`` of one-minute ticks on a 16-instance fair-share pool; raise InvariantBroken
    at the first step that breaks an invariant. The ledger is the DynamoDB model, faulted like Batch."""
    rng = random.Random(seed)
    clock = Clock()
    faults = Faults(lambda operation, phase: fault(rng, fault_rates, phase))
    batch = FakeBatch(clock, capacity={QUEUE: 16}, faults=faults, listing_lag=30.0)
    dynamodb = FakeDynamoDB(faults=faults)
    dynamodb.create_table("ledger", key="action_id")
    ledger, report, checks = (
        Ledger(dynamodb.table("ledger")),
        Report(),
        Checks(batch, settings.max_preemptions_per_tick, dry_run),
    )
    end = clock.now + days * 86400
    while clock.now < end:
        _arrivals(rng, batch, report)
        batch.advance(TICK)
        if rng.random() < 0.002 and (running := [j for j in batch.active.values() if j["status"] == "RUNNING"]):
            batch.fail_on_its_own(rng.choice(running)["jobId"])  # a host failure: the job's own retry strategy applies
        # a duplicated event: the same tick twice [aws: events.lambda-async-retries]
        for _ in range(2 if rng.random() < duplicate_rate else 1):
            _tick(batch, ledger, settings, dry_run, report)
        checks.step()
    faults.plan = lambda operation, phase: None  # the faults stop: every open preemption must now be finished
    for _ in range(10):
        batch.advance(TICK)
        _tick(batch, ledger, settings, dry_run, report)
    checks.final()
    report.faults = Counter(fault for _, _, fault in faults.injected)
    report.copies = sum(1 for j in batch.jobs.values() if TAG_REQUEUED_FROM in j["tags"])
    return report


def fault(rng: random.Random, rates: dict[str, float], phase: str) -> str | None:
    """Before a call: a throttle or a crash; after it (AWS did it): a lost answer or a crash."""
    roll = rng.random()
    for fault in ("throttle", "crash") if phase == "before" else ("timeout", "crash"):
        if roll < rates[fault] / 2 if fault == "crash" else roll < rates[fault]:
            return fault
        roll -= rates[fault]
    return None


def _arrivals(rng: random.Random, batch: FakeBatch, report: Report) -> None:
    """The WORKLOAD's arrivals in one tick: research borrows with short jobs, training comes back with big ones."""
    for share, nodes, hours, priority, between in WORKLOAD:
        if rng.random() < TICK / between:
            batch.add_job(
                jobName=f"{share}-{report.submitted}",
                jobQueue=QUEUE,
                jobDefinition=f"arn:aws:batch:us-east-1:111122223333:job-definition/{share}:3",
                shareIdentifier=share,
                schedulingPriorityOverride=priority,
                retryStrategy={"attempts": 2},
                timeout={"attemptDurationSeconds": 86400},
                parameters={"work_seconds": str(int(rng.uniform(*hours) * 3600))},
                nodeOverrides={"numNodes": rng.choice(nodes)},
                tags={"gpu-governance:team": share},
            )
            report.submitted += 1


def _tick(batch: FakeBatch, ledger: Ledger, settings: Settings, dry_run: bool, report: Report) -> None:
    adapter = BatchFairShareAdapter(batch, job_queue=QUEUE, pool=POLICY.pool(POOL), submit=batch)
    try:
        result = handler.run_tick(
            POOL,
            adapter,
            ledger,
            settings=settings,
            dry_run=dry_run,
            namespace="Scenario",
            now=batch.clock.now,
            emit=lambda record: None,
        )
        report.preempted += result.acted
    except Crash:
        report.crashes += 1  # the invocation died: the next tick starts afresh
    except Exception:  # noqa: BLE001 - a fault in the read: the handler counts it in PoolErrors, the next tick reads again
        report.failed_ticks += 1
    report.ticks += 1


class Checks:
    """The invariants, checked incrementally (each step looks only at what is new since the last),
    so a month of steps costs linear time. ``cap``: TerminateJob requests allowed per minute (None: any)."""

    def __init__(self, batch: FakeBatch, cap: int | None, dry_run: bool):
        self.batch, self.cap, self.dry_run = batch, cap, dry_run
        self.root: dict[str, str] = {}  # job -> the job a team submitted, through its copies
        self.copied: set[str] = set()
        self.seen_requests = 0
        self.terminations: Counter = Counter()  # minute -> TerminateJob requests

    def step(self) -> None:
        jobs = self.batch.jobs
        for job_id in list(jobs)[len(self.root) :] if len(jobs) > len(self.root) else ():
            original = jobs[job_id]["tags"].get(TAG_REQUEUED_FROM)
            if original is not None:
                if original in self.copied:
                    raise InvariantBroken(f"job {original} copied more than once")
                self.copied.add(original)
            self.root[job_id] = self.root[original] if original is not None else job_id
        running = Counter(
            self.root[j["jobId"]] for j in self.batch.active.values() if j["status"] in ("STARTING", "RUNNING")
        )
        if running and max(running.values()) > 1:
            raise InvariantBroken(f"a job runs twice at once: {running.most_common(1)}")
        minutes = set()  # the minutes this step's TerminateJob requests fell in: only those can have gone over the cap
        for operation, request in self.batch.requests[self.seen_requests :]:
            if operation == "TerminateJob":
                minutes.add(minute := int(request["_at"] // 60))
                self.terminations[minute] += 1
                if self.dry_run:
                    raise InvariantBroken("dry run stopped a job")
            if operation == "SubmitJob" and TAG_REQUEUED_FROM in request.get("tags", {}) and self.dry_run:
                raise InvariantBroken("dry run submitted a copy")
        self.seen_requests = len(self.batch.requests)
        if self.cap is not None and (over := [m for m in minutes if self.terminations[m] > self.cap]):
            raise InvariantBroken(f"more than {self.cap} preemptions in minute {over[0]}: {self.terminations[over[0]]}")

    def final(self) -> None:
        self.step()
        for job in self.batch.jobs.values():
            if stopped_by_us(job) and job["jobId"] not in self.copied:
                raise InvariantBroken(
                    f"job {self.root[job['jobId']]} lost: {job['jobId']} was stopped by the controller and never brought back"
                )
