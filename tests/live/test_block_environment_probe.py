"""The block-environment-update probe, offline: botocore's Stubber plays EC2, Batch and ECS (each
request checked against the real service model), the probe runs the real rotation
(capacity/rotation.py) against them, and every test ends with the environment put back and the
versions the rotation made deleted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.live import framework
from tests.live.framework import FAIL, INCONCLUSIVE, PASS
from tests.live.probes import block_environment
from tests.live.probes._batch import REASON

BLOCK = "cr-0123456789abcdef0"
ENVIRONMENT = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block"
ON_DEMAND = "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5"
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/verify-live-block"
CLUSTER = "arn:aws:ecs:us-east-1:111122223333:cluster/AWSBatch-gpu-p5-block-1a2b"
INSTANCE = "arn:aws:ecs:us-east-1:111122223333:container-instance/AWSBatch-gpu-p5-block-1a2b/0f1e"
LAST_BLOCKS = "arn:aws:ecs:us-east-1:111122223333:container-instance/AWSBatch-gpu-p5-block-1a2b/0aaa"
VCPUS = 192
ARGS = dict(
    block_reservation=BLOCK,
    block_compute_environment="gpu-p5-block",
    block_job_queue="verify-live-block",
    block_job_definition="sleep-a-minute:1",
)
BY_DEFAULT = "$Default"  # how docs/capacity.md creates the environment: the undo step puts this back


def order_of(first):
    """The test queue's order: the block compute environment first, or behind the on-demand one."""
    environments = [ENVIRONMENT, ON_DEMAND] if first else [ON_DEMAND, ENVIRONMENT]
    return [{"order": i + 1, "computeEnvironment": e} for i, e in enumerate(environments)]


