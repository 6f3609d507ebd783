"""What every pool of the governance file is made of, whatever its backend: its name and
capacity, and how the reclaim controller treats a pool it governs. Each backend's pool class
(``constructs_lib/backends/<name>/pool.py``) builds on these; the model's ``Pool`` is the union of
the registry's (``model.organisation``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpu_governance_runtime.contract import DEFAULT_REBORROW_BACKOFF_S

from .base import Count, QueueName, _Frozen
from .run_limits import MAX_RUN_DESCRIPTION, MaxRunMinutes


class BasePool(_Frozen):
    """What every pool declares; each backend's pool class (its package's ``pool.py``) adds its own fields
    and the ``backend`` discriminator."""

    name: QueueName
    capacity: dict[str, Count] = Field(min_length=1, description="Instance type -> instances in the pool")
    max_run_minutes: MaxRunMinutes | None = Field(default=None, description=MAX_RUN_DESCRIPTION)


YEAR_SECONDS = 365 * 86_400
# A lender waits up to a tick plus the grace for what it is guaranteed: an hour at most keeps that a
# wait, not a loan of the guarantee.
MAX_GRACE_SECONDS = 3_600


class ReclaimSettings(_Frozen):
    """How the reclaim controller (and ``gpu-governance simulate``) treats a pool's jobs that cannot
    checkpoint (docs/reclaim.md, Anti-thrash)."""

    reborrow_backoff_seconds: Annotated[int, Field(ge=0, le=YEAR_SECONDS)] = Field(
        default=DEFAULT_REBORROW_BACKOFF_S,
        description="A reclaimed job borrows again only this long after its requeue, doubled per reclaim (0-31536000 s; "
        "a year: it restarts only inside its team's quota)",
    )
    borrow_horizon_seconds: Annotated[int, Field(ge=60, le=YEAR_SECONDS)] | None = Field(
        default=None,
        description="Only jobs declaring a maximum run time of at most this (Slurm --time, Batch timeout) borrow; unset: any job",
    )
    grace_seconds: Annotated[int, Field(ge=0, le=MAX_GRACE_SECONDS)] = Field(
        default=0,
        description=f"A preempted job keeps running this long before it is stopped, to checkpoint (Slurm QoS GraceTime; 0-{MAX_GRACE_SECONDS} s: "
        "the lender waits as long); 0: stopped at once",
    )


class ReclaimedPool(BasePool):
    """A pool the reclaim controller governs (HyperPod EKS reclaims natively, with Kueue)."""

    reclaim: ReclaimSettings = Field(default_factory=ReclaimSettings)
