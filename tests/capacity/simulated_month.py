"""A month of capacity windows on the simulated EC2 market (``simulated_ec2``), driven through the controller, the
request path and the handler's steps for a Batch consumer (fill the block, rotate, requeue at its end), with faults at
the purchase call, and measured by the jobs on each block (issue 40).

Windows: a declared one-off window (a Batch compute environment), a recurring one (an EKS node group), on-demand
requests, and a flapping alarm (ALARM, OK, ALARM 40 minutes later, and again). Runs: every ``tick`` (the construct
runs the controller every 5 minutes while a window feeds a Batch compute environment) and at each request. Each
purchase call takes a fault drawn from ``FAULTS``; EC2 lists a block ``lag`` after it was bought. The market answers
every search with the shapes AWS documents: a whole offering of the asked count from the first 11:30 UTC, two
half-size pieces in two zones over the same hours (what a consumer of one launch template cannot use together), an
offering of two segments, and for a search from now an instant block.

The work (``workload.demand``): each window's and request's own jobs in its hours, and background training jobs on
the Batch queue at ``load`` times its on-demand pool of ``on_demand`` instances; every job declares its run time and
half the background ones checkpoint. The Batch consumer is the Batch model (tests/aws_model/batch.py): a job queue over
an on-demand compute environment and the window's block compute environment, moved by the real rotation (with
throttled Batch calls); each job runs on an instance of its own, and a job on a block ends when the block's instances
do. The node group's pods are played here: on the block's nodes while the rotation keeps it scaled up, else on an
on-demand node group of the team's of ``eks_on_demand`` nodes, else pending. A job that checkpoints does so every ``CHECKPOINT_EVERY`` of work and when told
(the drain and move events), and its copy resumes from there; one that does not starts again.

Measured per block (``figures``): instance-hours paid; with a job on a block instance; of work cut at the block's end
(done on the block since the job's last checkpoint and lost when the controller stopped it or its instance ended);
idle while work waited or ran elsewhere; idle with no work.

Invariants (``Month.check``): at most one purchase per occurrence; no two blocks of a window that launches into one
reservation at a time overlap; no offering of several segments bought; no job killed by a rotation (no job ends by an
infrastructure update, the on-demand compute environment is never updated); no job outlives its instance; every
consumer is off each block before its instances end (30 minutes before the block): the Batch block compute
environment DISABLED and behind the on-demand one, the node group scaled to 0.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from constructs_lib.model.capacity import DEFAULT_BUY_AHEAD_DAYS, DEFAULT_MIN_YIELD
from gpu_governance_runtime.capacity import consumer_steps, controller, handler, requests, requeue, rotation
from gpu_governance_runtime.capacity.aws import CapacityMarket
from gpu_governance_runtime.capacity.ledger import Ledger
from gpu_governance_runtime.common.batch_copy import REASON_PREFIX
from gpu_governance_runtime.contract import TAG_CHECKPOINTABLE, TAG_REQUEUED_FROM
from gpu_governance_runtime.planners import market
from gpu_governance_runtime.planners.capacity import Offering, Window
from tests.aws_model.batch import REPLACED, BlockInstances, Clock, ClusterInstances, FakeBatch, Faults
from tests.aws_model.dynamodb import FakeDynamoDB

from .builders import NOW, window
from .offline_optimum import Need
from .simulated_ec2 import FAULTS, Killed, SimulatedEc2
from .stubbed_aws import CONTROLLER, TABLE
from .workload import Job, demand

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
    """The reference windows, with the governance file's defaults for min_yield and buy_ahead_days."""
    return [
        window(
            name="launch-test",
            consumer=BATCH,
            mode="auto",
            start=NOW + timedelta(days=3, hours=5),
            duration_hours=30,
            budget=Decimal("200000"),
            instance_count=4,
            min_yield=DEFAULT_MIN_YIELD,
            buy_ahead_days=DEFAULT_BUY_AHEAD_DAYS,
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
            min_yield=DEFAULT_MIN_YIELD,
            buy_ahead_days=DEFAULT_BUY_AHEAD_DAYS,
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


def _offering(id, instance_type, count, zone, per_hour, start, end, segments) -> Offering:
    """An offering from ``start`` to ``end`` (an 11:30 UTC), its fee per instance-hour bought."""
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
        own [aws: ec2-cb.offering-segments]), cheaper than all; and for a search from now, instant blocks too,
        starting minutes after the search and ending at the 11:30 UTC before and after that start plus the days asked
        ("slightly less" and "slightly greater"), priced pro rata [aws: ec2-cb.instant-start]."""
        hours, count = params["CapacityDurationHours"], params["InstanceCount"]
        earliest = params.get("StartDateRange", self.now)
        start = earliest.replace(hour=11, minute=30, second=0, microsecond=0)
        start += timedelta(days=1) if start < earliest else timedelta(0)
        days = hours * HOUR
        shapes = [
            ("", count, "us-east-1a", "31", start, start + days, 1),
            ("-half-a", max(count // 2, 1), "us-east-1b", "25", start, start + days, 1),
            ("-half-b", max(count // 2, 1), "us-east-1c", "25", start, start + days, 1),
            ("-segmented", count, "us-east-1a", "22", start, start + days, 2),
        ]
        if earliest <= self.now + INSTANT_SEARCH:  # "slightly less" and "slightly greater" than the days asked
            begins = _minute(self.now + INSTANT_START)
            greater = market.next_block_end(begins + days)
            shapes.append(("-instant", count, "us-east-1a", "31", begins, greater, 1))
            if greater - timedelta(days=1) > begins:
                shapes.append(("-instant-less", count, "us-east-1a", "31", begins, greater - timedelta(days=1), 1))
        made = [
            _offering(
                f"cbo-{params['InstanceType']}-{count}-{hours}-{at:%m%d%H%M}{suffix}",
                params["InstanceType"],
                size,
                zone,
                per_hour,
                at,
                end,
                segments,
            )
            for suffix, size, zone, per_hour, at, end, segments in shapes
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


# A job that checkpoints saves its progress this often, and whenever it is told its instance is going (the drain and
# move events); stopped or cut, it loses what it did since, and its copy resumes from there.
CHECKPOINT_EVERY = timedelta(hours=1)


@dataclass
class BlockHours:
    """Instance-hours of one block (or all of a window's): ``paid`` = ``with_job`` + ``idle_waited`` + ``idle_none``;
    ``cut`` is work done with a job on it and lost at its end."""

    paid: float = 0.0
    with_job: float = 0.0
    cut: float = 0.0
    idle_waited: float = 0.0  # idle while work of its consumer waited or ran elsewhere (on demand)
    idle_none: float = 0.0  # idle with no work of its consumer anywhere

    def add(self, other: BlockHours) -> BlockHours:
        return BlockHours(*(a + b for a, b in zip(vars(self).values(), vars(other).values(), strict=True)))


class Events:
    """EventBridge for the drain and move events: the jobs they name (or the block's) checkpoint from then on."""

    def __init__(self, month: Month):
        self.month = month

    def put_events(self, *, Entries):
        for entry in Entries:
            detail = json.loads(entry["Detail"])
            self.month.told.update(detail.get("jobs") or self.month.batch_jobs_on(detail["capacity_reservation_id"]))
        return {"FailedEntryCount": 0, "Entries": [{"EventId": f"event-{n}"} for n, _ in enumerate(Entries)]}


@dataclass
class Pod:
    """One pod of the node group's work: on the block's nodes while they run, else on demand."""

    job: Job
    left: float  # seconds of work
    saved: float  # seconds of work left at its last checkpoint (where an eviction sends it back)
    on: str | None = None  # the reservation whose node it runs on, "on_demand", or None (pending)
    done: bool = False


@dataclass
class Month:
    ledger: object
    days: int = 30
    tick: timedelta = timedelta(minutes=5)  # the construct's schedule while a window feeds a Batch compute environment
    seed: int = 0
    load: float = 0.8  # background work on the Batch queue, as a share of its on-demand pool
    on_demand: int = 4  # instances of the Batch queue's on-demand compute environment
    eks_on_demand: int = 2  # nodes of the team's on-demand node group (the node group's pods wait when it is full)
    fault_share: float = 0.3
    lag: timedelta = timedelta(minutes=10)
    runs: int = 0
    batch_throttle_share: float = 0.05
    refuse_each_update_once: bool = False  # every Batch update is throttled once, then goes through on the next run
    declared_windows: list[Window] = field(default_factory=lambda: windows())
    # node group -> the block the rotation keeps it scaled up on after the last run (None: at size 0)
    scaled_on: dict = field(default_factory=dict)
    violations: list = field(default_factory=list)
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
        self.declared = {w.name: w for w in self.declared_windows}
        self.batch = FakeBatch(Clock(now=NOW.timestamp()), capacity={}, faults=Faults(self._batch_fault))
        self._refused = False
        template = {"launchTemplateName": "gpu-p5", "version": "1"}
        self.batch.add_compute_environment(
            ON_DEMAND_CE, vcpus_per_instance=P5_VCPUS, max_vcpus=self.on_demand * P5_VCPUS, launch_template=template
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
            launches_into=self._block_of,
        )
        self.batch.add_job_queue(QUEUE, compute_environments=[ON_DEMAND_CE, BLOCK_CE])
        # The planner buys only where the block compute environment has a subnet (consumers.launch_zones).
        self.sim.market = CapacityMarket(
            ec2=self.sim.client, sagemaker=None, controller_id=CONTROLLER, batch=self.batch
        )
        self.clients = handler.Clients(  # what the handler's Batch steps call (fill, drain, requeue)
            ec2=BlockInstances(self.batch),
            sagemaker=None,
            purchase_ec2=None,
            purchase_sagemaker=None,
            dynamodb=None,
            sns=None,
            events=Events(self),
            batch=self.batch,
            eks=None,
            ecs=ClusterInstances(self.batch),
            ssm=None,
            submit_batch=self.batch,
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
        self.jobs = demand(
            seed=self.seed,
            start=NOW,
            end=NOW + timedelta(days=self.days),
            load=self.load,
            on_demand=self.on_demand,
            windows=list(self.declared.values()),
            asks=self.asks,
        )
        self.by_name: dict[str, Job] = {}  # Batch job name -> its work
        self.pods: list[Pod] = []
        self.told: set[str] = set()  # jobs told to checkpoint (drain and move events)
        self.saved: dict[str, float] = {}  # job id -> seconds of work left at its last checkpoint
        self.on_block: dict[str, str] = {}  # job id -> the reservation it ran on at the last look
        self.hours: dict[str, BlockHours] = defaultdict(BlockHours)  # reservation id -> its hours
        self.lost_jobs: list[str] = []  # ended with their instance, not stopped and copied by the controller

    # --- the market and the Batch model ------------------------------------------------------

    def _reservation_of(self, template) -> str | None:
        data = self.sim.versions[int(template["version"]) - 1]
        return (
            data.get("CapacityReservationSpecification", {})
            .get("CapacityReservationTarget", {})
            .get("CapacityReservationId")
        )

    def _block_of(self, template) -> str | None:
        return self._reservation_of(template)

    def _block_holds(self, template) -> int | None:
        """How many instances EC2 runs from the block compute environment's launch template version: into a block, no
        more than it holds while its instances run [aws: ec2-cb.launch-beyond-block-fails], and none once they end
        [aws: batch-ce.jobs-fail-with-block-instances]; on demand, any number."""
        reservation = self._reservation_of(template)
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

    def batch_jobs_on(self, reservation_id: str) -> list[str]:
        return [
            j["jobId"]
            for j in self.batch.active.values()
            if j.get("_instance") and self._block_of(j["_launched_from"]) == reservation_id
        ]

    # --- the controller ------------------------------------------------------------------------

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
        """One controller run, as the handler does it for these consumers."""
        now = self.sim.now
        every = {**self.declared, **requests.requested_windows(self.ledger, self.declared)}
        requeue.resume(ledger=self.ledger, batch=self.batch, submit=self.batch, now=now)
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
        fills = consumer_steps.fill_batch_blocks(every, blocks, self.clients, self.ledger, now)
        closing = {f["window"] for f in fills if f.get("closing")}
        for w, sharing in rotation.by_consumer(every.values()):
            if w.consumer["kind"] == "batch_compute_environment":  # the real rotation, on the Batch model
                result = rotation.reconcile(
                    window=w,
                    owned=blocks,
                    dry_run=False,
                    ec2=self.sim.client,
                    batch=self.batch,
                    ecs=self.clients.ecs,
                    eks=None,
                    ledger=self.ledger,
                    now=now,
                    sharing=sharing,
                    closing=w.name in closing,
                )
                self.rotation_errors += "error" in result
            else:  # the node group: the rotation's decision (scaled to the block while one is active, else to 0)
                block = rotation.active_block(w, blocks, now, sharing)
                self.scaled_on[w.consumer["nodegroup_name"]] = None if block is None else block.id
        if any(f.get("taken_off") for f in fills):
            requeue.resume(ledger=self.ledger, batch=self.batch, submit=self.batch, now=now)
        consumer_steps.drain_batch_blocks(
            every, blocks, self.clients, self.ledger, now, lambda: float("inf"), handled=None
        )
        self._check_targets(now)

    def _check_targets(self, now):
        order = sorted(self.batch.queues[QUEUE]["computeEnvironmentOrder"], key=lambda o: o["order"])
        block_ce = self.batch.compute_environments[BLOCK_CE]
        for p in self.sim.made:
            ends = p.offering.end - market.TERMINATION_LEAD
            if (
                self._consumer(p.window) == "batch"
                and ends <= now < p.offering.end
                and (order[0]["computeEnvironment"] == BLOCK_CE or block_ce["state"] == "ENABLED")
                and self._block_of(block_ce["computeResources"]["launchTemplate"]) == p.reservation_id
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

    def _consumer(self, window_name: str) -> str:
        base = self.declared.get(window_name) or self.declared[window_name.rsplit("-r", 1)[0]]
        return "batch" if base.consumer["kind"] == "batch_compute_environment" else "eks"

    # --- the month -----------------------------------------------------------------------------

    def play(self):
        end = NOW + timedelta(days=self.days)
        asks, jobs = list(self.asks), list(self.jobs)
        while self.sim.now < end:
            now = self.sim.now
            while jobs and jobs[0].submit_at <= now:
                self._submit(jobs.pop(0))
            while asks and asks[0][0] <= now:
                self.ask(*asks.pop(0))
            self.run()
            self.batch.advance(0)  # Batch places what the run made possible
            self._follow_jobs()
            self._place_pods(now)
            self._measure(now)
            self.sim.now = now + self.tick
            self.batch.advance(self.tick.total_seconds())
            self._work_pods(now)
            self._follow_jobs()
        return self

    def _submit(self, job: Job) -> None:
        if job.consumer == "eks":
            self.pods.append(Pod(job=job, left=job.hours * 3600, saved=job.hours * 3600))
            return
        self.by_name[job.name] = job
        self.batch.add_job(
            jobName=job.name,
            jobQueue=QUEUE,
            jobDefinition="train:3",
            shareIdentifier=job.share,
            parameters={"work_seconds": str(int(job.hours * 3600))},
            timeout={"attemptDurationSeconds": int(job.declared_hours * 3600)},
            tags={TAG_CHECKPOINTABLE: "true"} if job.checkpoints else {},
        )

    def _follow_jobs(self) -> None:
        """Checkpoints, the work cut when a job leaves a block before it is done, and copies resuming their
        original's last checkpoint."""
        for job in self.batch.active.values():
            job_id = job["jobId"]
            if job["status"] not in ("STARTING", "RUNNING"):
                continue
            left = self.batch.work[job_id]
            if job_id not in self.saved:  # a new attempt: a copy resumes where its original checkpointed
                original = job["tags"].get(TAG_REQUEUED_FROM)
                if original in self.saved and self.by_name[job["jobName"]].checkpoints:
                    self.batch.work[job_id] = left = self.saved[original]
                self.saved[job_id] = left
            elif self.by_name[job["jobName"]].checkpoints:
                every = CHECKPOINT_EVERY.total_seconds()
                done = self.saved[job_id] - left
                self.saved[job_id] = left if job_id in self.told else self.saved[job_id] - every * (done // every)
            reservation = self._block_of(job["_launched_from"]) if job.get("_instance") else None
            if reservation is not None:
                self.on_block[job_id] = reservation
        for job_id, reservation in list(self.on_block.items()):
            job = self.batch.jobs[job_id]
            if job.get("_instance") and job["status"] in ("STARTING", "RUNNING"):
                continue
            del self.on_block[job_id]
            if job["status"] == "SUCCEEDED":
                continue
            self.hours[reservation].cut += (self.saved[job_id] - self.batch.work[job_id]) / 3600
            if job["status"] == "FAILED" and not job["statusReason"].startswith(REASON_PREFIX):
                self.lost_jobs.append(job_id)

    # --- the node group's pods -----------------------------------------------------------------

    def _nodes(self, now) -> dict[str, int]:
        """Reservation -> nodes of the node group up on it: scaled up by the rotation while its instances run."""
        up = {}
        for p in self.sim.made:
            o = p.offering
            if p.reservation_id in self.scaled_on.values() and o.start <= now < o.end - market.TERMINATION_LEAD:
                up[p.reservation_id] = o.count
        return up

    def _place_pods(self, now) -> None:
        nodes = self._nodes(now)
        for pod in self.pods:
            if pod.on not in (None, "on_demand") and pod.on not in nodes:  # its node scaled down or ended: evicted
                self.hours[pod.on].cut += (pod.saved - pod.left) / 3600
                pod.left, pod.on = pod.saved, None
        for pod in (p for p in self.pods if not p.done and p.on is None):
            free = next((r for r, n in nodes.items() if sum(p.on == r for p in self.pods) < n), None)
            if free is None and sum(p.on == "on_demand" for p in self.pods) < self.eks_on_demand:
                free = "on_demand"  # the team's on-demand node group takes what the block's nodes do not
            if free is None:
                break  # pending until a node frees up
            pod.on = free

    def _work_pods(self, now) -> None:
        every = CHECKPOINT_EVERY.total_seconds()
        for pod in (p for p in self.pods if p.on is not None and not p.done):
            pod.left -= self.tick.total_seconds()
            if pod.left <= 0:
                pod.done, pod.on = True, None
            elif pod.job.checkpoints:
                pod.saved -= every * ((pod.saved - pod.left) // every)

    # --- measuring -----------------------------------------------------------------------------

    def _measure(self, now) -> None:
        """The tick from ``now``: per block paid, with a job, and idle with or without work of its consumer elsewhere."""
        end = now + self.tick
        waiting = {  # work of the consumer waiting, or running on demand
            "batch": sum(
                1
                for j in self.batch.active.values()
                if j["status"] == "RUNNABLE" or (j.get("_instance") and j["_environment"] == ON_DEMAND_CE)
            ),
            "eks": sum(1 for p in self.pods if not p.done and p.on in (None, "on_demand")),
        }
        for p in self.sim.made:
            o = p.offering
            seconds = (min(end, o.end) - max(now, o.start)).total_seconds()
            if seconds <= 0:
                continue
            hours, kind = seconds / 3600, self._consumer(p.window)
            busy = (
                len(self.batch.instances_in(p.reservation_id))
                if kind == "batch"
                else sum(pod.on == p.reservation_id for pod in self.pods)
            )
            idle = o.count - busy
            waited = min(idle, waiting[kind])
            row = self.hours[p.reservation_id]
            row.paid += o.count * hours
            row.with_job += busy * hours
            row.idle_waited += waited * hours
            row.idle_none += (idle - waited) * hours

    def figures(self) -> dict[str, BlockHours]:
        """Window -> its blocks' hours (requests under their own names)."""
        by_window: dict[str, BlockHours] = defaultdict(BlockHours)
        for p in self.sim.made:
            by_window[p.window] = by_window[p.window].add(self.hours[p.reservation_id])
        return dict(by_window)

    def needs(self) -> list[Need]:
        """What the controller bought capacity for, as far as it covered it: each bought window occurrence's or
        request's hours while the blocks bought for it run (the offline optimum serves the same)."""
        asked = {r.name: r for r, _ in requests.listed(self.ledger)}
        spans: dict[str, tuple[str, int, datetime, datetime]] = {}
        for p in self.sim.made:
            usable = (p.offering.start, p.offering.end - market.TERMINATION_LEAD)
            if p.window in asked:
                r = asked[p.window]
                hours = [(r.name, r.count, r.start, r.start + r.hours * HOUR)]
            else:
                w = self.declared[p.window]
                step = timedelta(days=w.repeat_every_days or 1)
                starts = [w.start + k * step for k in range(int((p.offering.end - w.start) / step) + 1)]
                hours = [
                    (f"{w.name}@{s:%Y%m%dT%H%MZ}", w.instance_count, s, s + w.duration_hours * HOUR)
                    for s in (starts if w.repeat_every_days else [w.start])
                ]
            for name, count, begins, ends in hours:
                served = (max(begins, usable[0]), min(ends, usable[1]))
                if served[0] < served[1]:
                    _, _, a, b = spans.get(name, (name, count, *served))
                    spans[name] = (self._consumer(p.window), count, min(a, served[0]), max(b, served[1]))
        return sorted((Need(name, *span) for name, span in spans.items()), key=lambda n: n.start)

    def declined(self) -> list[dict]:
        """What the controller did not buy for yield, with its reason (the ledger's records)."""
        return [details for _, _, details in self.ledger.actions(controller.DECLINED_PREFIX, ("declined",))]

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
            f"job {j['jobId']} runs on {self._block_of(j['_launched_from'])}, whose instances have ended"
            for j in self.batch.active.values()
            if j.get("_instance") and self._block_holds(j["_launched_from"]) == 0
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