class Sandbox:
    """Scripts what EC2, Batch and ECS answer, keeping the environment's state as the calls change it."""

    def __init__(self, stubs):
        self.ec2, self.batch, self.ecs = stubs("ec2"), stubs("batch"), stubs("ecs")
        self.state, self.status, self.version, self.max_vcpus, self.first = "DISABLED", "VALID", BY_DEFAULT, 0, False

    # --- answers ---------------------------------------------------------------------------------

    def block(self, state="active", ends_in=timedelta(days=1)):
        now = datetime.now(UTC)
        self.ec2.add_response(
            "describe_capacity_reservations",
            {
                "CapacityReservations": [
                    {
                        "CapacityReservationId": BLOCK,
                        "InstanceType": "p5.48xlarge",
                        "AvailabilityZone": "us-east-1a",
                        "TotalInstanceCount": 1,
                        "State": state,
                        "ReservationType": "capacity-block",
                        "StartDate": now - timedelta(hours=1),
                        "EndDate": now + ends_in,
                    }
                ]
            },
            {"CapacityReservationIds": [BLOCK]},
        )

    def environment(self, name=ENVIRONMENT):
        self.batch.add_response(
            "describe_compute_environments",
            {
                "computeEnvironments": [
                    {
                        "computeEnvironmentName": "gpu-p5-block",
                        "computeEnvironmentArn": ENVIRONMENT,
                        "ecsClusterArn": CLUSTER,
                        "type": "MANAGED",
                        "state": self.state,
                        "status": self.status,
                        "computeResources": {
                            "type": "EC2",
                            "allocationStrategy": "BEST_FIT_PROGRESSIVE",
                            "minvCpus": 0,
                            "maxvCpus": self.max_vcpus,
                            "instanceTypes": ["p5.48xlarge"],
                            "subnets": ["subnet-1a"],
                            "instanceRole": "ecsInstanceRole",
                            "launchTemplate": {"launchTemplateName": "gpu-p5", "version": self.version},
                        },
                    }
                ]
            },
            {"computeEnvironments": [name]},
        )

    def queue(self, name=QUEUE):
        """The test queue, asked for by ``name`` (None: the listing of every queue, as ``block_jobs.queues_of`` asks)."""
        self.batch.add_response(
            "describe_job_queues",
            {
                "jobQueues": [
                    {
                        "jobQueueName": "verify-live-block",
                        "jobQueueArn": QUEUE,
                        "state": "ENABLED",
                        "priority": 1,
                        "computeEnvironmentOrder": order_of(self.first),
                    }
                ]
            },
            {"jobQueues": [name]} if name else {},
        )

    @staticmethod
    def launch_data(into_block):
        data = {"InstanceType": "p5.48xlarge", "ImageId": "ami-12345678"}
        if into_block:
            data = {
                **data,
                "InstanceMarketOptions": {"MarketType": "capacity-block"},
                "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": BLOCK}},
            }
        return data

    def template_version(self, asked, number, into_block):
        data = self.launch_data(into_block)
        self.ec2.add_response(
            "describe_launch_template_versions",
            {
                "LaunchTemplateVersions": [
                    {"LaunchTemplateName": "gpu-p5", "VersionNumber": number, "LaunchTemplateData": data}
                ]
            },
            {"LaunchTemplateName": "gpu-p5", "Versions": [asked]},
        )

    def read_by_the_rotation(self):
        """What one step of the rotation reads: the environment, the queue, its template version, the vCPUs."""
        self.environment()
        self.queue()
        moved = self.version == "2"
        self.template_version(self.version, 2 if moved else 1, moved)
        self.ec2.add_response(
            "describe_instance_types",
            {"InstanceTypes": [{"InstanceType": "p5.48xlarge", "VCpuInfo": {"DefaultVCpus": VCPUS}}]},
            {"InstanceTypes": ["p5.48xlarge"]},
        )

    def jobs_on_it(self, *jobs):
        """The rotation's look for jobs on the environment before it moves it (``block_jobs.jobs_on``, STARTING
        and RUNNING): its ECS cluster's container instances, then (when it has some) its queues' jobs on them."""
        self.environment()
        self.ecs.add_response(
            "list_container_instances",
            {"containerInstanceArns": [job["container"]["containerInstanceArn"] for job in jobs]},
            {"cluster": CLUSTER},
        )
        if not jobs:
            return
        self.queue(name=None)
        for status in ("STARTING", "RUNNING"):
            listed = [{"jobId": j["jobId"], "jobName": j["jobName"]} for j in jobs if j["status"] == status]
            self.batch.add_response("list_jobs", {"jobSummaryList": listed}, {"jobQueue": QUEUE, "jobStatus": status})
        self.batch.add_response("describe_jobs", {"jobs": list(jobs)}, {"jobs": [j["jobId"] for j in jobs]})

    def rotation_waits_for(self, *jobs):
        """One run of the rotation that finds jobs still on the environment: it reads and waits, changing nothing."""
        self.read_by_the_rotation()
        self.subnets()
        self.jobs_on_it(*jobs)

    def subnets(self, zone="us-east-1a"):
        self.ec2.add_response(
            "describe_subnets",
            {"Subnets": [{"SubnetId": "subnet-1a", "AvailabilityZone": zone}]},
            {"SubnetIds": ["subnet-1a"]},
        )

    def updated(self, **change):
        self.batch.add_response("update_compute_environment", {}, {"computeEnvironment": ENVIRONMENT, **change})

    def ordered(self, first):
        self.batch.add_response("update_job_queue", {}, {"jobQueue": QUEUE, "computeEnvironmentOrder": order_of(first)})
        self.first = first

    # --- the probe's steps -----------------------------------------------------------------------

    def setup_read(self):
        self.block()
        self.environment(name="gpu-p5-block")
        self.queue(name="verify-live-block")
        self.template_version("$Latest", 1, into_block=False)

    def rotation_moves_it_onto_the_block(self):
        """Two runs of the rotation: (no job on the environment) the version and the infrastructure update, then
        (VALID) enable and first."""
        self.read_by_the_rotation()
        self.subnets()
        self.jobs_on_it()
        self.ec2.add_response(
            "create_launch_template_version",
            {"LaunchTemplateVersion": {"LaunchTemplateName": "gpu-p5", "VersionNumber": 2}},
            {
                "LaunchTemplateName": "gpu-p5",
                "LaunchTemplateData": self.launch_data(into_block=True),
                "VersionDescription": f"gpu-governance: into Capacity Block {BLOCK}",
            },
        )
        self.updated(
            computeResources={
                "launchTemplate": {"launchTemplateName": "gpu-p5", "version": "2"},
                "minvCpus": 0,
                "maxvCpus": VCPUS,
            },
            updatePolicy={"terminateJobsOnUpdate": False, "jobExecutionTimeoutMinutes": 30},
        )
        self.version, self.max_vcpus, self.status = "2", VCPUS, "UPDATING"
        self.read_by_the_rotation()  # UPDATING: the first run waits
        self.status = "VALID"
        self.read_by_the_rotation()
        self.updated(state="ENABLED")
        self.state = "ENABLED"
        self.read_by_the_rotation()
        self.ordered(first=True)
        self.read_by_the_rotation()  # in place

    def job(self, status, instance=None, job_id="job-1"):
        self.batch.add_response(
            "describe_jobs", {"jobs": [self.job_detail(status, instance, job_id)]}, {"jobs": [job_id]}
        )

    @staticmethod
    def job_detail(status, instance=None, job_id="job-1"):
        detail = {
            "jobName": "verify-live-block",
            "jobId": job_id,
            "jobQueue": QUEUE,
            "status": status,
            "startedAt": 1,
            "jobDefinition": "arn:aws:batch:us-east-1:111122223333:job-definition/sleep-a-minute:1",
        }
        if instance:
            detail["container"] = {"containerInstanceArn": instance}
        return detail

    def submitted(self, job_id="job-1"):
        self.batch.add_response(
            "submit_job",
            {"jobName": "verify-live-block", "jobId": job_id},
            {
                "jobName": "verify-live-block",
                "jobQueue": QUEUE,
                "jobDefinition": "sleep-a-minute:1",
                "timeout": {"attemptDurationSeconds": block_environment.JOB_SECONDS},
            },
        )

    def ran_on(self, reservation, cluster_holds_it=True):
        self.ecs.add_response(
            "describe_container_instances",
            {"containerInstances": [{"containerInstanceArn": INSTANCE, "ec2InstanceId": "i-0abc"}]}
            if cluster_holds_it
            else {"containerInstances": [], "failures": [{"arn": INSTANCE, "reason": "MISSING"}]},
            {"cluster": CLUSTER, "containerInstances": [INSTANCE]},
        )
        if cluster_holds_it:
            instance = {"InstanceId": "i-0abc"}
            if reservation:
                instance["CapacityReservationId"] = reservation
            self.ec2.add_response(
                "describe_instances", {"Reservations": [{"Instances": [instance]}]}, {"InstanceIds": ["i-0abc"]}
            )

    def put_back(self, job_id="job-1"):
        """The undo steps, last first: the job, the environment, the versions."""
        if job_id:
            self.batch.add_response("terminate_job", {}, {"jobId": job_id, "reason": REASON})
        self.queue()
        if self.first:
            self.ordered(first=False)
        self.environment()
        if self.state != "DISABLED":
            self.updated(state="DISABLED")
            self.state = "DISABLED"
        if (self.version, self.max_vcpus) != (BY_DEFAULT, 0):
            self.updated(
                computeResources={
                    "launchTemplate": {"launchTemplateName": "gpu-p5", "version": BY_DEFAULT},
                    "minvCpus": 0,
                    "maxvCpus": 0,
                }
            )
            self.version, self.max_vcpus, self.status = BY_DEFAULT, 0, "UPDATING"
            self.environment()  # the infrastructure update back takes a while
            self.status = "VALID"
        self.environment()
        made = [2] if self.version == BY_DEFAULT and self.versions_made else []
        self.ec2.add_response(
            "describe_launch_template_versions",
            {
                "LaunchTemplateVersions": [
                    {
                        "LaunchTemplateName": "gpu-p5",
                        "VersionNumber": n,
                        "VersionDescription": f"gpu-governance: into Capacity Block {BLOCK}",
                    }
                    for n in made
                ]
            },
            {"LaunchTemplateName": "gpu-p5", "MinVersion": "2"},
        )
        if made:
            self.ec2.add_response(
                "delete_launch_template_versions",
                {"SuccessfullyDeletedLaunchTemplateVersions": [{"LaunchTemplateName": "gpu-p5", "VersionNumber": 2}]},
                {"LaunchTemplateName": "gpu-p5", "Versions": ["2"]},
            )

    versions_made = True


