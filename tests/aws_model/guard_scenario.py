"""The submission guard (guard/handler.py) on the AWS models over simulated hours, with faults at
every call: three teams submit SageMaker service jobs to one quota-share queue, most of them
legitimate, some reaching outside their team (another team's execution role or training plan, a tag
key only the platform writes, another team's tag, a run longer than the team's declared limit, or a
Batch job without the team tag). Batch sends a state change event for each change of a job's state
(none for the submission) [aws: events.batch-job-state-change-at-least-once]; each comes late, some
twice, and some are lost to the function's dead-letter queue (Lambda throttled them past their
maximum age [aws: events.lambda-throttled-events-run-late]). An invocation that fails is retried by
Lambda a minute and then two minutes later, and then dead-lettered [aws: events.lambda-async-retries];
the scheduled run every ten minutes (``REDRIVE``) checks the dead-letter queue's events again. A
killed invocation takes its environment with it (new clients, as a cold start).

The guard's clients are real botocore clients with the handler's own configurations (its retries
apply), answered by the models: Batch (``DescribeServiceJob``, ``TerminateServiceJob``), SageMaker
(``ListTags`` of the teams' training plans), the ledger on DynamoDB, the dead-letter queue on SQS;
SNS is called directly (tests/aws_model/messaging.py). Faults are drawn per request, weighted toward
the writes, and ``TerminateServiceJob``, ``Publish`` and the ledger's ``PutItem`` and ``UpdateItem``
each meet every kind (lost on the way, answered too late, the invocation killed after AWS did it).

Checked after every minute, from the models' own records (:class:`GuardChecks`), never from what the
guard says it did:

- no legitimate job is stopped, and no alert names one;
- every violating job is stopped by the guard within ``BOUND`` seconds of its submission (acting);
- each stop once: no ``TerminateServiceJob`` for a job after one of them was answered (botocore's
  retry of a request whose answer was lost aside), and at most one alert per job and topic that is
  not "could not stop (retried)";
- dry run changes nothing: no ``TerminateServiceJob``, no alert but "would stop", no ledger write
  under the acting key (a claim there would keep the job from being stopped once the guard acts);
  and it records every violating job, in the table;
- once the faults stop, the dead-letter queue is empty within ``SETTLE_HOURS``: every event was read.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpu_governance_runtime.common.action_ledger import Ledger
from gpu_governance_runtime.contract import (
    SERVICE_JOB_EVENT,
    TAG_COST_CENTRE,
    TAG_INTENT,
    TAG_TEAM,
)
from gpu_governance_runtime.guard import handler

from . import sdk
from .batch import ACCOUNT, Clock, Crash, FakeBatch, Faults
from .dynamodb import FakeDynamoDB
from .messaging import FakeSns, FakeSqs
from .sagemaker import FakeSageMaker
from .scenario import RECLAIM_FAULT_RATES, FaultCounts, FaultPlan, InvariantBroken

GUARD = "submission-guard"  # who sends the guard's requests, in the models' records
REGION = "us-east-1"
QUEUE = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/sagemaker-training"
POOL = "sagemaker-training"
TEAMS = ("research", "training", "evaluation")
TYPE = "ml.p5.48xlarge"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
NAMES = {
    "execution_role_arn": f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/{{team}}-gpu-training",
    "team_topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:gpu-governance-{{team}}",
    "registry": REGISTRY,
}
PLATFORM_TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:gpu-governance-platform"
DEAD_LETTERS = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/gpu-governance-guard-dead-letters"
MAX_RUNTIME = 2 * 86400  # each team's declared run-time limit
DOCUMENT = {
    "pools": {
        POOL: {
            "teams": {
                team: {
                    "repository_name": f"acme-ml/{team}",
                    "cost_centre": f"cc-{team}",
                    "owner": f"{team}-lead",
                    "max_runtime_seconds": MAX_RUNTIME,
                }
                for team in TEAMS
            }
        }
    }
}
QUEUES = handler.queues_from([{"job_queue": QUEUE, "pool": POOL}], NAMES, DOCUMENT)
TICK = 60.0
REDRIVE_EVERY = 600.0  # the construct's schedule
EVENT_RETRY_DELAYS = (60.0, 120.0)  # [aws: events.lambda-async-retries]
DELAYS = (0.0, 0.0, 5.0, 30.0, 120.0, 600.0)  # how late an event reaches the function
BOUND = 2 * 3600.0  # a violating job is stopped within this of its submission, whatever the faults
ARRIVAL_SECONDS = 900.0  # mean seconds between two submissions of one team
VIOLATING = 0.3  # the share of submissions that reach outside their team
SETTLE_HOURS = 12  # the faults stopped, every event is read within this
KINDS = ("role", "plan", "platform-tag", "team-tag", "runtime", "untagged")


def role(team: str) -> str:
    return NAMES["execution_role_arn"].replace("{team}", team)


def plan(team: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{team}-plan"


def payload(team: str, n: int, work_seconds: float) -> dict[str, Any]:
    """A team's legitimate CreateTrainingJob request (its role, image, plan and tags)."""
    return {
        "TrainingJobName": f"{team}-{n}",
        "RoleArn": role(team),
        "AlgorithmSpecification": {"TrainingImage": f"{REGISTRY}/acme-ml/{team}:1.4", "TrainingInputMode": "File"},
        "ResourceConfig": {
            "InstanceType": TYPE,
            "InstanceCount": 1,
            "VolumeSizeInGB": 500,
            "TrainingPlanArn": plan(team),
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://acme-ml-{team}/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "HyperParameters": {"work_seconds": str(int(work_seconds))},
        "Tags": [{"Key": TAG_TEAM, "Value": team}, {"Key": TAG_COST_CENTRE, "Value": f"cc-{team}"}],
    }


def violate(request: dict[str, Any], kind: str, other: str) -> dict[str, Any]:
    """``request`` reaching outside its team in one way (``untagged`` is the Batch job's tag, not the payload's)."""
    request = copy.deepcopy(request)
    if kind == "role":
        request["RoleArn"] = role(other)
    elif kind == "plan":
        request["ResourceConfig"]["TrainingPlanArn"] = plan(other)
    elif kind == "platform-tag":
        request["Tags"].append({"Key": TAG_INTENT, "Value": "intent-1"})
    elif kind == "team-tag":
        request["Tags"][0]["Value"] = other
    elif kind == "runtime":
        request["StoppingCondition"]["MaxRuntimeInSeconds"] = MAX_RUNTIME + 3600
    return request


@dataclass
class Report(FaultCounts):
    submitted: int = 0
    violating: int = 0
    stopped: int = 0  # violating jobs the guard stopped, as Batch recorded it
    planned: int = 0  # "would stop" alerts a dry run sent to the platform's topic
    events: int = 0  # state change events Batch sent
    deliveries: int = 0  # invocations of the function with an event (first ones, duplicates and Lambda's retries)
    duplicates: int = 0
    late: int = 0  # events delivered a minute or more after they were sent
    lost: int = 0  # events sent straight to the dead-letter queue
    dead_lettered: int = 0  # events dead-lettered after Lambda's two retries failed
    redriven: int = 0  # dead-letter messages the scheduled run checked and deleted
    retried: int = 0  # failed invocations Lambda ran again
    failed: int = 0
    crashes: int = 0
    faults: Counter = field(default_factory=Counter)  # (operation, phase, fault) -> count

    def summary(self) -> str:
        return (
            f"{self.submitted} jobs submitted ({self.violating} violating, {self.stopped} stopped, {self.planned} "
            f"reported in dry run), {self.events} events ({self.duplicates} twice, {self.late} late, {self.lost} lost "
            f"to the dead-letter queue), {self.deliveries} deliveries, {self.failed} failed invocations "
            f"({self.crashes} killed, {self.retried} retried by Lambda, {self.dead_lettered} dead-lettered), "
            f"{self.redriven} redriven"
        )


class Function:
    """The guard's execution environment: its clients on the models with the handler's configurations."""

    def __init__(self, world: World):
        self.world = world
        self.cold_start()

    def cold_start(self) -> None:
        w, calls = self.world, self.world.calls
        self.batch = w.batch.client(config=handler.batch.meta.config, by=GUARD, calls=calls)
        self.sagemaker = w.sagemaker.client(config=handler.sagemaker.meta.config, by=GUARD, calls=calls)
        self.sqs = w.sqs.client(config=handler.sqs.meta.config, by=GUARD, calls=calls)
        config = handler.dynamodb.meta.client.meta.config
        self.ledger = Ledger(w.dynamodb.table("ledger", config=config, by=GUARD, calls=calls))


@dataclass
class World:
    clock: Clock
    batch: FakeBatch
    sagemaker: FakeSageMaker
    dynamodb: FakeDynamoDB
    sns: FakeSns
    sqs: FakeSqs
    calls: sdk.Calls


class GuardChecks:
    """The invariants, read from the models' records (the module docstring lists them)."""

    def __init__(self, world: World, dry_run: bool):
        self.world, self.dry_run = world, dry_run
        self.violating: dict[str, str] = {}  # job id -> the kind of violation it was submitted with
        self.submitted_at: dict[str, float] = {}
        self.seen_calls = 0
        self.answered_stop: dict[str, str] = {}  # job id -> the invocation whose TerminateServiceJob was answered

    def step(self) -> None:
        w = self.world
        for job_id, job in w.batch.service_jobs.items():
            stopped_by = job.get("_stopped_by")
            if stopped_by is not None and job_id not in self.violating:
                raise InvariantBroken(f"legitimate job {job_id} stopped by {stopped_by}")
            if (
                not self.dry_run
                and job_id in self.violating
                and stopped_by is None
                and w.clock.now - self.submitted_at[job_id] > BOUND
            ):
                raise InvariantBroken(
                    f"{job_id} ({self.violating[job_id]}) not stopped {w.clock.now - self.submitted_at[job_id]:.0f} s "
                    f"after its submission (it is {job['status']})"
                )
        for call in w.calls[self.seen_calls :]:
            if call.by != GUARD:
                continue
            if call.operation == "TerminateServiceJob":
                job_id = call.request["jobId"]
                if self.dry_run:
                    raise InvariantBroken(f"dry run sent TerminateServiceJob for {job_id}")
                earlier = self.answered_stop.get(job_id)
                if earlier is not None and earlier != call.invocation:
                    raise InvariantBroken(f"{job_id} stopped again after an earlier stop was answered")
                if call.outcome == "answered":
                    self.answered_stop.setdefault(job_id, call.invocation)
            if self.dry_run and call.operation in ("PutItem", "UpdateItem"):
                key = (call.request.get("Item") or call.request.get("Key"))["action_id"]["S"]
                if key.endswith(f"#{handler.ACTION}"):
                    raise InvariantBroken(f"dry run wrote the acting key {key}")
        self.seen_calls = len(w.calls)
        said: Counter = Counter()
        for message in w.sns.published:
            body = message["Message"]
            if body["job_id"] not in self.violating:
                raise InvariantBroken(f"an alert names legitimate job {body['job_id']}: {message['Subject']}")
            if self.dry_run and body["outcome"] != "planned":
                raise InvariantBroken(f"dry run alerted {body['outcome']} for {body['job_id']}")
            if body["outcome"] != "failed":
                said[body["job_id"], message["TopicArn"]] += 1
        repeated = [key for key, n in said.items() if n > 1]
        if repeated:
            raise InvariantBroken(f"alerted more than once: {repeated[:3]}")

    def final(self) -> None:
        self.step()
        w = self.world
        if w.sqs.messages:
            raise InvariantBroken(f"{len(w.sqs.messages)} events left unread in the dead-letter queue")
        if self.dry_run:  # each violating job recorded as reported, in the table itself
            items = w.dynamodb.tables["ledger"][1]
            unreported = [j for j in self.violating if f"{POOL}#{j}#0#{handler.DRY_RUN_ACTION}" not in items]
            if unreported:
                raise InvariantBroken(f"violating jobs the dry run never recorded: {unreported[:3]}")
        else:
            unstopped = [j for j in self.violating if w.batch.service_jobs[j].get("_stopped_by") != GUARD]
            if unstopped:
                raise InvariantBroken(f"violating jobs never stopped: {unstopped[:3]}")


def run(
    *, days: float, seed: int = 1, dry_run: bool = False, fault_rates: dict[str, float] = RECLAIM_FAULT_RATES
) -> Report:
    rng = random.Random(seed)
    clock = Clock()
    plan_faults = FaultPlan(rng, fault_rates)
    plan_faults.every_kind_on(("TerminateServiceJob", "Publish", "PutItem", "UpdateItem"))
    faults = Faults(plan_faults)
    batch = FakeBatch(clock, capacity={}, faults=faults)
    for team in TEAMS:
        batch.add_quota_share(QUEUE, team, capacity={TYPE: 8})
    sagemaker = FakeSageMaker(clock, faults=faults)
    for team in TEAMS:  # the plans the capacity controller bought, tagged for their teams
        sagemaker.add_tagged(plan(team), {TAG_TEAM: team})
    dynamodb = FakeDynamoDB(faults=faults, clock=clock)
    dynamodb.create_table("ledger", key="action_id")
    sns, sqs = FakeSns(clock, faults=faults), FakeSqs(clock, rng, DEAD_LETTERS, faults=faults)
    world = World(clock, batch, sagemaker, dynamodb, sns, sqs, sdk.Calls())
    report, checks = Report(), GuardChecks(world, dry_run)
    function = Function(world)
    # (due, order, attempt, event): deliveries of events to the function, and Lambda's retries of failed ones
    pending: list[tuple[float, int, int, dict[str, Any]]] = []
    order = itertools.count()
    statuses: dict[str, str] = {}

    def check(event: Any) -> Any:
        return handler.guard(
            event,
            queues=QUEUES,
            ledger=function.ledger,
            dry_run=dry_run,
            platform_topic=PLATFORM_TOPIC,
            batch=function.batch,
            sagemaker=function.sagemaker,
            sns=world.sns,
            now=clock.now,
        )

    def invoke(event: dict[str, Any]) -> bool:
        """One asynchronous invocation; False when it failed (Lambda runs it again, or dead-letters it)."""
        try:
            if event["source"] == "aws.events":
                handler.redrive(function.sqs, DEAD_LETTERS, check, lambda: 600.0)
            else:
                report.deliveries += 1
                check(event)
        except Crash:
            report.crashes += 1
            report.failed += 1
            function.cold_start()
            return False
        except Exception:  # noqa: BLE001 - an error fails the invocation, as in Lambda
            report.failed += 1
            return False
        return True

    def deliver(until: float, new_jobs: bool) -> None:
        next_redrive = clock.now
        while clock.now < until:
            if new_jobs:
                _arrivals(rng, batch, checks, report)
            batch.advance(TICK)
            for event in _state_changes(batch, statuses, clock):
                report.events += 1
                if rng.random() < 0.05:  # throttled past its maximum age: straight to the dead-letter queue
                    report.lost += 1
                    world.sqs.send(json.dumps(event))
                    continue
                for copy_n in range(2 if rng.random() < 0.15 else 1):
                    delay = rng.choice(DELAYS) + copy_n * rng.choice(DELAYS)
                    report.duplicates += copy_n
                    report.late += delay >= TICK
                    pending.append((clock.now + delay, next(order), 0, event))
            if clock.now >= next_redrive:
                next_redrive += REDRIVE_EVERY
                pending.append((clock.now, next(order), 0, _scheduled(clock)))
            for due in sorted(p for p in pending if p[0] <= clock.now):
                pending.remove(due)
                _, _, attempt, event = due
                if invoke(event):
                    continue
                if attempt < len(EVENT_RETRY_DELAYS):
                    report.retried += 1
                    pending.append((clock.now + EVENT_RETRY_DELAYS[attempt], next(order), attempt + 1, event))
                else:
                    report.dead_lettered += 1
                    world.sqs.send(json.dumps(event))
            checks.step()

    with contextlib.redirect_stdout(io.StringIO()), sdk.no_backoff():  # the guard's log lines; retries at once
        deliver(clock.now + days * 86400, new_jobs=True)
        plan_faults.on = False  # the faults stop: what is pending and dead-lettered must now be read
        plan_faults.forced.clear()
        for _ in range(
            SETTLE_HOURS
        ):  # a short poll may miss a message a few times running [aws: events.sqs-receive-short-poll]
            deliver(clock.now + 3600, new_jobs=False)
            if not pending and not sqs.messages:
                break
    checks.final()
    report.faults = Counter(faults.injected)
    report.stopped = sum(1 for j in batch.service_jobs.values() if j.get("_stopped_by") == GUARD)
    report.planned = sum(
        1 for m in world.sns.published if m["TopicArn"] == PLATFORM_TOPIC and m["Message"]["outcome"] == "planned"
    )
    report.redriven = len(world.sqs.deleted)
    return report


def _arrivals(rng: random.Random, batch: FakeBatch, checks: GuardChecks, report: Report) -> None:
    """Each team submits about every ``ARRIVAL_SECONDS``; ``VIOLATING`` of them reach outside the team."""
    for team in TEAMS:
        if rng.random() >= TICK / ARRIVAL_SECONDS:
            continue
        request = payload(team, report.submitted, rng.uniform(3, 6) * 3600)
        kind = rng.choice(KINDS) if rng.random() < VIOLATING else None
        if kind is not None:
            request = violate(request, kind, rng.choice([t for t in TEAMS if t != team]))
        job_id = batch.add_service_job(
            jobName=request["TrainingJobName"],
            jobQueue=QUEUE,
            serviceJobType="SAGEMAKER_TRAINING",
            quotaShareName=team,
            serviceRequestPayload=json.dumps(request),
            tags={} if kind == "untagged" else {TAG_TEAM: team},
        )
        assert job_id is not None
        report.submitted += 1
        checks.submitted_at[job_id] = batch.clock.now
        if kind is not None:
            report.violating += 1
            checks.violating[job_id] = kind


def _state_changes(batch: FakeBatch, statuses: dict[str, str], clock: Clock) -> list[dict[str, Any]]:
    """The events of the jobs whose state changed since the last look (none for a submission)."""
    events = []
    for job_id, job in batch.service_jobs.items():
        before = statuses.setdefault(job_id, "SUBMITTED")
        if job["status"] != before:
            statuses[job_id] = job["status"]
            detail = {k: job[k] for k in ("jobArn", "jobId", "jobName", "jobQueue", "status", "createdAt")}
            events.append(
                {
                    "version": "0",
                    "id": f"{job_id}-{job['status']}",
                    "detail-type": SERVICE_JOB_EVENT[1],
                    "source": SERVICE_JOB_EVENT[0],
                    "account": ACCOUNT,
                    "time": clock.now,
                    "region": REGION,
                    "resources": [job["jobArn"]],
                    "detail": {**detail, "attempts": []},
                }
            )
    return events


def _scheduled(clock: Clock) -> dict[str, Any]:
    return {"source": "aws.events", "detail-type": "Scheduled Event", "id": f"redrive-{clock.now:.0f}", "detail": {}}
