"""Drive the real reclaim controller over simulated time against the Batch model, with faults
injected at every call boundary, and check invariants read from AWS's side after every step.

The controller runs as its Lambda does: ``handler.run_tick`` on the adapter ``handler.build_adapter``
builds from the handler's own clients, which here are real boto3 clients answered by the models
(:mod:`tests.aws_model.sdk`), each with the retry configuration the handler gave it: the reads and
actions retry (``WITHIN_A_TICK``), a stopped job's copy is sent once (``SUBMIT_ONCE``), and a request
retried after its answer was lost reaches the model again. The ledger is the DynamoDB model behind
the handler's own DynamoDB configuration.

Faults (:class:`FaultPlan`) are drawn per request, ``WRITE_WEIGHT`` times likelier on the calls that
change something; a throttle may last several attempts (an outage that outlasts the SDK's retries).
The function runs as deployed (constructs_lib/controllers/reclaim.py: no retry of a failed invocation,
one run at a time): 5 % of the schedule's events are delivered twice [aws: events.lambda-async-retries],
and 5 % run late, with the next minute's, having waited while the tick before still ran
[aws: events.lambda-throttled-events-run-late].

Checked (:class:`Checks`), from the models' own records, never from what the controller says:

- no job lost: every job a TerminateJob of the controller stopped (the model records who stopped
  it) has its copy by the end (the faults stop for the last ticks, so every open preemption can finish);
- never two copies of one job, never two jobs of one chain running (STARTING / RUNNING) at once;
- a copy is its original as DescribeJobs showed it, field by field (definition, queue, share,
  priority, parameters, retry strategy, timeout, container, nodes, dependencies, tags), with the two
  platform tags added;
- the per-minute cap held: at most ``max_preemptions_per_tick`` jobs stopped per pool and minute;
- jobs stopped by earlier ticks come back first: a tick that stops a job has first described every
  job an earlier tick stopped that has no copy yet;
- with a grace, a job is stopped only once the ledger's notice to it is the grace old;
- nothing changed in dry run: no mutating call of the controller to any service (the GPU-hour count
  in the ledger aside, which dry run keeps).

Used by tests/aws_model/test_scenarios.py (several seeds, a few hours each) and
benchmarks/aws_scenarios.py (many seeds, a month).
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import botocore.session

from gpu_governance_runtime.common.action_ledger import Ledger
from gpu_governance_runtime.contract import TAG_REQUEUED_FROM, TAG_TIMES_PREEMPTED
from gpu_governance_runtime.planners.reclaim import Settings
from gpu_governance_runtime.policy import parse_policy
from gpu_governance_runtime.reclaim import handler

from . import sdk
from .batch import Clock, Crash, FakeBatch, Faults, _public
from .dynamodb import FakeDynamoDB

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu"
G6E = "g6e.12xlarge"
POOL = "ec2-gpu"
TARGET = {"pool": POOL, "job_queue": QUEUE}
CONTROLLER = "reclaim-controller"  # who sends the controller's requests, in the models' records


def policy(*, grace_s: float = 0.0) -> Any:
    """One 16-instance fair-share pool: research (quota 4) lends and borrows, training (quota 12) lends."""
    return parse_policy(
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
                    "reclaim": {"grace_s": grace_s},
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


POLICY = policy()
TICK = 60.0
# Faults per request the controllers send: throttled, answered too late (after AWS did it) or the
# caller killed, with these probabilities on a read (FAULT_RATES: the Slurm scenario's, on every call
# alike; RECLAIM_FAULT_RATES: the scenarios whose FaultPlan draws them) and WRITE_WEIGHTS times them on a write.
FAULT_RATES = {"throttle": 0.02, "timeout": 0.02, "crash": 0.005}
RECLAIM_FAULT_RATES = {"throttle": 0.01, "timeout": 0.01, "crash": 0.0015}
# The calls that change something, whose faults the controllers must survive above all: the ledger's
# writes, and (twice as likely again, being fewer) the calls that stop, submit, switch or tell.
ACTIONS = (
    "SubmitJob",
    "TerminateJob",
    "UpdateQuotaShare",
    "TerminateServiceJob",
    "UpdateComputeQuota",
    "PutEvents",
    "Publish",
    "PurchaseCapacityBlock",
)
WRITE_WEIGHTS = {"PutItem": 8, "UpdateItem": 8, **dict.fromkeys(ACTIONS, 16)}
WRITES = frozenset(WRITE_WEIGHTS)
# How many attempts in a row one throttle lasts: 5 outlasts the controllers' retrying clients (5 attempts).
OUTAGE_ATTEMPTS = (1, 1, 2, 5)
# How long a job just submitted stays out of ListJobs [aws: batch.listing-lags]: mostly seconds, at times
# minutes (below common/batch_copy.LISTING_GRACE_SECONDS, the longest lag the copies are designed for).
LISTING_LAGS = (5.0, 30.0, 30.0, 90.0, 240.0)
RECLAIM_SETTINGS = Settings(max_preemptions_per_tick=3)


@dataclass(frozen=True)
class Workload:
    # (share, instances, hours, priority, mean seconds between two arrivals)
    arrivals: tuple[tuple[str, tuple[int, ...], tuple[float, float], int, float], ...]
    at_start: int = 0  # one-instance research jobs submitted as the run begins: the pool starts full of borrowers


# Research about 6 instance-hours an hour (above its quota of 4: it borrows), training about 6 in bursts
# of 2-8 instances (it takes its quota back), 12 on 16 instances (74 %, before the work preemptions lose).
# Above the pool's capacity the waiting jobs pile up without end and every tick reads more of them.
WORKLOAD = Workload((("research", (1, 2, 4), (0.5, 3), 10, 2400.0), ("training", (2, 4, 8), (1, 4), 50, 7200.0)))
# A few hours of contention (make test's runs): research fills the pool from the start and keeps it full
# with short jobs, training takes its quota back every half hour, often more than the cap at once.
BUSY = Workload(
    (("research", (1, 1, 2), (0.3, 1.5), 10, 300.0), ("training", (4, 8), (0.5, 1.5), 50, 1800.0)), at_start=16
)
# What a copy must carry over from its original as DescribeJobs shows it (common/batch_copy.copy_request).
COPIED_FIELDS = (
    "jobName",
    "jobQueue",
    "jobDefinition",
    "shareIdentifier",
    "schedulingPriority",
    "parameters",
    "retryStrategy",
    "timeout",
    "propagateTags",
    "container",
    "nodeProperties",
    "dependsOn",
)


class FaultPlan:
    """``Faults.plan``: per request attempt, before it reaches AWS a throttle (which may go on for
    the next ``OUTAGE_ATTEMPTS`` attempts of the operation), a timeout (the request was lost on its
    way: the caller cannot tell it from a lost answer) or a crash; after AWS carried it out a lost
    answer or a crash. Timeouts and crashes split their rate between the two phases. A write draws
    its ``WRITE_WEIGHTS`` times the rates."""

    def __init__(self, rng: random.Random, rates: dict[str, float]):
        self.rng, self.rates = rng, rates
        self.outages: Counter = Counter()  # operation -> throttled attempts still to come
        self.forced: dict[tuple[str, str], list[str]] = {}  # (operation, phase) -> the faults its next requests meet
        self.on = True

    def force(self, operation: str, phase: str, *faults: str) -> None:
        """The next requests of ``operation`` meet ``faults`` in ``phase``, one each, whatever the draw."""
        self.forced.setdefault((operation, phase), []).extend(faults)

    def every_kind_on(self, operations: Iterable[str]) -> None:
        """Each of ``operations`` meets each kind of fault at least once: its first requests are lost on
        their way, answered too late, and killed after AWS carried them out (between the call and its record)."""
        for operation in operations:
            self.force(operation, "before", "timeout")
            self.force(operation, "after", "timeout", "crash")

    def __call__(self, operation: str, phase: str) -> str | None:
        if self.forced.get((operation, phase)):
            return self.forced[operation, phase].pop(0)
        if not self.on:
            return None
        if phase == "before" and self.outages[operation] > 0:
            self.outages[operation] -= 1
            return "throttle"
        weight = WRITE_WEIGHTS.get(operation, 1)
        roll = self.rng.random()
        for fault in ("throttle", "timeout", "crash") if phase == "before" else ("timeout", "crash"):
            rate = self.rates[fault] * weight / (1 if fault == "throttle" else 2)
            if roll < rate:
                if fault == "throttle":
                    self.outages[operation] = self.rng.choice(OUTAGE_ATTEMPTS) - 1
                return fault
            roll -= rate
        return None


def fault(rng: random.Random, rates: dict[str, float], phase: str) -> str | None:
    """Before a call: a throttle or a crash; after it (AWS did it): a lost answer or a crash (the
    block and Slurm scenarios' faults, the same on every call)."""
    roll = rng.random()
    for fault in ("throttle", "crash") if phase == "before" else ("timeout", "crash"):
        if roll < rates[fault] / 2 if fault == "crash" else roll < rates[fault]:
            return fault
        roll -= rates[fault]
    return None


class FaultCounts:
    """What a scenario's report counts of the faults it drew: ``faults``, (operation, phase, fault) -> count."""

    faults: Counter

    def on(self, operation: str, fault: str, phase: str | None = None) -> int:
        """Faults of kind ``fault`` drawn on ``operation`` (in ``phase``, or either)."""
        return sum(n for (o, p, f), n in self.faults.items() if o == operation and f == fault and phase in (None, p))


@dataclass
class Report(FaultCounts):
    ticks: int = 0
    submitted: int = 0
    preempted: int = 0  # jobs the controller stopped, as Batch recorded it
    copies: int = 0
    resumed: int = 0  # stopped jobs an earlier tick left open, brought back by a later one
    notices: int = 0  # victims told of their grace (a ledger notice)
    planned: int = 0  # preemptions a dry run planned
    open_at_dry_run: int = 0  # preemptions open in the ledger when the controller went to dry run
    cap_reached: int = 0  # minutes in which the cap of preemptions was reached
    duplicates: int = 0  # ticks delivered twice
    late: int = 0  # events run late, in the same minute as the next one
    crashes: int = 0
    failed_ticks: int = 0
    faults: Counter = field(default_factory=Counter)  # (operation, phase, fault) -> count

    def summary(self) -> str:
        return (
            f"{self.ticks} ticks ({self.duplicates} delivered twice, {self.late} late), "
            f"{self.submitted} jobs submitted, {self.preempted} preemptions, {self.copies} copies, "
            f"{self.resumed} brought back by a later tick, cap reached in {self.cap_reached} minutes, "
            f"{self.notices} grace notices, {self.open_at_dry_run} open when put in dry run, {self.planned} planned in it, "
            f"{self.failed_ticks} failed and {self.crashes} crashed ticks"
        )


class InvariantBroken(AssertionError):
    pass


def summed(reports: Iterable[Any]) -> Any:
    """The first of ``reports`` with every count of the others added (a scenario's report is a dataclass of counts)."""
    reports = iter(reports)
    total = next(reports)
    for report in reports:
        for name, value in vars(report).items():
            setattr(total, name, getattr(total, name) + value)
    return total


class Function:
    """The reclaim function's execution environment on the models: the handler's own module clients
    (``handler.batch``, ``handler.batch_submit``, ...) answered by ``models`` (``batch=``,
    ``sagemaker=``, ``events=``), each with the configuration the handler built it with, and the
    ledger on the DynamoDB model behind the handler's DynamoDB configuration; every request recorded
    in ``calls`` as the controller's, botocore's backoff skipped. A killed invocation takes its
    environment with it (:meth:`cold_start`): the next one builds new clients, whose retry quotas
    start full again."""

    def __init__(self, calls: sdk.Calls, dynamodb: FakeDynamoDB, **models: Any):
        self.calls, self.dynamodb, self.models = calls, dynamodb, models
        self.ledger: Ledger
        self._patch: Any = None

    def __enter__(self) -> Function:
        self._backoff = sdk.no_backoff()
        self._backoff.__enter__()
        self.cold_start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._patch.stop()
        self._backoff.__exit__(*exc)

    def cold_start(self) -> None:
        if self._patch is not None:
            self._patch.stop()
        clients = {}
        for name, model in self.models.items():
            for client in {"batch": ("batch", "batch_submit")}.get(name, (name,)):
                config = getattr(handler, client).meta.config
                clients[client] = model.client(config=config, by=CONTROLLER, calls=self.calls)
        self._patch = mock.patch.multiple(handler, **clients)
        self._patch.start()
        config = handler.dynamodb.meta.client.meta.config
        self.ledger = Ledger(self.dynamodb.table("ledger", config=config, by=CONTROLLER, calls=self.calls))


def run(
    *,
    days: float,
    seed: int = 1,
    dry_run: bool = False,
    dry_run_after: float | None = None,
    grace_s: float = 0.0,
    settings: Settings = RECLAIM_SETTINGS,
    fault_rates: dict[str, float] = RECLAIM_FAULT_RATES,
    duplicate_rate: float = 0.05,
    late_rate: float = 0.05,
    workload: Workload = WORKLOAD,
) -> Report:
    """Simulate ``days`` of one-minute ticks on a 16-instance fair-share pool; raise InvariantBroken
    at the first step that breaks an invariant. ``dry_run_after``: the controller acts for this many
    days, until a tick is killed right after it stopped a job, and is in dry run from the next tick
    on, that preemption still open in its ledger; it acts again for the last ticks.
    ``grace_s``: the pool's grace before a victim is stopped."""
    rng = random.Random(seed)
    clock, calls = Clock(), sdk.Calls()
    plan = FaultPlan(rng, fault_rates)
    if any(fault_rates.values()):
        plan.every_kind_on(("TerminateJob", "SubmitJob", "PutItem", "UpdateItem"))
    faults = Faults(plan)
    batch = FakeBatch(clock, capacity={QUEUE: 16}, faults=faults, listing_lag=lambda: rng.choice(LISTING_LAGS))
    dynamodb = FakeDynamoDB(faults=faults, clock=clock)
    dynamodb.create_table("ledger", key="action_id")
    report, pool_policy = Report(), policy(grace_s=grace_s)
    tick_settings = pool_policy.pool(POOL).settings(settings)
    checks = Checks(
        batch,
        settings.max_preemptions_per_tick,
        dry_run,
        calls=calls,
        grace_s=grace_s,
        notice_at=lambda job_id, attempt: _notice_at(dynamodb, job_id, attempt),
    )
    # the dry run to come: "acting" until dry_run_after, then "armed" (the next TerminateJob's tick is killed after it)
    switch = None if dry_run_after is None else "acting"
    acting_until = clock.now + (dry_run_after or 0) * 86400
    late = 0  # events delivered late: they run with the next minute's
    end = clock.now + days * 86400

    def invoke() -> None:
        """One invocation of the function: run_tick on the pool, as ``handler.handler`` builds it."""
        nonlocal dry_run, switch
        if switch == "acting" and clock.now >= acting_until:
            switch = "armed"
            plan.force("TerminateJob", "after", "crash")
        elif switch == "armed" and not plan.forced.get(("TerminateJob", "after")):
            # the last tick was killed after stopping a job: from this one on, the dry run must leave it as it is
            switch, dry_run, report.open_at_dry_run = "dry", True, len(_open_actions(dynamodb))
            checks.dry_run_from(len(calls))
        checks.step()
        owed = checks.owed()  # stopped by earlier ticks and not back yet: described before anything is stopped
        since, emitted = len(calls), []
        try:
            handler.run_tick(
                POOL,
                handler.build_adapter(TARGET, pool_policy),
                function.ledger,
                settings=tick_settings,
                dry_run=dry_run,
                namespace="Scenario",
                now=clock.now,
                emit=emitted.append,
            )
        except Crash:
            report.crashes += 1  # the invocation died, and its environment with it
            function.cold_start()
        except Exception:  # noqa: BLE001 - a fault in the read: the handler counts it in PoolErrors, the invocation ends well
            report.failed_ticks += 1
        report.ticks += 1
        checks.step()  # what the tick changed, before what it did first
        report.resumed += sum(1 for r in emitted if r.get("event") == "preemption_resumed" and r["outcome"] == "done")
        report.planned += sum(1 for r in emitted if r.get("event") == "preemption" and r["outcome"] == "planned")
        checks.resumed_first(owed, calls[since:])

    for _ in range(workload.at_start):
        _submit(rng, batch, report, "research", 1, (0.5, 2), 10)
    with Function(calls, dynamodb, batch=batch) as function:
        while clock.now < end:
            _arrivals(rng, batch, report, workload)
            batch.advance(TICK)
            if rng.random() < 0.002 and (running := [j for j in batch.active.values() if j["status"] == "RUNNING"]):
                batch.fail_on_its_own(
                    rng.choice(running)["jobId"]
                )  # a host failure: the job's own retry strategy applies
            for _ in range(late):
                invoke()
            report.late, late = report.late + late, 0
            if rng.random() < late_rate:
                late = 1  # this minute's event waits for the function: it runs with the next one
            else:
                invoke()
            if rng.random() < duplicate_rate:  # the same event delivered twice
                report.duplicates += 1
                invoke()
            checks.step()
        plan.on = False  # the faults stop: every open preemption must now be finished
        if dry_run_after is not None:  # and the controller acts again: what the dry run left open is finished now
            dry_run = False
            checks.acting_from(len(calls))
        for _ in range(10):
            batch.advance(TICK)
            invoke()
            checks.step()
    checks.final()
    report.faults = Counter(faults.injected)
    report.copies = sum(1 for j in batch.jobs.values() if TAG_REQUEUED_FROM in j["tags"])
    report.preempted = sum(1 for j in batch.jobs.values() if j.get("_stopped_by") == CONTROLLER)
    report.cap_reached = sum(1 for n in checks.stops.values() if n >= settings.max_preemptions_per_tick)
    report.notices = len([k for k in dynamodb.tables["ledger"][1] if k.endswith("#notice")])
    return report


def _arrivals(rng: random.Random, batch: FakeBatch, report: Report, workload: Workload) -> None:
    """The workload's arrivals in one tick: research borrows with short jobs, training comes back with big ones."""
    for share, nodes, hours, priority, between in workload.arrivals:
        if rng.random() < TICK / between:
            _submit(rng, batch, report, share, rng.choice(nodes), hours, priority)


def _submit(
    rng: random.Random,
    batch: FakeBatch,
    report: Report,
    share: str,
    count: int,
    hours: tuple[float, float],
    priority: int,
) -> None:
    """A team's job of ``count`` instances. Each sets what a copy must carry (command, environment,
    resources, retry strategy with its exit conditions, timeout, parameters, tags): a copy that drops
    one is seen."""
    container = {
        "command": ["python", "train.py", f"--run={report.submitted}"],
        "environment": [{"name": "RUN", "value": str(report.submitted)}],
        "resourceRequirements": [{"type": "GPU", "value": "4"}],
    }
    batch.add_job(
        jobName=f"{share}-{report.submitted}",
        jobQueue=QUEUE,
        jobDefinition=f"arn:aws:batch:us-east-1:111122223333:job-definition/{share}:3",
        shareIdentifier=share,
        schedulingPriorityOverride=priority,
        retryStrategy={"attempts": 2, "evaluateOnExit": [{"onStatusReason": "Host EC2*", "action": "RETRY"}]},
        timeout={"attemptDurationSeconds": 86400},
        parameters={"work_seconds": str(int(rng.uniform(*hours) * 3600)), "seed": str(rng.randrange(1000))},
        propagateTags=True,
        tags={"gpu-governance:team": share, "project": f"p{rng.randrange(3)}"},
        **(
            {"containerOverrides": container}
            if count == 1
            else {
                "nodeOverrides": {
                    "numNodes": count,
                    "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": container}],
                }
            }
        ),
    )
    report.submitted += 1