def run(context):
    (probe,) = block_environment.PROBES
    return framework.run_one(probe, context(**ARGS))


@pytest.mark.parametrize(
    "left_on_it",
    [(), (Sandbox.job_detail("RUNNING", LAST_BLOCKS, job_id="job-0"),)],
    ids=["nothing-on-it", "a-job-of-the-last-block-on-it"],
)
def test_a_job_on_the_blocks_instance_passes_and_everything_is_put_back(stubs, context, left_on_it):
    """Nothing on the environment, or a job of the last block still RUNNING on it: then the rotation's first run moves
    nothing (it never changes the launch template under a job), and the probe runs it again until, the job gone, it
    moves."""
    sandbox = Sandbox(stubs)
    sandbox.setup_read()
    if left_on_it:
        sandbox.rotation_waits_for(*left_on_it)
    sandbox.rotation_moves_it_onto_the_block()
    sandbox.submitted()
    sandbox.job("RUNNABLE")
    sandbox.job("STARTING", instance=INSTANCE)
    sandbox.ran_on(BLOCK)
    sandbox.put_back()
    result = run(context)
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()
    assert f"ran on i-0abc in Capacity Block {BLOCK}" in result.verdict.detail
    assert (
        "launch it into the block" in result.verdict.detail and "put it first in the job queue" in result.verdict.detail
    )


