"""Which Batch jobs run where: on a compute environment's instances, or on one Capacity Block's.

Batch does not say which compute environment a job runs in. DescribeJobs names the job's ECS
container instance (``container.containerInstanceArn``), and each managed compute environment runs
its instances as container instances of its own ECS cluster (``ecsClusterArn``), so a job runs in a
compute environment when its container instance is one ECS lists in that cluster
(``ListContainerInstances``, filtered by EC2 instance id for one block's instances
[aws: batch-ce.ecs-container-instance-filter]); a block's instances are those EC2 lists with its
``capacity-reservation-id``. Array and multi-node parallel parents and jobs of EKS compute
environments name no container instance and are never found here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..common.batch_copy import describe

RUNNING = ("RUNNING",)
ON_AN_INSTANCE = ("STARTING", "RUNNING")


def block_instances(ec2: Any, reservation_id: str) -> list[str]:
    """The EC2 instances launched into the block that are pending or running."""
    return [
        i["InstanceId"]
        for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "capacity-reservation-id", "Values": [reservation_id]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        for r in page["Reservations"]
        for i in r["Instances"]
    ]


def queues_of(batch: Any, compute_environment: str) -> list[str]:
    """The job queues that place jobs in the compute environment."""
    return [
        q["jobQueueArn"]
        for page in batch.get_paginator("describe_job_queues").paginate()
        for q in page["jobQueues"]
        if any(o["computeEnvironment"] == compute_environment for o in q.get("computeEnvironmentOrder", []))
    ]


def jobs_in(batch: Any, queues: Iterable[str], statuses: Iterable[str]) -> list[dict[str, Any]]:
    """The jobs of ``queues`` in ``statuses`` (DescribeJobs details)."""
    return describe(
        batch,
        [
            s["jobId"]
            for queue in queues
            for status in statuses
            for page in batch.get_paginator("list_jobs").paginate(jobQueue=queue, jobStatus=status)
            for s in page["jobSummaryList"]
        ],
    )


def container_instances(
    ecs: Any, batch: Any, compute_environment: str, instance_ids: Iterable[str] | None = None
) -> set[str]:
    """The container instances of the compute environment's ECS cluster (of ``instance_ids`` only, when given)."""
    environment = batch.describe_compute_environments(computeEnvironments=[compute_environment])["computeEnvironments"]
    if not environment or "ecsClusterArn" not in environment[0]:
        return set()
    wanted = None if instance_ids is None else list(instance_ids)
    if wanted == []:
        return set()
    return {
        arn
        for page in ecs.get_paginator("list_container_instances").paginate(
            cluster=environment[0]["ecsClusterArn"],
            **({"filter": "ec2InstanceId in [" + ", ".join(f"'{i}'" for i in wanted) + "]"} if wanted else {}),
        )
        for arn in page["containerInstanceArns"]
    }


def jobs_on(
    *,
    compute_environment: str,
    batch: Any,
    ecs: Any,
    instance_ids: Iterable[str] | None = None,
    statuses: Iterable[str] = RUNNING,
) -> list[dict[str, Any]]:
    """Jobs in ``statuses`` of the compute environment's queues on its container instances (on those of
    ``instance_ids`` only, when given: one block's)."""
    on = container_instances(ecs, batch, compute_environment, instance_ids)
    if not on:
        return []
    return [
        job
        for job in jobs_in(batch, queues_of(batch, compute_environment), statuses)
        if job.get("container", {}).get("containerInstanceArn") in on
    ]