def _open_actions(dynamodb: FakeDynamoDB) -> list[str]:
    """The pool's open preemptions as the ledger table holds them (read from the model, unfaulted)."""
    item = dynamodb.tables["ledger"][1].get(f"open#{POOL}", {})
    return list(item.get("ids", {}).get("SS", []))


def _notice_at(dynamodb: FakeDynamoDB, job_id: str, attempt: int) -> float | None:
    """When the ledger's notice to the job's attempt was given (its ``claimed_at``), or None."""
    item = dynamodb.tables["ledger"][1].get(f"{POOL}#{job_id}#{attempt}#notice")
    return None if item is None else float(item["claimed_at"]["N"])


class Checks:
    """The invariants, checked incrementally (each step looks only at what is new since the last),
    so a month of steps costs linear time. ``cap``: jobs the controllers may stop per minute (None:
    any). ``calls``: the controllers' requests to every service (:class:`sdk.Calls`), which dry run
    must not change anything through; without it, dry run is held to Batch's requests only.
    ``notice_at(job_id, attempt)``: when the ledger told a victim of its ``grace_s``."""

    def __init__(
        self,
        batch: FakeBatch,
        cap: int | None,
        dry_run: bool,
        *,
        calls: sdk.Calls | None = None,
        grace_s: float = 0.0,
        notice_at: Callable[[str, int], float | None] | None = None,
    ):
        self.batch, self.cap, self.calls = batch, cap, calls
        self.grace_s, self.notice_at = grace_s, notice_at
        # the calls made in dry run: self.calls[since:until] (until None: up to now)
        self.dry_run_calls: tuple[int, int | None] | None = (0, None) if dry_run else None
        self.root: dict[str, str] = {}  # job -> the job a team submitted, through its copies
        self.copied: set[str] = set()
        self.seen_requests = 0
        self.stops: Counter = Counter()  # minute -> jobs the controllers stopped in it
        self.stopped: set[str] = set()

    def dry_run_from(self, call: int) -> None:
        """The controller is in dry run from ``self.calls[call]`` on."""
        self.dry_run_calls = (call, None)

    def acting_from(self, call: int) -> None:
        """The controller acts again from ``self.calls[call]`` on."""
        if self.dry_run_calls is not None:
            self.step()
            self.dry_run_calls = (self.dry_run_calls[0], call)

    def step(self) -> None:
        jobs = self.batch.jobs
        for job_id in list(jobs)[len(self.root) :] if len(jobs) > len(self.root) else ():
            original = jobs[job_id]["tags"].get(TAG_REQUEUED_FROM)
            if original is not None:
                if original in self.copied:
                    raise InvariantBroken(f"job {original} copied more than once")
                self.copied.add(original)
                self._same_as_original(jobs[job_id], jobs[original])
            self.root[job_id] = self.root[original] if original is not None else job_id
        running = Counter(
            self.root[j["jobId"]] for j in self.batch.active.values() if j["status"] in ("STARTING", "RUNNING")
        )
        if running and max(running.values()) > 1:
            raise InvariantBroken(f"a job runs twice at once: {running.most_common(1)}")
        minutes = set()  # the minutes this step's stops fell in: only those can have gone over the cap
        for operation, request in self.batch.requests[self.seen_requests :]:
            job = jobs.get(request.get("jobId", ""), {})
            stopped_it = job.get("stoppedAt") == int(request["_at"] * 1000) and "_stopped_by" in job
            if operation == "TerminateJob" and stopped_it and job["jobId"] not in self.stopped:
                self.stopped.add(job["jobId"])
                minutes.add(minute := int(request["_at"] // 60))
                self.stops[minute] += 1
                self._given_its_grace(job, request["_at"])
            copies = operation == "SubmitJob" and TAG_REQUEUED_FROM in request.get("tags", {})
            if self.calls is None and self.dry_run_calls is not None and (operation == "TerminateJob" or copies):
                raise InvariantBroken(f"dry run changed Batch: {operation} {request}")
        self.seen_requests = len(self.batch.requests)
        if self.cap is not None and (over := [m for m in minutes if self.stops[m] > self.cap]):
            raise InvariantBroken(f"more than {self.cap} preemptions in minute {over[0]}: {self.stops[over[0]]}")
        if self.calls is not None and self.dry_run_calls is not None:
            since, until = self.dry_run_calls
            if changed := changes_in_dry_run(self.calls[since:until]):
                raise InvariantBroken(f"dry run changed something: {changed[0].operation} {changed[0].request}")

    def owed(self) -> set[str]:
        """Jobs the controllers stopped that have no copy yet."""
        return self.stopped - self.copied

    def resumed_first(self, owed: set[str], calls: list[sdk.Call]) -> None:
        """A tick that stops a job has first described each job in ``owed`` (read at its start)."""
        described: set[str] = set()
        for call in calls:
            if call.operation == "DescribeJobs":
                described.update(call.request["jobs"])
            elif call.operation == "TerminateJob" and (missed := owed - described):
                raise InvariantBroken(
                    f"a tick stopped {call.request['jobId']} before looking at {sorted(missed)[0]}, stopped earlier "
                    "and not brought back"
                )

    def final(self) -> None:
        self.step()
        for job in self.batch.jobs.values():
            if "_stopped_by" in job and job["jobId"] not in self.copied:
                raise InvariantBroken(
                    f"job {self.root[job['jobId']]} lost: {job['jobId']} was stopped by {job['_stopped_by']} "
                    "and never brought back"
                )

    def _same_as_original(self, made: dict[str, Any], original: dict[str, Any]) -> None:
        seen, shown = _as_submitted(made), _as_submitted(original)
        for name in COPIED_FIELDS:
            if seen.get(name) != shown.get(name):
                raise InvariantBroken(
                    f"copy {made['jobId']} of {original['jobId']}: {name} {seen.get(name)!r}, the original's {shown.get(name)!r}"
                )
        expected = {
            **{k: v for k, v in shown["tags"].items() if not k.startswith("aws:")},
            TAG_REQUEUED_FROM: original["jobId"],
            TAG_TIMES_PREEMPTED: str(int(shown["tags"].get(TAG_TIMES_PREEMPTED, "0")) + 1),  # its chain's stops
        }
        if seen["tags"] != expected:
            raise InvariantBroken(
                f"copy {made['jobId']} of {original['jobId']}: tags {seen['tags']}, expected {expected}"
            )

    def _given_its_grace(self, job: dict[str, Any], at: float) -> None:
        if not self.grace_s or self.notice_at is None:
            return
        attempt = max(len(job["attempts"]) - 1, 0)  # the attempt the TerminateJob ended (appended when it stopped it)
        told = self.notice_at(job["jobId"], attempt)
        if told is None or at - told < self.grace_s:
            raise InvariantBroken(
                f"{job['jobId']} stopped {'without a notice' if told is None else f'{at - told:.0f} s after its notice'}"
                f" (grace {self.grace_s:.0f} s)"
            )


# What SubmitJob can set of a job's container (``containerOverrides``, as botocore's Batch model has it):
# DescribeJobs shows more (the instance it ran on, its log stream), which no copy carries.
OVERRIDABLE = frozenset(
    botocore.session.get_session().get_service_model("batch").shape_for("ContainerOverrides").members
)


def _as_submitted(job: dict[str, Any]) -> dict[str, Any]:
    """The job as DescribeJobs shows it (``_public``), its containers as far as SubmitJob sets them; the
    environment without the AWS_BATCH_ names Batch sets on every job itself."""

    def container(shown: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in shown.items() if k in OVERRIDABLE}
        if "environment" in kept:
            kept["environment"] = [e for e in kept["environment"] if not e["name"].startswith("AWS_BATCH")]
        return kept

    shown = copy.deepcopy(_public(job))
    shown["container"] = container(shown.get("container", {}))
    for nodes in shown.get("nodeProperties", {}).get("nodeRangeProperties", []):
        nodes["container"] = container(nodes.get("container", {}))
    return shown


def changes_in_dry_run(calls: list[sdk.Call]) -> list[sdk.Call]:
    """The calls among ``calls`` that change something, but for the one write dry run makes: adding the
    tick's GPU hours to a team's count (reclaim/gpu_hours.py)."""
    return [
        call
        for call in calls
        if call.mutating
        and not (call.operation == "UpdateItem" and call.request["Key"]["action_id"]["S"].startswith("gpu-hours#"))
    ]
