"""Batch compute environments on a Capacity Block (register section ``batch-ce.*``): that the
capacity controller's one block compute environment, repointed onto a block by the rotation's own
steps (once no job runs on it: a launch-template version into the block, an infrastructure update,
VALID, enabled, first in the job queue), places the queue's next job on the block's instance. Each
step is documented; AWS shows them together on one environment nowhere (row
``batch-ce.infrastructure-update-into-block``, docs/capacity.md *Why one block compute environment,
repointed*), and the Batch guide still lists a launch template's market options among what Batch
ignores.

It runs ``capacity/rotation.py``'s ``reconcile`` itself, with a ledger of its own (the DynamoDB
model of ``tests/aws_model``: nothing is written to the controller's table), on a sandbox set up
as docs/capacity.md documents: a started Capacity Block, a block compute environment
(``BEST_FIT_PROGRESSIVE``, a subnet in the block's zone, one instance type, DISABLED at 0 vCPUs,
launching from a launch template it names by name) behind an on-demand one in a test job queue
without a scheduling policy, and a job definition of a job of about a minute. Whatever happens, the
undo steps terminate the job, put the environment back (its queue order, DISABLED, its launch
template version and vCPUs as they were) and delete the launch-template versions the rotation made.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from gpu_governance_runtime.capacity import rotation  # plain Python: no aws_cdk
from gpu_governance_runtime.capacity.ledger import Ledger
from gpu_governance_runtime.planners.capacity import Reservation, Window
from tests.aws_model.dynamodb import FakeDynamoDB

from ..framework import Cleanup, Context, Option, Probe, Verdict, failed, inconclusive, passed
from ._batch import REASON

RESERVATION = Option("--block-reservation", "a Capacity Block (cr-...) that has started, of one instance")
ENVIRONMENT = Option(
    "--block-compute-environment", "the block compute environment, set up as docs/capacity.md documents"
)
QUEUE = Option(
    "--block-job-queue", "a test job queue (no scheduling policy) holding an on-demand compute environment, then it"
)
JOB_DEFINITION = Option(
    "--block-job-definition", "a job definition (name:revision) of a job of about a minute that fits the block's type"
)
OPTIONS = [RESERVATION, ENVIRONMENT, QUEUE, JOB_DEFINITION]

WINDOW = "verify-live"
UPDATE_MINUTES = 45  # an infrastructure update "can take much longer than a scaling update"
RECONCILE_EVERY = 30  # seconds between the rotation's runs while it waits for the update
RUNNABLE_MINUTES = 30  # a job still not placed after this fails the row
RESTORE_MINUTES = 45  # the undo step's infrastructure update back to the first version
JOB_SECONDS = 120  # the job's attemptDurationSeconds: what a job placed on demand may run


@dataclass(frozen=True)
class _Before:
    """What the probe changes, as it was: the environment's ARN, launch template, vCPUs and queue order."""

    environment: str
    template: dict[str, str]
    min_vcpus: int
    max_vcpus: int
    queue: str
    order: list[dict[str, Any]]


