"""A month of capacity windows on the simulated EC2 market (``simulated_ec2``), driven through
the controller, the request path and the rotation's decision, with faults at the purchase call.

Windows: a declared one-off window (a Batch compute environment), a recurring one (an EKS node
group), on-demand requests, and a flapping alarm (ALARM, OK, ALARM 40 minutes later, and again).
Runs: every ``tick`` (the schedule) plus one at each block's expiration warning unless that event
is lost. Each purchase call takes a fault drawn from ``FAULTS``; EC2 lists a block ``lag`` after
it was bought. The market answers every search with a whole offering of the asked count and also
with two half-size pieces in two zones over the same hours (what a consumer of one launch
template cannot use together).

The Batch window's consumer is the Batch model (tests/aws_model/batch.py): a job queue over an
on-demand compute environment of two instances, where teams submit jobs of 1 to 40 hours, and the
window's block compute environment, which the real rotation (``rotation.reconcile``, with
throttled Batch calls) puts first while a block is active. The ledger is the in-memory DynamoDB
model (tests/aws_model/dynamodb.py).

Invariants (``Month.check``): at most one purchase per occurrence; no two blocks of a window that
launches into one reservation at a time overlap; no job killed by a rotation (no job ends by an
infrastructure update, the on-demand compute environment is never updated); every consumer is off
each block before its instances end (30 minutes before the block): the Batch block compute
environment DISABLED and behind the on-demand one, the node group scaled to 0 (the
rotation keeps it scaled up only while a block is active and not yet draining).
``paid_idle`` gives the paid-but-idle instance-hours per window: hours bought that the window did
not ask for (before its start, after its end, beyond its count).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal

from gpu_governance_runtime.capacity import controller, market, requests, rotation
from gpu_governance_runtime.capacity.aws import CapacityMarket
from gpu_governance_runtime.capacity.ledger import Ledger
from gpu_governance_runtime.capacity.planner import Offering, Window
from tests.aws_model.batch import REPLACED, Clock, FakeBatch, Faults
from tests.aws_model.dynamodb import FakeDynamoDB

from .builders import NOW, window
from .simulated_ec2 import FAULTS, Killed, SimulatedEc2
from .stubbed_aws import CONTROLLER, TABLE

ON_DEMAND_CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5"
BLOCK_CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block"
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5"
BATCH = {
    "kind": "batch_compute_environment",
    "launch_template_name": "gpu-p5",
    "compute_environment": ON_DEMAND_CE,
    "block_compute_environment": BLOCK_CE,
    "job_queue": QUEUE,
}
P5_VCPUS = 192
BLOCK_SUBNET = "subnet-0a1b2c3d4e5f60001"  # the block compute environment's only subnet, in us-east-1a
SUBNET_ZONES = {BLOCK_SUBNET: "us-east-1a"}
EKS = {"kind": "eks_node_group", "launch_template_name": "gpu-p5-eks", "cluster_name": "ml", "nodegroup_name": "p5"}
HOUR = timedelta(hours=1)


def windows() -> list[Window]:
    return [
        window(
            name="launch-test",
            consumer=BATCH,
            mode="auto",
            start=NOW + timedelta(days=3, hours=5),
            duration_hours=30,
            budget=Decimal("200000"),
            instance_count=4,
        ),
        window(
            name="weekly-eval",
            team="eval",
            consumer=EKS,
            mode="auto",
            start=NOW + timedelta(days=1, hours=5),
            duration_hours=8,
            repeat_every_days=7,
            budget=Decimal("200000"),
            instance_type="p5.48xlarge",
            instance_count=2,
            alarm_requests=({"alarm_name": "eval-backlog", "count": 2, "hours": 4},),
        ),
    ]


# A search whose earliest start is this close to now is a search for capacity now, answered with an instant block too
# that starts this long after the search (AWS documents "shortly after"; ParallelCluster's tests see about 30 minutes:
# the planner covers a window that has begun from market.INSTANT_START_LEAD after now).
INSTANT_SEARCH = timedelta(hours=1)
INSTANT_START = timedelta(minutes=25)


def _minute(moment):
    return moment.replace(second=0, microsecond=0) + (
        timedelta(minutes=1) if moment.second or moment.microsecond else timedelta(0)
    )


def _offering(id, instance_type, count, zone, per_hour, start, hours, segments) -> Offering:
    """An offering of about ``hours`` from ``start`` that ends at an 11:30 UTC: the one nearest ``start + hours``, as
    blocks found for a search last "slightly less or slightly more" than asked; its fee per instance-hour bought."""
    end = market.next_block_end(start + hours * HOUR - timedelta(hours=12))
    length = end - start
    whole, rest = divmod(int(length.total_seconds()) // 60, 60)
    return Offering(
        id=id,
        kind="block",
        instance_type=instance_type,
        count=count,
        availability_zone=zone,
        start=start,
        end=end,
        duration_hours=whole,
        duration_minutes=rest,
        upfront_fee=(Decimal(per_hour) * count * Decimal(int(length.total_seconds())) / 3600).quantize(Decimal("0.01")),
        segments=segments,
    )


class Market(SimulatedEc2):
    """The simulated market, answering each search with offerings made for it, and the launch template the rotation reads."""

    def __post_init__(self):
        super().__post_init__()
        self.versions = [{"InstanceType": "p5.48xlarge", "ImageId": "ami-12345678"}]

    def _DescribeCapacityBlockOfferings(self, params):
        """For each search: a block from the first 11:30 UTC at or after ``StartDateRange``, two half-size pieces in
        two other zones over the same hours, and one offering of two segments (one reservation each, zones of their
        own [aws: ec2-cb.offering-segments]), cheaper than all; and for a search from now, an instant block too,
        starting minutes after the search and ending at an 11:30 UTC, priced pro rata [aws: ec2-cb.instant-start]."""
        hours, count = params["CapacityDurationHours"], params["InstanceCount"]
        earliest = params.get("StartDateRange", self.now)
        start = earliest.replace(hour=11, minute=30, second=0, microsecond=0)
        start += timedelta(days=1) if start < earliest else timedelta(0)
        shapes = [
            ("", count, "us-east-1a", "31", start, 1),
            ("-half-a", max(count // 2, 1), "us-east-1b", "25", start, 1),
            ("-half-b", max(count // 2, 1), "us-east-1c", "25", start, 1),
            ("-segmented", count, "us-east-1a", "22", start, 2),
        ]
        if earliest <= self.now + INSTANT_SEARCH:
            shapes.append(("-instant", count, "us-east-1a", "31", _minute(self.now + INSTANT_START), 1))
        made = [
            _offering(
                f"cbo-{params['InstanceType']}-{count}-{hours}-{at:%m%d%H%M}{suffix}",
                params["InstanceType"],
                size,
                zone,
                per_hour,
                at,
                hours,
                segments,
            )
            for suffix, size, zone, per_hour, at, segments in shapes
        ]
        known = {o.id for o in self.offerings}
        self.offerings += [o for o in made if o.id not in known]
        return self._page(made, params)

    # Launch templates, for the rotation: one template, versions kept in memory.
    def _DescribeLaunchTemplateVersions(self, params):
        wanted = params["Versions"][0]
        number = len(self.versions) if wanted in ("$Latest", "$Default") else int(wanted)
        return 200, {
            "LaunchTemplateVersions": [
                {
                    "LaunchTemplateName": params["LaunchTemplateName"],
                    "VersionNumber": number,
                    "LaunchTemplateData": self.versions[number - 1],
                }
            ]
        }

    def _CreateLaunchTemplateVersion(self, params):
        self.versions.append(params["LaunchTemplateData"])
        return 200, {
            "LaunchTemplateVersion": {
                "LaunchTemplateName": params["LaunchTemplateName"],
                "VersionNumber": len(self.versions),
            }
        }

    def _DescribeSubnets(self, params):
        return 200, {
            "Subnets": [
                {"SubnetId": s, "AvailabilityZone": SUBNET_ZONES[s], "VpcId": "vpc-0a1b2c3d"}
                for s in params["SubnetIds"]
            ]
        }

    def _DescribeInstanceTypes(self, params):
        return 200, {
            "InstanceTypes": [
                {"InstanceType": t, "VCpuInfo": {"DefaultVCpus": P5_VCPUS}} for t in params["InstanceTypes"]
            ]
        }

    def _page(self, made, params):
        from .stubbed_aws import block_offering

        page = int(params.get("NextToken", "0"))
        more = page + 1 < len(made)
        return 200, {
            "CapacityBlockOfferings": [block_offering(o) for o in made[page : page + 1]],
            **({"NextToken": str(page + 1)} if more else {}),
        }


def in_memory_ledger() -> Ledger:
    """The capacity ledger on the in-memory DynamoDB model (moto's takes ~70 ms a call: a month would take hours)."""
    dynamodb = FakeDynamoDB()
    dynamodb.create_table(TABLE, key="pk")
    return Ledger(client=dynamodb.client(), table_name=TABLE)


@dataclass
class Month:
    ledger: object
    days: int = 30
    tick: timedelta = timedelta(minutes=15)
    seed: int = 0
    lost_warning_share: float = 0.3
    fault_share: float = 0.3
    lag: timedelta = timedelta(minutes=10)
    runs: int = 0
    batch_throttle_share: float = 0.05
    refuse_each_update_once: bool = False  # every Batch update is throttled once, then goes through on the next run
    # node group -> the block the rotation keeps it scaled up on after the last run (None: at size 0)
    scaled_on: dict = field(default_factory=dict)
    violations: list = field(default_factory=list)
    jobs_submitted: int = 0
    rotation_errors: int = 0

    def __post_init__(self):
        rng = random.Random(self.seed)
        self.rng = rng
        faults = sorted(FAULTS)
        self.sim = Market(
            offerings=[],
            lag=self.lag,
            now=NOW,
            faults=[rng.choice(faults) if rng.random() < self.fault_share else "ok" for _ in range(10_000)],
        )
        self.declared = {w.name: w for w in windows()}
        self.batch = FakeBatch(Clock(now=NOW.timestamp()), capacity={}, faults=Faults(self._batch_fault))
        self._refused = False
        template = {"launchTemplateName": "gpu-p5", "version": "1"}
        self.batch.add_compute_environment(
            ON_DEMAND_CE, vcpus_per_instance=P5_VCPUS, max_vcpus=2 * P5_VCPUS, launch_template=template
        )
        self.batch.add_compute_environment(
            BLOCK_CE,
            vcpus_per_instance=P5_VCPUS,
            max_vcpus=0,
            state="DISABLED",
            launch_template=template,
            allocation_strategy="BEST_FIT_PROGRESSIVE",  # [aws: batch-ce.infrastructure-update-strategy]
            subnets=(BLOCK_SUBNET,),
            launch_capacity=self._block_holds,
        )
        self.batch.add_job_queue(QUEUE, compute_environments=[ON_DEMAND_CE, BLOCK_CE])
        # The planner buys only where the block compute environment has a subnet (consumers.launch_zones).
        self.sim.market = CapacityMarket(
            ec2=self.sim.client, sagemaker=None, controller_id=CONTROLLER, batch=self.batch
        )
        # On-demand requests and a flapping alarm, placed in the simulated days: (when, token, window, count, hours).
        paged, alarmed = NOW + self.days * timedelta(hours=7), NOW + self.days * timedelta(hours=13)
        self.asks = sorted(
            [
                (paged, "page-1", "launch-test", 4, 6),
                (paged + HOUR, "page-2", "launch-test", 4, 8),  # overlaps page-1: extends it
                *[
                    (alarmed + timedelta(minutes=40 * i), f"alarm:eval-backlog@{i}", "weekly-eval", 2, 4)
                    for i in range(3)
                ],
            ]
        )

    def _block_holds(self, template) -> int | None:
        """How many instances EC2 launches from the block compute environment's launch template version: into a
        block, no more than it holds while its instances run [aws: ec2-cb.launch-beyond-block-fails]; on demand,
        any number."""
        data = self.sim.versions[int(template["version"]) - 1]
        target = data.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget", {})
        reservation = target.get("CapacityReservationId")
        if reservation is None:
            return None
        bought = next((p.offering for p in self.sim.made if p.reservation_id == reservation), None)
        running = bought is not None and bought.start <= self.sim.now < bought.end - market.TERMINATION_LEAD
        return bought.count if running else 0

    def _batch_fault(self, operation, phase):
        if phase != "before" or not operation.startswith("Update"):
            return None
        if self.refuse_each_update_once:
            self._refused = not self._refused
            return "throttle" if self._refused else None
        return "throttle" if self.rng.random() < self.batch_throttle_share else None

    def ask(self, when, token, base, count, hours):
        w = self.declared[base]
        requests.submit(
            self.ledger,
            self.declared.values(),
            token=token,
            team=w.team,
            instance_type=w.instance_type,
            count=count,
            hours=hours,
            start=None,
            now=when,
            window=base,
            requested_by=f"alarm:{token.split('@')[0][len('alarm:') :]}"
            if token.startswith("alarm:")
            else "account:222222222222",
        )

    def run(self):
        now = self.sim.now
        every = {**self.declared, **requests.requested_windows(self.ledger, self.declared)}
        try:
            report = controller.run(
                windows=every.values(),
                ledger=self.ledger,
                capacity=self.sim.market,
                notify=lambda s, m: None,
                now=now,
                clock=self.sim.clock,
                sleep=lambda seconds: None,
            )
        except Killed:
            return
        self.runs += 1
        blocks = controller.known_blocks(report.owned, self.ledger)
        for w, sharing in rotation.by_consumer(every.values()):
            if w.consumer["kind"] == "batch_compute_environment":  # the real rotation, on the Batch model
                result = rotation.reconcile(
                    window=w,
                    owned=blocks,
                    dry_run=False,
                    ec2=self.sim.client,
                    batch=self.batch,
                    eks=None,
                    ledger=self.ledger,
                    now=now,
                    sharing=sharing,
                )
                self.rotation_errors += "error" in result
            else:  # the node group: the rotation's decision (scaled to the block while one is active, else to 0)
                block = rotation.active_block(w, blocks, now, sharing)
                self.scaled_on[w.consumer["nodegroup_name"]] = None if block is None else block.id
        self._check_targets(now)

    def _check_targets(self, now):
        order = sorted(self.batch.queues[QUEUE]["computeEnvironmentOrder"], key=lambda o: o["order"])
        block_ce = self.batch.compute_environments[BLOCK_CE]
        for p in self.sim.made:
            ends = p.offering.end - market.TERMINATION_LEAD
            feeds_batch = (self.declared.get(p.window) or self.declared[p.window.rsplit("-r", 1)[0]]).consumer[
                "kind"
            ] == "batch_compute_environment"
            if (
                feeds_batch
                and ends <= now < p.offering.end
                and (order[0]["computeEnvironment"] == BLOCK_CE or block_ce["state"] == "ENABLED")
            ):
                self.violations.append(
                    f"the block compute environment is still first or enabled at {now:%m-%d %H:%M}, {p.reservation_id}'s "
                    f"instances end {ends:%H:%M}"
                )
            for group, block in self.scaled_on.items():
                if block == p.reservation_id and now >= ends:
                    self.violations.append(
                        f"node group {group} still scaled up on {p.reservation_id} at {now:%m-%d %H:%M}, its instances end {ends:%H:%M}"
                    )

    def play(self):
        end = NOW + timedelta(days=self.days)
        asks = list(self.asks)
        while self.sim.now < end:
            now = self.sim.now
            while asks and asks[0][0] <= now:
                when, token, base, count, hours = asks.pop(0)
                self.ask(when, token, base, count, hours)
                self.run()  # the request's event runs the controller at once
            warnings = [p.offering.end - market.WARNING_LEAD for p in self.sim.made]
            for moment in sorted(w for w in warnings if now <= w < now + self.tick):
                if self.rng.random() >= self.lost_warning_share:
                    self.sim.now = moment
                    self.run()
            self.sim.now = max(self.sim.now, now + self.tick)
            self._work(now)
            self.run()
        return self

    def _work(self, since):
        """The teams' jobs on the Batch queue: one every ~2 hours, 1 to 40 hours long; Batch moves on to ``sim.now``."""
        for _ in range(int((self.sim.now - since) / self.tick)):
            if self.rng.random() < self.tick / (2 * HOUR):
                self.batch.add_job(
                    jobName=f"job-{self.jobs_submitted}",
                    jobQueue=QUEUE,
                    jobDefinition="train:3",
                    shareIdentifier="research",
                    parameters={"work_seconds": str(int(self.rng.uniform(1, 40) * 3600))},
                )
                self.jobs_submitted += 1
        self.batch.advance(self.sim.now.timestamp() - self.batch.clock.now)

    def check(self) -> list[str]:
        found = list(self.violations)
        found += [
            f"job {j['jobId']} killed by a rotation"
            for j in self.batch.jobs.values()
            if j.get("statusReason") == REPLACED
        ]
        found += [
            f"the on-demand compute environment was updated: {r}"
            for op, r in self.batch.requests
            if op == "UpdateComputeEnvironment" and r["computeEnvironment"] == ON_DEMAND_CE
        ]
        found += [
            f"{p.window}: {p.offering.id} bought, a piece of an offering of several segments"
            for p in self.sim.made
            if "-segmented" in p.offering.id
        ]
        per_occurrence = Counter((p.window, p.offering.start, p.offering.end) for p in self.sim.made)
        found += [f"bought twice for {key}" for key, n in per_occurrence.items() if n > 1]
        by_window = defaultdict(list)
        for p in self.sim.made:
            by_window[p.window].append(p.offering)
        for name, bought in by_window.items():
            base = self.declared.get(name) or self.declared[name.rsplit("-r", 1)[0]]
            if base.reservations_at_once == 1:
                found += [
                    f"{name}: {a.id} and {b.id} at the same time"
                    for a in bought
                    for b in bought
                    if a.id < b.id and a.start < b.end and b.start < a.end
                ]
        return found

    def paid_idle(self) -> dict[str, tuple[Decimal, Decimal]]:
        """Window -> (instance-hours paid, of them idle)."""
        wanted = {**self.declared, **requests.requested_windows(self.ledger, self.declared)}
        closed = {
            r.name: replace(
                self.declared[r.window],
                name=r.name,
                start=r.start,
                duration_hours=r.hours,
                instance_count=r.count,
                repeat_every_days=None,
            )
            for r, _ in requests.listed(self.ledger)
        }
        wanted = {**closed, **wanted}
        result = {}
        for name, w in wanted.items():
            bought = [p.offering for p in self.sim.made if p.window == name]
            paid = sum((o.instance_hours for o in bought), Decimal(0))
            last = max((o.end for o in bought), default=w.start)
            step = timedelta(days=w.repeat_every_days) if w.repeat_every_days else None
            starts = (
                [w.start] if step is None else [w.start + i * step for i in range(int((last - w.start) / step) + 1)]
            )
            used = Decimal(0)
            for o in bought:
                for s in starts:
                    overlap = min(o.end, s + w.duration_hours * HOUR) - max(o.start, s)
                    if overlap > timedelta(0):
                        used += min(o.count, w.instance_count) * Decimal(overlap.total_seconds()) / 3600
            result[name] = (paid, paid - used)
        return result