@pytest.mark.parametrize(
    ("reservation", "said"),
    [(None, "in no Capacity Reservation, not"), ("cr-0fedcba9876543210", "in cr-0fedcba9876543210, not")],
    ids=["on-demand", "another-reservation"],
)
def test_a_job_on_an_instance_outside_the_block_fails(stubs, context, reservation, said):
    sandbox = Sandbox(stubs)
    sandbox.setup_read()
    sandbox.rotation_moves_it_onto_the_block()
    sandbox.submitted()
    sandbox.job("RUNNING", instance=INSTANCE)
    sandbox.ran_on(reservation)
    sandbox.put_back()
    result = run(context)
    assert result.verdict.outcome == FAIL and said in result.verdict.detail
    assert result.cleanup_failures == ()


def test_a_job_on_another_compute_environment_fails(stubs, context):
    sandbox = Sandbox(stubs)
    sandbox.setup_read()
    sandbox.rotation_moves_it_onto_the_block()
    sandbox.submitted()
    sandbox.job("RUNNING", instance=INSTANCE)
    sandbox.ran_on(None, cluster_holds_it=False)
    sandbox.put_back()
    result = run(context)
    assert result.verdict.outcome == FAIL and "outside the block compute environment's cluster" in result.verdict.detail
    assert result.cleanup_failures == ()


