"""How the reclaim controller reaches a ``hyperpod_slurm`` pool: through its head node (SSM Run
Command), to plan its borrowers and read its accounting."""

from __future__ import annotations

from aws_cdk import Stack

from constructs_lib.controllers.reclaim import ReclaimTarget
from constructs_lib.core.errors import Problem


def target(pool, cluster) -> ReclaimTarget | None:
    """Governed once the governance file names the pool's head node (its SSM target id)."""
    if pool.head_node is None:
        return None
    return ReclaimTarget(
        pool=pool.name, head_node_instance_id=pool.head_node.instance_id, instance_type=pool.reclaimed_instance_type
    )


def entry(target: ReclaimTarget, pool) -> dict:
    return {"pool": target.pool, "instance_id": target.head_node_instance_id, "instance_type": target.instance_type}


def problems(path: str, target: ReclaimTarget, pool, stack: Stack) -> list[Problem]:
    found = []
    if not target.head_node_instance_id:
        found.append(
            Problem(
                path=f"{path}.head_node_instance_id",
                wrong="missing",
                value=None,
                allowed="the head node's SSM target id",
            )
        )
    if target.instance_type not in pool.capacity:
        found.append(
            Problem(
                path=f"{path}.instance_type",
                wrong="not in the pool",
                value=target.instance_type,
                allowed=f"one of {sorted(pool.capacity)}",
            )
        )
    return found