def block_environment_update(context: Context, cleanup: Cleanup) -> Verdict:
    args = context.args
    ec2, batch, ecs = (context.client(service, None) for service in ("ec2", "batch", "ecs"))
    block = _started_block(ec2, args.block_reservation)
    if isinstance(block, Verdict):
        return block
    (environment,) = batch.describe_compute_environments(computeEnvironments=[args.block_compute_environment])[
        "computeEnvironments"
    ]
    (queue,) = batch.describe_job_queues(jobQueues=[args.block_job_queue])["jobQueues"]
    before, problems = _as_documented(environment, queue)
    if problems:
        return inconclusive(f"not set up as docs/capacity.md documents, nothing changed: {'; '.join(problems)}")
    template = before.template["launchTemplateName"]
    latest = _version_number(ec2, template, "$Latest")
    # Registered before anything changes: run last-first, whatever happens from here on.
    cleanup.add(
        f"delete the versions of launch template {template} into {block.id}",
        lambda: _delete_versions(ec2, template, latest, block.id),
    )
    cleanup.add(f"put {before.environment} back", lambda: _restore(context, batch, before))
    moved = _until_in_place(context, _window(before, block), block, ec2, batch, ecs)
    if isinstance(moved, Verdict):
        return moved
    job_id = batch.submit_job(
        jobName="verify-live-block",
        jobQueue=before.queue,
        jobDefinition=args.block_job_definition,
        timeout={"attemptDurationSeconds": JOB_SECONDS},
    )["jobId"]
    cleanup.add(f"terminate job {job_id}", lambda: batch.terminate_job(jobId=job_id, reason=REASON))
    job = _until_placed(context, batch, job_id)
    paid = f"{block.count}× {block.instance_type} in {block.availability_zone}, paid at purchase"
    instance_arn = (job.get("container") or {}).get("containerInstanceArn")
    if instance_arn is None:
        if job["status"] in ("SUCCEEDED", "FAILED"):
            return inconclusive(
                f"job {job_id} ended {job['status']} without an instance: {job.get('statusReason', '')}"
            )
        return failed(
            f"job {job_id} still {job['status']} after {RUNNABLE_MINUTES} minutes on the block compute environment the "
            f"rotation moved onto {block.id} ({'; '.join(moved)}): nothing launched into the block ({paid})"
        )
    instances = ecs.describe_container_instances(
        cluster=environment["ecsClusterArn"], containerInstances=[instance_arn]
    ).get("containerInstances", [])
    if not instances:
        return failed(f"job {job_id} ran on {instance_arn}, outside the block compute environment's cluster ({paid})")
    instance_id = instances[0]["ec2InstanceId"]
    (instance,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"]
    into = instance.get("CapacityReservationId")
    if into != block.id:
        return failed(f"job {job_id} ran on {instance_id}, in {into or 'no Capacity Reservation'}, not {block.id}")
    return passed(
        f"job {job_id} ran on {instance_id} in Capacity Block {block.id} ({paid}) after the rotation's steps: "
        f"{'; '.join(moved)}"
    )


def _started_block(ec2: Any, reservation_id: str) -> Reservation | Verdict:
    """The Capacity Block as the rotation sees a window's block, if it has started and does not end
    (``rotation.DRAIN_LEAD`` before its end) before the probe can be done."""
    (found,) = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    if found.get("ReservationType") != "capacity-block" or found.get("State") != "active":
        return inconclusive(
            f"{reservation_id} is a {found.get('ReservationType')} reservation, {found.get('State')}: "
            "a Capacity Block that has started is needed"
        )
    longest = timedelta(minutes=UPDATE_MINUTES + RUNNABLE_MINUTES) + rotation.DRAIN_LEAD
    if found["EndDate"] - datetime.now(UTC) < longest:
        return inconclusive(f"{reservation_id} ends at {found['EndDate']:%Y-%m-%d %H:%M} UTC, too soon for the probe")
    return Reservation(
        id=reservation_id,
        window=WINDOW,
        instance_type=found["InstanceType"],
        count=found["TotalInstanceCount"],
        availability_zone=found["AvailabilityZone"],
        start=found["StartDate"],
        end=found["EndDate"],
        state="active",
    )


def _as_documented(environment: dict[str, Any], queue: dict[str, Any]) -> tuple[_Before, list[str]]:
    """The state the probe will put back, and how it differs from the state docs/capacity.md asks
    for between blocks, each as ``field: what is wrong (value) - what is wanted``. The rotation
    checks the rest (allocation strategy, subnets, instance types) before it moves anything."""
    resources = environment.get("computeResources", {})
    template = {k: v for k, v in resources.get("launchTemplate", {}).items() if k in ("launchTemplateName", "version")}
    order = sorted(queue.get("computeEnvironmentOrder", []), key=lambda o: o["order"])
    arn = environment["computeEnvironmentArn"]
    before = _Before(
        arn, template, resources.get("minvCpus", 0), resources.get("maxvCpus", 0), queue["jobQueueArn"], order
    )
    problems = []
    if environment.get("state") != "DISABLED":
        problems.append(f"state: the block compute environment is {environment.get('state')} - DISABLED")
    if before.max_vcpus != 0:
        problems.append(f"maxvCpus: {before.max_vcpus} - 0 between blocks")
    if "launchTemplateName" not in template:
        problems.append(f"launchTemplate: {resources.get('launchTemplate')} - a launch template named by name")
    places = [o["computeEnvironment"] for o in order]
    if arn not in places[1:]:
        problems.append(
            f"computeEnvironmentOrder of {queue['jobQueueName']}: {places} - an on-demand compute environment, then {arn}"
        )
    return before, problems


def _window(before: _Before, block: Reservation) -> Window:
    """A window of the block, feeding the block compute environment as the governance file names it."""
    return Window(
        name=WINDOW,
        market="capacity_block",
        instance_type=block.instance_type,
        instance_count=block.count,
        start=block.start,
        duration_hours=int((block.end - block.start).total_seconds() // 3600),
        repeat_every_days=None,
        availability_zones=(),
        max_price_per_instance_hour=Decimal(0),
        budget=Decimal(0),
        budget_period="month",
        buy_ahead_days=0,
        prefer_extension=False,
        mode="auto",
        consumer={
            "kind": "batch_compute_environment",
            "launch_template_name": before.template["launchTemplateName"],
            "compute_environment": next(o["computeEnvironment"] for o in before.order),
            "block_compute_environment": before.environment,
            "job_queue": before.queue,
        },
    )


def _until_in_place(
    context: Context, window: Window, block: Reservation, ec2: Any, batch: Any, ecs: Any
) -> list[str] | Verdict:
    """Runs the rotation, as the controller's schedule would, until the block compute environment is
    where an active block wants it; the steps it took. Like the controller, it waits (the rotation's
    ``waiting: ...``) while an update is under way or a job still runs on the environment (``ecs``:
    the rotation reads which through ECS, ``block_jobs.jobs_on``)."""
    db = FakeDynamoDB()
    db.create_table("verify-live-ledger", key="pk")
    ledger = Ledger(client=db.client(), table_name="verify-live-ledger")
    deadline, steps = context.clock() + UPDATE_MINUTES * 60, []
    while True:
        result = rotation.reconcile(
            window=window,
            owned=[block],
            dry_run=False,
            ec2=ec2,
            batch=batch,
            eks=None,
            ecs=ecs,
            ledger=ledger,
            now=datetime.now(UTC),
        )
        if "error" in result:
            return inconclusive(f"the rotation did not move the block compute environment: {result['error']}")
        steps += result.get("did", [])
        if result.get("state", "").endswith("in place"):
            return steps
        if context.clock() >= deadline:
            return inconclusive(f"the rotation was not done after {UPDATE_MINUTES} minutes: {result.get('state')}")
        context.sleep(RECONCILE_EVERY)


def _until_placed(context: Context, batch: Any, job_id: str) -> dict[str, Any]:
    """The job once it has a container instance or has ended, or as it is after RUNNABLE_MINUTES."""
    deadline = context.clock() + RUNNABLE_MINUTES * 60
    while True:
        (job,) = batch.describe_jobs(jobs=[job_id])["jobs"]
        placed = (job.get("container") or {}).get("containerInstanceArn")
        if placed or job["status"] in ("SUCCEEDED", "FAILED") or context.clock() >= deadline:
            return job
        context.sleep(15)


def _restore(context: Context, batch: Any, before: _Before) -> None:
    """The queue's order, DISABLED, then (an infrastructure update, once no other is under way) the
    launch template version and vCPUs as they were; raises while the environment is not VALID."""
    (queue,) = batch.describe_job_queues(jobQueues=[before.queue])["jobQueues"]
    if sorted(queue.get("computeEnvironmentOrder", []), key=lambda o: o["order"]) != before.order:
        batch.update_job_queue(jobQueue=before.queue, computeEnvironmentOrder=before.order)
    environment = _settled(context, batch, before.environment)
    if environment.get("state") != "DISABLED":
        batch.update_compute_environment(computeEnvironment=before.environment, state="DISABLED")
    resources = environment.get("computeResources", {})
    now = (resources.get("launchTemplate", {}).get("version"), resources.get("minvCpus"), resources.get("maxvCpus"))
    if now != (before.template.get("version"), before.min_vcpus, before.max_vcpus):
        batch.update_compute_environment(
            computeEnvironment=before.environment,
            computeResources={
                "launchTemplate": before.template,
                "minvCpus": before.min_vcpus,
                "maxvCpus": before.max_vcpus,
            },
        )
    if _settled(context, batch, before.environment).get("status") != "VALID":
        raise RuntimeError(f"{before.environment} is not VALID: put it back by hand ({before.template}, 0 vCPUs)")


def _settled(context: Context, batch: Any, arn: str) -> dict[str, Any]:
    """The compute environment once no update is under way; raises after RESTORE_MINUTES."""
    deadline = context.clock() + RESTORE_MINUTES * 60
    while True:
        (environment,) = batch.describe_compute_environments(computeEnvironments=[arn])["computeEnvironments"]
        if environment.get("status") not in ("CREATING", "UPDATING"):
            return environment
        if context.clock() >= deadline:
            raise RuntimeError(f"{arn} still {environment['status']} after {RESTORE_MINUTES} minutes")
        context.sleep(RECONCILE_EVERY)


def _version_number(ec2: Any, template: str, version: str) -> int:
    return ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=[version])[
        "LaunchTemplateVersions"
    ][0]["VersionNumber"]


def _delete_versions(ec2: Any, template: str, latest: int, reservation_id: str) -> None:
    """The versions made after ``latest`` into ``reservation_id`` (the rotation's description names it)."""
    pages = ec2.get_paginator("describe_launch_template_versions").paginate(
        LaunchTemplateName=template, MinVersion=str(latest + 1)
    )
    made = [
        str(v["VersionNumber"])
        for page in pages
        for v in page["LaunchTemplateVersions"]
        if reservation_id in v.get("VersionDescription", "")
    ]
    if not made:
        return
    answer = ec2.delete_launch_template_versions(LaunchTemplateName=template, Versions=made)
    kept = answer.get("UnsuccessfullyDeletedLaunchTemplateVersions") or []
    if kept:
        raise RuntimeError(f"versions not deleted: {[(v.get('VersionNumber'), v.get('ResponseError')) for v in kept]}")


def _cost(args: argparse.Namespace) -> str:
    block = args.block_reservation or "<--block-reservation>"
    return (
        f"the Capacity Block {block}, paid when it was bought (the probe buys nothing; its instances and zone are "
        f"printed); nothing on demand unless the row fails, when the job may run on the on-demand compute environment "
        f"for at most {JOB_SECONDS} s (attemptDurationSeconds) before it is terminated"
    )


PROBES = [
    Probe(
        name="block-environment-update",
        row="batch-ce.infrastructure-update-into-block",
        does=(
            "runs the capacity controller's rotation (capacity/rotation.py), which waits while a job runs on the block "
            "compute environment, until the environment launches into --block-reservation from a new launch-template "
            "version, is VALID, enabled and first in --block-job-queue; "
            "submits one job there; puts the environment back and deletes the versions"
        ),
        passes_when=(
            f"the job's instance (its container instance's EC2 instance) is in the Capacity Block; it fails when the job "
            f"runs anywhere else or is not placed within {RUNNABLE_MINUTES} minutes"
        ),
        needs=(RESERVATION.flag, ENVIRONMENT.flag, QUEUE.flag, JOB_DEFINITION.flag),
        cost=_cost,
        run=block_environment_update,
    )
]