def test_a_job_not_placed_within_30_minutes_fails(stubs, context):
    sandbox = Sandbox(stubs)
    sandbox.setup_read()
    sandbox.rotation_moves_it_onto_the_block()
    sandbox.submitted()
    # the clock moves TICK seconds at each reading: one reading for the deadline, one per look
    for _ in range(block_environment.RUNNABLE_MINUTES * 60 // 15):
        sandbox.job("RUNNABLE")
    sandbox.put_back()
    result = run(context)
    assert result.verdict.outcome == FAIL and "still RUNNABLE after 30 minutes" in result.verdict.detail
    assert result.cleanup_failures == ()


def test_an_environment_not_as_documented_is_left_alone(stubs, context):
    """ENABLED, or not behind an on-demand one: the probe changes nothing and registers no undo step."""
    sandbox = Sandbox(stubs)
    sandbox.state, sandbox.first = "ENABLED", True
    sandbox.block()
    sandbox.environment(name="gpu-p5-block")
    sandbox.queue(name="verify-live-block")
    result = run(context)
    assert result.verdict.outcome == INCONCLUSIVE and result.cleanup_failures == ()
    assert "state: the block compute environment is ENABLED - DISABLED" in result.verdict.detail
    assert "an on-demand compute environment, then" in result.verdict.detail


def test_a_block_not_started_or_ending_too_soon_is_inconclusive_and_reads_nothing_else(stubs, context):
    sandbox = Sandbox(stubs)
    sandbox.block(state="scheduled")
    verdict = run(context).verdict
    assert verdict.outcome == INCONCLUSIVE and "a Capacity Block that has started is needed" in verdict.detail
    sandbox.block(ends_in=timedelta(minutes=90))
    verdict = run(context).verdict
    assert verdict.outcome == INCONCLUSIVE and "too soon for the probe" in verdict.detail


def test_a_move_the_rotation_refuses_is_inconclusive_and_the_environment_is_read_back(stubs, context):
    """No subnet in the block's zone: the rotation reports it and moves nothing; the undo steps find
    nothing to put back and no version to delete."""
    sandbox = Sandbox(stubs)
    sandbox.setup_read()
    sandbox.read_by_the_rotation()
    sandbox.subnets(zone="us-east-1b")
    sandbox.versions_made = False
    sandbox.put_back(job_id=None)
    result = run(context)
    assert (
        result.verdict.outcome == INCONCLUSIVE
        and "subnets: none in the block's zone us-east-1a" in result.verdict.detail
    )
    assert result.cleanup_failures == ()


def test_the_environment_is_put_back_when_the_probe_raises_midway(stubs, context):
    """Moved onto the block, then the submission fails: the environment and versions are undone all the same."""
    sandbox = Sandbox(stubs)
    sandbox.setup_read()
    sandbox.rotation_moves_it_onto_the_block()
    sandbox.batch.add_client_error("submit_job", "ServerException", "internal error", http_status_code=500)
    sandbox.put_back(job_id=None)
    result = run(context)
    assert result.verdict.outcome == INCONCLUSIVE and "raised ServerException" in result.verdict.detail
    assert result.cleanup_failures == ()


def test_an_undo_step_that_fails_is_reported_and_the_versions_are_still_deleted(stubs, context):
    """The environment stays UPDATING past the undo step's wait: reported (exit code 4); the next
    undo step (the versions) runs anyway."""
    sandbox = Sandbox(stubs)
    sandbox.setup_read()
    sandbox.rotation_moves_it_onto_the_block()
    sandbox.submitted()
    sandbox.job("RUNNING", instance=INSTANCE)
    sandbox.ran_on(BLOCK)
    sandbox.batch.add_response("terminate_job", {}, {"jobId": "job-1", "reason": REASON})
    sandbox.queue()
    sandbox.ordered(first=False)
    sandbox.status = "UPDATING"
    for _ in range(block_environment.RESTORE_MINUTES * 60 // 15):
        sandbox.environment()
    sandbox.ec2.add_response(
        "describe_launch_template_versions",
        {
            "LaunchTemplateVersions": [
                {
                    "LaunchTemplateName": "gpu-p5",
                    "VersionNumber": 2,
                    "VersionDescription": f"gpu-governance: into Capacity Block {BLOCK}",
                }
            ]
        },
        {"LaunchTemplateName": "gpu-p5", "MinVersion": "2"},
    )
    sandbox.ec2.add_response(
        "delete_launch_template_versions",
        {
            "UnsuccessfullyDeletedLaunchTemplateVersions": [
                {
                    "LaunchTemplateName": "gpu-p5",
                    "VersionNumber": 2,
                    "ResponseError": {"Code": "launchTemplateVersionInUse"},
                }
            ]
        },
        {"LaunchTemplateName": "gpu-p5", "Versions": ["2"]},
    )
    result = run(context)
    assert result.verdict.outcome == PASS
    put_back, versions = result.cleanup_failures  # last first: the environment, then the versions
    assert put_back.startswith(f"put {ENVIRONMENT} back: ") and "still UPDATING after 45 minutes" in put_back
    assert versions.startswith(f"delete the versions of launch template gpu-p5 into {BLOCK}: versions not deleted")
    assert framework.exit_code([result]) == framework.EXIT_CLEANUP
