"""What every pool of the governance file is made of, whatever its backend: its name and
capacity, and how the reclaim controller treats a pool it governs. Each backend's pool class
(``constructs_lib/backends/<name>/pool.py``) builds on these; the model's ``Pool`` is the union of
the registry's (``model.organisation``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

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


# Slurm's default PriorityDecayHalfLife (7-0, https://slurm.schedmd.com/slurm.conf.html)
DEFAULT_HALF_LIFE_HOURS = 168


class FairShare(_Frozen):
    """The order in which the reclaim controller lets teams borrow, and takes back from them
    (docs/governance-file.md#fair-share): by what each borrows now, or by its usage decayed over a
    half-life (Slurm's PriorityDecayHalfLife, Kueue's admission fair sharing), per unit of
    ``fair_share_weight``."""

    by: Literal["borrowed", "usage"] = Field(
        default="borrowed",
        description="borrowed: the team borrowing least now first; usage: the team with the least decayed usage first, "
        "and reclaimed from last",
    )
    half_life_hours: Annotated[int, Field(ge=1, le=8760)] | None = Field(
        default=None,
        description="With by: usage, an hour used counts half as much this many hours later (1-8760; default 168, "
        "Slurm's PriorityDecayHalfLife)",
    )

    @model_validator(mode="after")
    def _half_life_only_by_usage(self) -> FairShare:
        if self.by == "borrowed" and self.half_life_hours is not None:
            raise ValueError(
                f"half_life_hours ({self.half_life_hours}) is read only with by: usage - drop it, or set by: usage"
            )
        return self

    @property
    def half_life_seconds(self) -> int | None:
        """The decay's half-life where the order is by usage, else None."""
        return None if self.by == "borrowed" else (self.half_life_hours or DEFAULT_HALF_LIFE_HOURS) * 3600


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
    fair_share: FairShare = Field(
        default_factory=FairShare,
        description="The order of borrowers and of the teams a reclaim takes from: by: borrowed (now) or by: usage "
        "(decayed over half_life_hours)",
    )


class ReclaimedPool(BasePool):
    """A pool the reclaim controller governs (HyperPod EKS reclaims natively, with Kueue)."""

    reclaim: ReclaimSettings = Field(default_factory=ReclaimSettings)
