"""Moving a Batch consumer onto a Capacity Block never kills running work (issue 24, outcome 4).

The window's block compute environment is put ahead of the on-demand one in the job queue while
the block is active and behind it, DISABLED and at 0 vCPUs, otherwise; the on-demand compute
environment, where long jobs run, is never updated. Batch is the shared model
(tests/aws_model/batch.py: compute environments, queue order, infrastructure and scaling
updates, each rule citing its page), launch templates and the ledger are moto's."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from gpu_governance_runtime.capacity.rotation import by_consumer, reconcile
from gpu_governance_runtime.contract import TAG_CHECKPOINTABLE
from tests.aws_model.batch import Clock, ClusterInstances, FakeBatch, Faults

from .builders import at, reservation, window
from .stubbed_aws import create_ledger_table

ON_DEMAND = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5"
BLOCK_CE = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block"
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5"
CONSUMER = {
    "kind": "batch_compute_environment",
    "launch_template_name": "gpu-p5",
    "compute_environment": ON_DEMAND,
    "block_compute_environment": BLOCK_CE,
    "job_queue": QUEUE,
}
BLOCK = reservation("cr-0123456789abcdef0", at(10), 1, state="active")  # 10 Dec 11:30 to 11 Dec 11:30, 4 instances
STEP = 900.0  # the controller's default schedule (Batch windows run every 5 minutes; 15 is the slowest)


class World:
    def __init__(self, faults: Faults | None = None):
        self.ec2 = boto3.client("ec2", region_name="us-east-1")
        self.ec2.create_launch_template(
            LaunchTemplateName="gpu-p5", LaunchTemplateData={"InstanceType": "p5.48xlarge", "ImageId": "ami-12345678"}
        )
        self.vcpus = self.ec2.describe_instance_types(InstanceTypes=["p5.48xlarge"])["InstanceTypes"][0]["VCpuInfo"][
            "DefaultVCpus"
        ]
        self.clock = Clock(now=at(10, 9, 0).timestamp())
        self.batch = FakeBatch(self.clock, capacity={}, faults=faults)
        template = {"launchTemplateName": "gpu-p5", "version": "1"}
        self.batch.add_compute_environment(
            ON_DEMAND, vcpus_per_instance=self.vcpus, max_vcpus=2 * self.vcpus, launch_template=template
        )
        vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self.subnets = {  # the block compute environment's subnets: BLOCK is in us-east-1a
            zone: self.ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{n}.0/24", AvailabilityZone=zone)["Subnet"][
                "SubnetId"
            ]
            for n, zone in enumerate(("us-east-1a", "us-east-1b"))
        }
        self.batch.add_compute_environment(
            BLOCK_CE,
            vcpus_per_instance=self.vcpus,
            max_vcpus=0,
            state="DISABLED",
            launch_template=template,
            allocation_strategy="BEST_FIT_PROGRESSIVE",  # infrastructure updates need it [aws: batch-ce.infrastructure-update-strategy]
            subnets=tuple(self.subnets.values()),
            launch_capacity=self._holds,
            launches_into=self._into,
        )
        self.batch.add_job_queue(QUEUE, compute_environments=[ON_DEMAND, BLOCK_CE])
        self.ledger = create_ledger_table()

    blocks = (BLOCK,)  # what EC2 holds: a launch into one of them runs while its instances do

    def _into(self, template) -> str | None:
        """The Capacity Block the launch template version launches into (None: on demand)."""
        data = self.ec2.describe_launch_template_versions(LaunchTemplateName="gpu-p5", Versions=[template["version"]])[
            "LaunchTemplateVersions"
        ][0]["LaunchTemplateData"]
        return (
            data.get("CapacityReservationSpecification", {})
            .get("CapacityReservationTarget", {})
            .get("CapacityReservationId")
        )

    def _holds(self, template) -> int | None:
        """How many instances EC2 runs from the launch template version: into a block, its count while its instances
        run (until 30 minutes before its end), else none [aws: batch-ce.jobs-fail-with-block-instances]."""
        reservation = self._into(template)
        if reservation is None:
            return None
        block = next((b for b in self.blocks if b.id == reservation), None)
        live = block is not None and block.start <= self.now < block.end - timedelta(minutes=30)
        return block.count if live else 0

    @property
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now, tz=UTC)

    def submit(self, name: str, hours: float, *, declared: float | None = None, checkpoints: bool = False) -> str:
        """A job of ``hours`` of work, declaring ``declared`` hours as its run time, tagged checkpointable or not."""
        return self.batch.add_job(
            jobName=name,
            jobQueue=QUEUE,
            jobDefinition="train:3",
            shareIdentifier="research",
            parameters={"work_seconds": str(int(hours * 3600))},
            **({"timeout": {"attemptDurationSeconds": int(declared * 3600)}} if declared else {}),
            tags={TAG_CHECKPOINTABLE: "true"} if checkpoints else {},
        )

    def run(self, mode: str = "auto", *, closing: bool = False) -> dict:
        return reconcile(
            window=window(consumer=CONSUMER, mode=mode, instance_count=4),
            owned=self.blocks,
            dry_run=mode == "dry_run",
            ec2=self.ec2,
            batch=self.batch,
            ecs=ClusterInstances(self.batch),
            eks=None,
            ledger=self.ledger,
            now=self.now,
            closing=closing,
        )

    def until(self, moment: datetime, mode: str = "auto", step: float = STEP) -> list[dict]:
        """Runs every ``step`` seconds; Batch places what the run made possible at once (a run changes the queue)."""
        results = []
        while self.now < moment:
            self.batch.advance(step)
            results.append(self.run(mode))
            self.batch.advance(0)
        return results

    def first(self) -> str:
        return min(self.batch.queues[QUEUE]["computeEnvironmentOrder"], key=lambda o: o["order"])["computeEnvironment"]

    def updates_of(self, arn: str) -> list[dict]:
        return [
            r for op, r in self.batch.requests if op == "UpdateComputeEnvironment" and r["computeEnvironment"] == arn
        ]


@pytest.fixture
def world():
    with mock_aws():
        yield World()


def test_a_long_job_on_demand_keeps_running_when_a_block_arrives_and_new_work_goes_to_the_block(world):
    long_job = world.submit("pretrain", hours=60)
    world.batch.advance(STEP)
    assert world.batch.jobs[long_job]["_environment"] == ON_DEMAND
    world.until(at(10, 13, 0))
    assert (world.first(), world.batch.compute_environments[BLOCK_CE]["state"]) == (BLOCK_CE, "ENABLED")
    assert world.batch.compute_environments[BLOCK_CE]["computeResources"]["maxvCpus"] == 4 * world.vcpus
    on_block = world.submit("finetune", hours=2)
    world.until(at(11, 10, 50))  # the expiration warning: draining
    assert (
        world.batch.jobs[on_block]["_environment"] == BLOCK_CE and world.batch.jobs[on_block]["status"] == "SUCCEEDED"
    )
    assert (world.first(), world.batch.compute_environments[BLOCK_CE]["state"]) == (ON_DEMAND, "DISABLED")
    after_drain = world.submit("eval", hours=1)
    world.until(at(11, 12, 0))  # past the block's end
    assert world.batch.jobs[after_drain]["_environment"] == ON_DEMAND
    assert (
        world.batch.compute_environments[BLOCK_CE]["computeResources"]["maxvCpus"] == 0
    )  # back to 0 once its instances are gone
    # The long job ran through the block's arrival and end on its on-demand instance, which nothing updated.
    assert world.batch.jobs[long_job]["status"] == "RUNNING" and not world.batch.jobs[long_job]["attempts"]
    assert world.updates_of(ON_DEMAND) == []
    launch = [u for u in world.updates_of(BLOCK_CE) if "launchTemplate" in (u["computeResources"] or {})]
    assert (
        len(launch) == 1
    )  # the block compute environment's one infrastructure update, while DISABLED and behind on demand
    version = launch[0]["computeResources"]["launchTemplate"]["version"]
    data = world.ec2.describe_launch_template_versions(LaunchTemplateName="gpu-p5", Versions=[version])[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == BLOCK.id
    assert data["InstanceMarketOptions"]["MarketType"] == "capacity-block"


def test_a_refused_queue_update_is_an_error_until_the_next_run_puts_the_block_first():
    refuse_once = iter([True])
    faults = Faults(
        lambda operation, phase: (
            "throttle" if operation == "UpdateJobQueue" and phase == "before" and next(refuse_once, False) else None
        )
    )
    with mock_aws():
        world = World(faults)
        world.clock.now = at(10, 12, 0).timestamp()
        first = world.run()  # launches the block compute environment into the block: UPDATING, the queue must wait
        assert (
            first["state"].endswith("waiting: the block compute environment is UPDATING") and world.first() == ON_DEMAND
        )
        world.batch.advance(STEP)
        refused = world.run()
        assert (
            refused["error"].startswith("TooManyRequestsException") and refused["retry"] == "next run"
        )  # ConsumerErrors: the alarm fires
        assert world.first() == ON_DEMAND
        world.batch.advance(STEP)
        retried = world.run()
        assert retried["state"] == "moved; in place" and "error" not in retried and world.first() == BLOCK_CE
        assert world.run()["state"] == "in place"  # a repeated run changes nothing


def test_changes_someone_else_made_are_reported_and_undone(world):
    world.until(at(10, 12, 30))
    assert world.first() == BLOCK_CE
    world.batch.update_job_queue(
        jobQueue=QUEUE,
        computeEnvironmentOrder=[  # someone puts on demand first again
            {"order": 1, "computeEnvironment": ON_DEMAND},
            {"order": 2, "computeEnvironment": BLOCK_CE},
        ],
    )
    found = world.run()
    assert (
        found["changed_by_someone_else"]
        == "the block compute environment was taken out of first place in the job queue"
    )
    assert world.first() == BLOCK_CE
    world.until(at(11, 11, 0))  # drained
    world.batch.update_compute_environment(
        computeEnvironment=BLOCK_CE, state="ENABLED"
    )  # someone enables it after the drain
    found = world.run()
    assert found["changed_by_someone_else"] == "the block compute environment was enabled"
    assert world.batch.compute_environments[BLOCK_CE]["state"] == "DISABLED"


def test_dry_run_changes_nothing_and_says_what_it_would_do(world):
    long_job = world.submit("pretrain", hours=60)
    results = world.until(at(10, 13, 0), mode="dry_run")
    assert results[-1]["dry_run"] is True
    assert results[-1]["would"] == f"launch it into the block {BLOCK.id} ({4 * world.vcpus} vCPUs)"
    assert [op for op, _ in world.batch.requests if op.startswith("Update")] == []
    assert [
        v["VersionNumber"]
        for v in world.ec2.describe_launch_template_versions(LaunchTemplateName="gpu-p5")["LaunchTemplateVersions"]
    ] == [1]
    assert world.batch.jobs[long_job]["status"] == "RUNNING"


def test_a_block_environment_left_first_and_enabled_is_taken_out_before_its_template_changes(world):
    world.batch.update_compute_environment(
        computeEnvironment=BLOCK_CE, state="ENABLED", computeResources={"maxvCpus": 2 * world.vcpus}
    )
    world.batch.update_job_queue(
        jobQueue=QUEUE,
        computeEnvironmentOrder=[
            {"order": 1, "computeEnvironment": BLOCK_CE},
            {"order": 2, "computeEnvironment": ON_DEMAND},
        ],
    )
    world.clock.now = at(10, 12, 0).timestamp()
    result = world.run()
    assert result["did"][:3] == [
        "take the block compute environment out of first place",
        "disable it",
        f"launch it into the block {BLOCK.id} ({4 * world.vcpus} vCPUs)",
    ]


def test_a_request_drawing_on_the_window_moves_the_same_queue_once_not_back_and_forth(world):
    declared = window(consumer=CONSUMER, instance_count=4)
    requested = replace(declared, name="launch-load-test-r1a2b3c")
    [(chosen, sharing)] = by_consumer([requested, declared])
    assert (chosen.name, sharing) == ("launch-load-test", frozenset({"launch-load-test-r1a2b3c"}))
    block = replace(BLOCK, window=requested.name)  # bought for the request
    world.clock.now = at(10, 12, 0).timestamp()
    for _ in range(3):
        world.batch.advance(STEP)
        reconcile(
            window=chosen,
            owned=(block,),
            sharing=sharing,
            dry_run=False,
            ec2=world.ec2,
            batch=world.batch,
            ecs=ClusterInstances(world.batch),
            eks=None,
            ledger=world.ledger,
            now=world.now,
        )
    assert world.first() == BLOCK_CE
    assert [op for op, _ in world.batch.requests if op == "UpdateJobQueue"] == [
        "UpdateJobQueue"
    ]  # put first once, never taken back


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"allocationStrategy": None}, "allocationStrategy: infrastructure updates are not supported (BEST_FIT)"),
        ({"allocationStrategy": "BEST_FIT"}, "allocationStrategy: infrastructure updates are not supported (BEST_FIT)"),
        (
            {"serviceRole": "arn:aws:iam::111122223333:role/batch-service"},
            "serviceRole: infrastructure updates need the service-linked role",
        ),
        (
            {"instanceTypes": ["optimal"]},
            "instanceTypes: Batch may choose a type the block does not hold (['optimal'])",
        ),
        ({"subnets": "us-east-1b"}, "subnets: none in the block's zone us-east-1a (subnets in us-east-1b)"),
    ],
)
def test_a_block_compute_environment_aws_would_not_move_onto_the_block_is_reported_and_left_alone(world, change, named):
    """[aws: batch-ce.infrastructure-update-strategy], [aws: batch-ce.subnet-in-block-zone]: an environment with
    BEST_FIT (Batch's default), another service role, other instance types or no subnet in the block's zone is
    never updated onto the block (AWS would refuse the update, or the block's instances could not launch): the run
    reports the field, the value and what is allowed, every run, and the queue keeps sending work on demand. Fails
    on the rotation before issue 37, which made the infrastructure update whatever the environment."""
    resources = world.batch.compute_environments[BLOCK_CE]["computeResources"]
    for key, value in change.items():
        if value is None:
            resources.pop(key)
        elif key == "subnets":
            resources["subnets"] = [world.subnets[value]]
        else:
            resources[key] = value
    results = world.until(at(10, 13, 0))
    during_block = [r for r in results if "error" in r]
    assert len(during_block) >= 6, results  # every run from the block's start (11:30) on
    assert all(named in r["error"] and r["error"].endswith("nothing moved") for r in during_block), during_block[-1]
    assert not [u for u in world.updates_of(BLOCK_CE) if "launchTemplate" in (u["computeResources"] or {})]
    assert (world.first(), world.batch.compute_environments[BLOCK_CE]["state"]) == (ON_DEMAND, "DISABLED")


def test_the_block_environment_is_ready_before_the_block_starts_and_the_first_waiting_job_starts_with_it(world):
    """[aws: ec2-cb.launch-template-before-start]: the launch template into the block and the infrastructure update
    are done within rotation.PREPARE_LEAD before the block starts, DISABLED and behind on demand; at 11:30 the run
    enables it and puts it first, and a job waiting in the queue starts on the block then. Fails on the rotation before
    issue 40, which began the update at the block's start: the first job started 10 minutes or more after it."""
    for n in range(3):  # the on-demand compute environment holds 2: one waits
        world.submit(f"wait-{n}", hours=30)
    results = world.until(at(10, 10, 0)) + world.until(at(10, 11, 25), step=300.0)
    launch = [u for u in world.updates_of(BLOCK_CE) if "launchTemplate" in (u["computeResources"] or {})]
    assert len(launch) == 1 and at(10, 10, 30).timestamp() <= launch[0]["_at"] < at(10, 11, 30).timestamp()
    assert results[-1]["wants"].endswith("from its start at 11:30 UTC, DISABLED until then")
    assert (world.first(), world.batch.compute_environments[BLOCK_CE]["state"]) == (ON_DEMAND, "DISABLED")
    world.until(at(10, 11, 30), step=300.0)
    started = [j for j in world.batch.jobs.values() if j.get("_environment") == BLOCK_CE]
    assert [(j["jobName"], j["startedAt"]) for j in started] == [("wait-2", int(at(10, 11, 30).timestamp() * 1000))]


def test_the_block_environment_waits_for_the_last_blocks_jobs_before_it_is_moved(world):
    """The infrastructure update onto another block would end a job still on the environment after
    jobExecutionTimeoutMinutes [aws: batch-ce.infrastructure-update-grace]: the rotation waits until no job is on it
    (the one below ends with its block's instances, [aws: batch-ce.jobs-fail-with-block-instances]). Fails on the
    rotation before issue 40, which moved at once: the job ended "replaced by a compute environment infrastructure
    update" while its block still ran."""
    later = reservation("cr-0fedcba9876543210", at(11, 5, 30), 2, state="active")  # starts while BLOCK still runs
    world.blocks = (BLOCK, later)
    world.clock.now = at(10, 12, 0).timestamp()
    world.until(at(10, 13, 0), step=300.0)
    job = world.submit("on-the-block", hours=60)
    world.batch.advance(0)
    assert world.batch.jobs[job]["_environment"] == BLOCK_CE
    results = world.until(at(11, 10, 0)) + world.until(at(11, 12, 0), step=300.0)
    assert any(r.get("state", "").endswith("waiting: 1 job(s) still on the block compute environment") for r in results)
    assert world.batch.jobs[job]["statusReason"].startswith("Host EC2 (instance i-")  # ended with BLOCK's instances
    assert world.first() == BLOCK_CE and "Capacity Block cr-0fedcba9876543210" in results[-1]["launches_into"]
