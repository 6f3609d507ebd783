"""AWS Batch fair-share queues: the reclaim controller plans the borrowers and stops them itself
(docs/reclaim.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...contract import BATCH_FAIR_SHARE
from ..base import Backend, Invocation, ReclaimClients, Target

if TYPE_CHECKING:
    from ...policy import Policy, PoolPolicy
    from .adapter import BatchFairShareAdapter


def _adapter(
    target: Target, pool: PoolPolicy, policy: Policy, clients: ReclaimClients, invocation: Invocation
) -> BatchFairShareAdapter:
    from .adapter import BatchFairShareAdapter

    return BatchFairShareAdapter(clients.batch, job_queue=target["job_queue"], pool=pool, submit=clients.batch_submit)


# No GPU-hour switch: a fair-share queue has no per-share state to turn off
# (https://docs.aws.amazon.com/batch/latest/APIReference/API_ShareAttributes.html).
BACKEND = Backend(name=BATCH_FAIR_SHARE, reclaim_adapter=_adapter)
