"""A pool's fair-share order in the governance file (``reclaim.fair_share``): the reclaim
controller's, and ``gpu-governance simulate``'s (gpu_governance_runtime/reclaim/fair_share.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .base import _Frozen

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
