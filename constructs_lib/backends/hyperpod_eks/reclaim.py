"""How the reclaim controller reaches a ``hyperpod_eks`` pool: it only observes the teams' usage,
through the cluster's Kubernetes API (Kueue reclaims natively)."""

from __future__ import annotations

from aws_cdk import Arn, ArnFormat, Stack, Token

from constructs_lib.controllers.reclaim import ReclaimTarget
from constructs_lib.core.errors import Problem


def target(pool, cluster) -> ReclaimTarget | None:
    """Observed for usage once the governance file gives the pool's GPUs per instance."""
    return ReclaimTarget(pool=pool.name) if pool.gpus_per_instance else None


def entry(target: ReclaimTarget, pool) -> dict:
    return {
        "pool": target.pool,
        "eks_cluster": pool.eks_cluster_name,
        "cluster_arn": pool.cluster_arn,
        "gpus_per_instance": dict(sorted(pool.gpus_per_instance.items())),
    }


def problems(path: str, target: ReclaimTarget, pool, stack: Stack) -> list[Problem]:
    """Usage is reported in instances of the pool's types (Kueue counts GPUs), and the role's
    access entry can only be made on a cluster of this stack's account and region."""
    problems = [
        Problem(
            path=f"{path}.pool",
            wrong=f"the pool declares no gpus_per_instance for {instance_type}",
            value=pool.name,
            allowed="gpus_per_instance (GPUs of one instance, 1-64) for every instance type of the pool's capacity",
        )
        for instance_type in sorted(set(pool.capacity) - set(pool.gpus_per_instance))
    ]
    cluster = Arn.split(pool.cluster_arn, ArnFormat.SLASH_RESOURCE_NAME)
    for field, stack_value, cluster_value in (
        ("account", stack.account, cluster.account),
        ("region", stack.region, cluster.region),
    ):
        if not Token.is_unresolved(stack_value) and stack_value != cluster_value:
            problems.append(
                Problem(
                    path=f"{path}.pool",
                    wrong=f"the pool's cluster is in another {field} than the stack",
                    value=pool.cluster_arn,
                    allowed=f"a cluster in {field} {stack_value} (deploy the controller where the cluster is)",
                )
            )
    return problems
