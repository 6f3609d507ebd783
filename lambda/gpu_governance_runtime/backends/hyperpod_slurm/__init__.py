"""SageMaker HyperPod with Slurm: the reclaim controller plans the borrowers and reaches the pool
through its head node (SSM Run Command), also to read the teams' usage from Slurm accounting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...contract import HYPERPOD_SLURM
from ..base import Backend, Invocation, ReclaimClients, Target

if TYPE_CHECKING:
    from ...common.action_ledger import Ledger
    from ...policy import Policy, PoolPolicy
    from .adapter import SlurmAdapter
    from .usage import SlurmUsageObserver


def _adapter(
    target: Target, pool: PoolPolicy, policy: Policy, clients: ReclaimClients, invocation: Invocation
) -> SlurmAdapter:
    from .adapter import SlurmAdapter

    return SlurmAdapter(
        clients.ssm,
        instance_id=target["instance_id"],
        instance_type=target["instance_type"],
        pool=pool,
        policy=policy,
        time_left=invocation.time_left,
    )


def _accounting(
    target: Target, pool: PoolPolicy, head_node: SlurmAdapter, *, ledger: Ledger, namespace: str
) -> SlurmUsageObserver:
    from .usage import SlurmUsageObserver

    # the head node's SSM runner reads the pool's accounting
    return SlurmUsageObserver(
        head_node.run,
        pool=pool,
        instance_type=target["instance_type"],
        gpus_per_instance=int(target["gpus_per_instance"]),
        ledger=ledger,
        namespace=namespace,
    )


# No GPU-hour switch: Slurm counts a team's GPU minutes against its limit itself
# (GrpTRESMins, https://slurm.schedmd.com/sacctmgr.html).
BACKEND = Backend(
    name=HYPERPOD_SLURM,
    reclaim_adapter=_adapter,
    usage_from_accounting=_accounting,
    drains_on_head_node=True,
)
