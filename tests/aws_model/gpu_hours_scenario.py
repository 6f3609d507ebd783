"""The reclaim controller's GPU-hour limits (reclaim/gpu_hours.py) over simulated days on the AWS
models, with faults at every call: each minute the handler's own path counts the teams' GPU hours,
sends the 80 % notice, turns a team's admission switch off at its limit and on again the next
period, and (on Batch) terminates an over-limit or paused team's queued service jobs.

Two backends, one pool of 6 p5 instances (8 GPUs each) and four teams: research and inference with
limits of 40 and 24 GPU hours a day (5 and 3 instance-hours), evaluation without one, and interns,
paused in the governance file (so deployed switched off). The controller runs every 5 minutes
(``TICK_SECONDS``); as in the reclaim scenario, events come twice or late (tests/aws_model/scenario.py):

- ``quota_share``: a Batch quota-share queue (``BatchQuotaShareObserver`` reads it, the switch is
  the team's quota share ``state``, queued service jobs are held);
- ``compute_quota``: HyperPod task governance (the switch is the team's compute quota
  ``ActivationState``, updated at the version read; usage comes as Kueue rows, here drawn per tick).

The teams' stacks are deployed again now and then, which puts every switch back as its template
declares (ENABLED; interns DISABLED). The run starts six hours before midnight UTC, so each day's
period ends and the next begins during it.

Checked after every invocation, from the models' own records (:class:`GpuChecks`):

- the count: each team's count in the ledger is the GPUs its jobs held, a minute per tick, each tick
  counted once (a duplicated, retried or concurrent tick adds nothing);
- the switch: off within ``SETTLE_TICKS`` of the count reaching the limit (and of a deploy turning it
  back on), and never for a team below its limit; on again within ``SETTLE_TICKS`` of the next
  period for a team the controller turned off; never on for a paused team;
- the hold (Batch): the controller ends only queued jobs (never one running), only of a team over
  its limit or paused, and no job of such a team starts later than ``SETTLE_TICKS`` after it was;
- the notice: sent within ``SETTLE_TICKS`` of a team reaching 80 % of its limit, never before; a
  second one only after a send whose outcome the controller could not know;
- nothing changed in dry run (the count aside).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from gpu_governance_runtime.backends.kueue_usage import EksShareUsage
from gpu_governance_runtime.planners.reclaim import Settings
from gpu_governance_runtime.policy import parse_policy
from gpu_governance_runtime.reclaim import handler

from . import sdk
from .batch import Clock, Crash, FakeBatch, Faults
from .dynamodb import FakeDynamoDB
from .sagemaker import CLUSTER, FakeEventBridge, FakeSageMaker
from .scenario import (
    CONTROLLER,
    RECLAIM_FAULT_RATES,
    FaultCounts,
    FaultPlan,
    Function,
    InvariantBroken,
    changes_in_dry_run,
)

TYPE, GPUS = "ml.p5.48xlarge", 8
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/training"
POOL = "training"
PAUSED = "interns"
LIMITS = {"research": 40, "inference": 24}  # GPU hours a day
QUOTAS = {"research": 2, "inference": 2, "evaluation": 1, PAUSED: 1}
START = datetime(2025, 12, 2, 18, tzinfo=UTC).timestamp()
TICK = 300.0
# A service job not started yet, as the oracle knows it (not the controller's own list, which a bug could widen).
NOT_STARTED = ("SUBMITTED", "PENDING", "RUNNABLE")
SETTLE_TICKS = (
    24  # a switch or a hold takes effect within this many ticks (2 hours), whatever runs of faults come between
)
DEPLOY_EVERY = 6 * 3600.0  # mean seconds between two deploys of the teams' stacks
# Service jobs (team, mean seconds between two, hours of work): the limited teams reach their limits within the day.
ARRIVALS = (
    ("research", 1800.0, (0.5, 2.0)),
    ("inference", 2400.0, (0.5, 2.0)),
    ("evaluation", 3600.0, (0.5, 2.0)),
    (PAUSED, 3600.0, (0.5, 1.0)),
)


def policy(backend: str) -> Any:
    return parse_policy(
        {
            "version": 1,
            "organisation": "acme",
            "capacity_windows": [],
            "priority_classes": [],
            "pools": [
                {
                    "name": POOL,
                    "backend": backend,
                    "capacity": {TYPE: sum(QUOTAS.values())},
                    "shares": [
                        {
                            "name": team,
                            "quota": {TYPE: quota},
                            "strategy": "lend_and_borrow",
                            "borrow_limit": None,
                            "in_share_preemption": False,
                            "fair_share_weight": 10,
                            "paused": team == PAUSED,
                            "gpu_hour_limit": {"hours": LIMITS[team], "period": "day"} if team in LIMITS else None,
                        }
                        for team, quota in QUOTAS.items()
                    ],
                }
            ],
        }
    )


@dataclass
class Report(FaultCounts):
    ticks: int = 0
    submitted: int = 0
    refused: int = 0  # submissions a switched-off quota share refused
    deploys: int = 0
    periods_over: int = 0  # (team, period)s that reached the limit
    switched_off: int = 0  # UpdateQuotaShare / UpdateComputeQuota calls that turned a switch off
    switched_on: int = 0
    held: int = 0  # queued jobs the controller ended
    notices: int = 0  # notices EventBridge accepted
    duplicates: int = 0
    late: int = 0
    crashes: int = 0
    failed_ticks: int = 0
    faults: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        return (
            f"{self.ticks} ticks ({self.duplicates} delivered twice, {self.late} late), "
            f"{self.submitted} jobs submitted ({self.refused} refused), {self.deploys} deploys, "
            f"{self.periods_over} periods over the limit, switched off {self.switched_off} and on {self.switched_on} times, "
            f"{self.held} queued jobs held, {self.notices} notices, {self.failed_ticks} failed and {self.crashes} crashed ticks"
        )


class QuotaShares:
    """The Batch quota-share backend: jobs come and go on the queue, the controller reads the queue."""

    backend, switch_call = "batch_quota_share", "UpdateQuotaShare"
    target = {"pool": POOL, "job_queue": QUEUE}

    def __init__(self, clock: Clock, faults: Faults):
        self.batch = FakeBatch(clock, capacity={}, faults=faults)
        self.arns = {team: self.batch.add_quota_share(QUEUE, team, capacity={TYPE: n}) for team, n in QUOTAS.items()}
        self.models = {"batch": self.batch}

    def enabled(self, team: str) -> bool:
        return self.batch.quota_shares[self.arns[team]]["state"] == "ENABLED"

    def start(self, rng: random.Random) -> None:
        """Deployed as declared, interns with jobs they queued before they were paused (while still ENABLED)."""
        for n in range(3):
            self.submit(rng, PAUSED, (0.5, 1.0), n)
        self.deploy()

    def deploy(self) -> None:
        for team, arn in self.arns.items():
            self.batch.deploy_quota_share(arn, "DISABLED" if team == PAUSED else "ENABLED")

    def submit(self, rng: random.Random, team: str, hours: tuple[float, float], n: int) -> bool:
        payload = {
            "TrainingJobName": f"{team}-{n}",
            "ResourceConfig": {"InstanceType": TYPE, "InstanceCount": 1},
            "HyperParameters": {"work_seconds": str(int(rng.uniform(*hours) * 3600))},
        }
        return (
            self.batch.add_service_job(
                jobName=f"{team}-{n}",
                jobQueue=QUEUE,
                serviceJobType="SAGEMAKER_TRAINING",
                quotaShareName=team,
                serviceRequestPayload=json.dumps(payload),
            )
            is not None
        )

    def advance(self, rng: random.Random) -> None:
        self.batch.advance(TICK)  # moves the clock

    def in_use(self) -> dict[str, float]:
        used: Counter = Counter()
        for job in self.batch.service_jobs.values():
            if job["status"] == "RUNNING":
                used[job["quotaShareName"]] += job["capacityUsage"][0]["quantity"]
        return dict(used)

    def tick(self, pool_policy: Any, ledger: Any, now: float, dry_run: bool) -> None:
        pool = pool_policy.pool(POOL)
        handler.run_tick(
            POOL,
            handler.build_adapter(self.target, pool_policy),
            ledger,
            settings=pool.settings(Settings()),
            dry_run=dry_run,
            namespace="Scenario",
            now=now,
            emit=lambda record: None,
            tick_seconds=TICK,
            hour_limits=handler.gpu_hour_limits(self.target, pool, ledger, now=now, tick_seconds=TICK, dry_run=dry_run),
        )


class ComputeQuotas:
    """HyperPod task governance: each team's compute quota; Kueue's usage rows, drawn per tick."""

    backend, switch_call = "hyperpod_eks", "UpdateComputeQuota"
    target = {"pool": POOL, "eks_cluster": "acme", "cluster_arn": CLUSTER, "gpus_per_instance": {TYPE: GPUS}}

    def __init__(self, clock: Clock, faults: Faults):
        self.sagemaker = FakeSageMaker(clock, faults=faults)
        self.ids = {team: self.sagemaker.add_compute_quota(team) for team in QUOTAS}
        self.models = {"sagemaker": self.sagemaker}
        self.usage: dict[str, float] = dict.fromkeys(QUOTAS, 0.0)

    def enabled(self, team: str) -> bool:
        return self.sagemaker.quotas[self.ids[team]]["ActivationState"] == "Enabled"

    def deploy(self) -> None:
        for team, quota_id in self.ids.items():
            self.sagemaker.deploy(quota_id, "Disabled" if team == PAUSED else "Enabled")

    def start(self, rng: random.Random) -> None:
        self.deploy()

    def submit(self, rng: random.Random, team: str, hours: tuple[float, float], n: int) -> bool:
        return True  # Kueue admits as it will: what a disabled quota does to queued tasks is HyperPod's

    def advance(self, rng: random.Random) -> None:
        """What Kueue shows a team using changes now and then, by half instances (a task on part of one)."""
        self.sagemaker.clock.sleep(TICK)
        for team in QUOTAS:
            if rng.random() < TICK / 1800:
                self.usage[team] = rng.choice((0.0, 0.5, 1.0, 1.5, 2.0, 3.0))

    def in_use(self) -> dict[str, float]:
        return dict(self.usage)

    def tick(self, pool_policy: Any, ledger: Any, now: float, dry_run: bool) -> None:
        limits = handler.gpu_hour_limits(
            self.target, pool_policy.pool(POOL), ledger, now=now, tick_seconds=TICK, dry_run=dry_run
        )
        limits(
            [
                EksShareUsage(share=team, instance_type=TYPE, guaranteed=QUOTAS[team], in_use=n, borrowed=0, lent=0)
                for team, n in self.usage.items()
            ]
        )


BACKENDS = {"quota_share": QuotaShares, "compute_quota": ComputeQuotas}


def run(
    *,
    backend: str,
    days: float,
    seed: int = 1,
    dry_run: bool = False,
    fault_rates: dict[str, float] = RECLAIM_FAULT_RATES,
    duplicate_rate: float = 0.05,
    late_rate: float = 0.05,
) -> Report:
    """``days`` of one-minute ticks on ``backend`` (``quota_share`` or ``compute_quota``); raise
    InvariantBroken at the first step that breaks an invariant."""
    rng = random.Random(seed)
    clock, calls, report = Clock(START), sdk.Calls(), Report()
    plan = FaultPlan(rng, fault_rates)
    faults = Faults(plan)
    world = BACKENDS[backend](clock, faults)
    if any(fault_rates.values()):
        plan.every_kind_on((world.switch_call, "TerminateServiceJob", "PutEvents", "PutItem", "UpdateItem"))
    events = FakeEventBridge(clock, faults=faults)
    dynamodb = FakeDynamoDB(faults=faults, clock=clock)
    dynamodb.create_table("ledger", key="action_id")
    pool_policy = policy(world.backend)
    checks = GpuChecks(world, dynamodb, events, calls, report, dry_run=dry_run)
    world.start(rng)
    late = 0
    next_deploy = clock.now + rng.expovariate(1 / DEPLOY_EVERY)

    def invoke() -> None:
        """One invocation of the function on the pool, as ``handler.handler`` runs it."""
        since, failed, held = len(calls), True, world.in_use()  # what the tick will count: running as it starts
        try:
            world.tick(pool_policy, function.ledger, clock.now, dry_run)
            failed = False
        except Crash:
            report.crashes += 1  # the invocation died, and its environment with it
            function.cold_start()
        except Exception:  # noqa: BLE001 - the handler counts a failed pool in PoolErrors; the invocation ends well
            report.failed_ticks += 1
        report.ticks += 1
        checks.invoked(calls[since:], failed=failed, in_use=held)

    with (
        Function(calls, dynamodb, events=events, **world.models) as function,
        contextlib.redirect_stdout(io.StringIO()),
    ):
        end = clock.now + days * 86400
        while clock.now < end:
            for team, between, hours in ARRIVALS:
                if rng.random() < TICK / between:
                    report.submitted += 1
                    report.refused += not world.submit(rng, team, hours, report.submitted)
            world.advance(rng)
            if clock.now >= next_deploy:
                world.deploy()
                report.deploys += 1
                checks.deployed()
                next_deploy = clock.now + rng.expovariate(1 / DEPLOY_EVERY)
            checks.started()
            for _ in range(late):
                invoke()
            report.late, late = report.late + late, 0
            if rng.random() < late_rate:
                late = 1  # this tick's event waits for the function: it runs with the next one
            else:
                invoke()
            if rng.random() < duplicate_rate:
                report.duplicates += 1
                invoke()
            checks.minute()
        plan.on = False  # the faults stop: every switch and hold settles
        for _ in range(SETTLE_TICKS):
            world.advance(rng)
            checks.started()
            invoke()
            checks.minute()
    checks.final()
    report.faults = Counter(faults.injected)
    report.notices = len(events.accepted)
    return report


class GpuChecks:
    """The invariants of the GPU-hour limits (the module docstring), read from the models."""

    def __init__(
        self,
        world: QuotaShares | ComputeQuotas,
        dynamodb: FakeDynamoDB,
        events: FakeEventBridge,
        calls: sdk.Calls,
        report: Report,
        *,
        dry_run: bool,
    ):
        self.world, self.dynamodb, self.events, self.calls, self.report = world, dynamodb, events, calls, report
        self.clock = world.batch.clock if isinstance(world, QuotaShares) else world.sagemaker.clock
        self.dry_run = dry_run
        self.expected: dict[str, float] = {}  # count item -> GPU hours the oracle counted into it
        self.counted: dict[str, int] = {}  # count item -> the last tick the oracle saw counted
        self.over_since: dict[tuple[str, str], float] = {(PAUSED, "always"): self.clock.now}
        self.noticed_at: dict[tuple[str, str], float] = {}  # (team, period) -> when it reached 80 %
        self.turned_off: set[tuple[str, str]] = set()  # (team, period) in which the controller turned the team off
        self.deployed_at = self.clock.now
        self.running: set[str] = set()
        self.unknown_sends: Counter = Counter()  # (team, period) -> sends the controller could not know or record

    # --- what happened --------------------------------------------------------------------------

    def period(self, at: float | None = None) -> str:
        """The day (UTC) ``at`` falls in, as the oracle counts it: the limits' period is a day."""
        day = datetime.fromtimestamp(self.clock.now if at is None else at, UTC)
        return day.replace(hour=0, minute=0, second=0, microsecond=0).isoformat()

    def used(self, team: str, period: str) -> float:
        item = self.dynamodb.tables["ledger"][1].get(f"gpu-hours#{POOL}#{team}#{period}")
        return 0.0 if item is None else float(Decimal(item["used"]["N"]))

    def over(self, team: str) -> float | None:
        """Since when ``team`` is over its limit or paused (None: it is not)."""
        return self.over_since.get((team, "always" if team == PAUSED else self.period()))

    def deployed(self) -> None:
        self.deployed_at = self.clock.now

    def invoked(self, calls: list[sdk.Call], *, failed: bool, in_use: dict[str, float]) -> None:
        """After one invocation (``failed``: it died or failed part-way; ``in_use``: instances per team
        running as it began): its count, its switch calls, its holds and its notices."""
        period, tick = self.period(), int(self.clock.now // TICK)
        for team, limit in LIMITS.items():
            key = f"gpu-hours#{POOL}#{team}#{period}"
            item = self.dynamodb.tables["ledger"][1].get(key)
            if item is None:
                continue
            last = int(item["last_tick"]["N"])
            if last == tick and self.counted.get(key) != tick:  # this tick was counted now
                self.counted[key] = tick
                self.expected[key] = self.expected.get(key, 0.0) + in_use.get(team, 0.0) * GPUS * TICK / 3600
            if abs(self.used(team, period) - self.expected.get(key, 0.0)) > 1e-4:
                raise InvariantBroken(
                    f"{team}'s count for {period} is {self.used(team, period):.4f} GPU hours; its jobs held "
                    f"{self.expected.get(key, 0.0):.4f} over the ticks counted (a tick counted twice, or wrongly)"
                )
            used = self.used(team, period)
            if used >= 0.8 * limit:
                self.noticed_at.setdefault((team, period), self.clock.now)
            if used >= limit and (team, period) not in self.over_since:
                self.over_since[team, period] = self.clock.now
                self.report.periods_over += 1
        for call in calls:
            if call.operation == self.world.switch_call:
                team, on = self._switched(call.request)
                if on and (team == PAUSED or self.over(team) is not None):
                    raise InvariantBroken(f"the controller turned {team} on while it is paused or over its limit")
                if not on and team != PAUSED and self.over(team) is None:
                    raise InvariantBroken(
                        f"the controller turned {team} off below its limit ({self.used(team, period):.2f} GPU hours)"
                    )
                if call.outcome == "answered":
                    self.report.switched_on += on
                    self.report.switched_off += not on
                    if not on:
                        self.turned_off.add((team, period))
        if isinstance(self.world, QuotaShares):
            for job in self.world.batch.service_jobs.values():
                if job.get("_stopped_by") == CONTROLLER and not job.get("_checked"):
                    job["_checked"] = True
                    self.report.held += 1
                    if job["_stopped_while"] not in NOT_STARTED:
                        raise InvariantBroken(f"the controller ended {job['jobId']}, which was {job['_stopped_while']}")
                    if self.over(job["quotaShareName"]) is None:
                        raise InvariantBroken(
                            f"the controller ended {job['jobId']} of {job['quotaShareName']}, neither paused nor over its limit"
                        )
        last: dict[str, sdk.Call] = {}  # the notices this invocation sent: the last attempt of each call
        for call in calls:
            if call.operation == "PutEvents":
                last[call.invocation] = call
        for call in last.values():
            detail = json.loads(call.request["Entries"][0]["Detail"])
            # a send whose outcome the controller could not know, or could not record: it may send it again
            if call.outcome != "answered" or failed:
                self.unknown_sends[detail["team"], detail["period_start"]] += 1
        if self.dry_run and (changed := changes_in_dry_run(calls)):
            raise InvariantBroken(f"dry run changed something: {changed[0].operation} {changed[0].request}")

    def started(self) -> None:
        """Jobs Batch started this minute: none of a team held longer than SETTLE_TICKS."""
        if not isinstance(self.world, QuotaShares):
            return
        for job in self.world.batch.service_jobs.values():
            if job["status"] == "RUNNING" and job["jobId"] not in self.running:
                self.running.add(job["jobId"])
                since = self.over(job["quotaShareName"])
                # a deploy switches the team on again: what it submits meanwhile may start before the controller acts
                if since is not None and not self.dry_run and self._settled(max(since, self.deployed_at)):
                    raise InvariantBroken(
                        f"{job['jobId']} of {job['quotaShareName']} started {self.clock.now - since:.0f} s after its team "
                        "was paused or reached its limit"
                    )

    def minute(self) -> None:
        """The switches and the notices, once the controller had SETTLE_TICKS to act."""
        if self.dry_run:
            return
        period, previous = self.period(), self.period(self.clock.now - 86400)
        for team in LIMITS:
            since = self.over(team)
            if since is not None and self._settled(max(since, self.deployed_at)) and self.world.enabled(team):
                raise InvariantBroken(f"{team} reached its limit at {since:.0f} and is still switched on")
            if (
                since is None
                and (team, previous) in self.turned_off
                and self._settled(datetime.fromisoformat(period).timestamp())
                and not self.world.enabled(team)
            ):
                raise InvariantBroken(f"{team} was not switched on again in the period of {period}")
            reached = self.noticed_at.get((team, period))
            sent = [
                e for e in self.events.accepted if (e["Detail"]["team"], e["Detail"]["period_start"]) == (team, period)
            ]
            if reached is None and sent:
                raise InvariantBroken(f"a notice for {team} in {period} before it reached 80 % of its limit")
            if reached is not None and self._settled(reached) and not sent:
                raise InvariantBroken(f"{team} reached 80 % of its limit at {reached:.0f} and was never told")
            if len(sent) > 1 + self.unknown_sends[team, period]:
                raise InvariantBroken(
                    f"{len(sent)} notices for {team} in {period}, and no send whose outcome was unknown"
                )
        if self._settled(self.deployed_at) and self.world.enabled(PAUSED):
            raise InvariantBroken(f"{PAUSED} is paused and switched on")

    def final(self) -> None:
        if not self.dry_run and isinstance(self.world, QuotaShares):
            for job in self.world.batch.service_jobs.values():
                if self.over(job["quotaShareName"]) is not None and job["status"] in NOT_STARTED:
                    raise InvariantBroken(f"{job['jobId']} of a held team is still queued once the faults stopped")

    # --- helpers ---------------------------------------------------------------------------------

    def _settled(self, since: float) -> bool:
        return self.clock.now - since >= SETTLE_TICKS * TICK

    def _switched(self, request: dict[str, Any]) -> tuple[str, bool]:
        """(team, turned on) of an UpdateQuotaShare or UpdateComputeQuota request."""
        if isinstance(self.world, QuotaShares):
            team = next(t for t, arn in self.world.arns.items() if arn == request["quotaShareArn"])
            return team, request["state"] == "ENABLED"
        team = next(t for t, i in self.world.ids.items() if i == request["ComputeQuotaId"])
        return team, request.get("ActivationState") == "Enabled"
