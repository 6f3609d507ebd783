"""Limits on one job's run time and on one member's share of a team (issue 43, items 3 and 4).

A job's wall-time limit is the tightest of those declared on its team, its pool and its priority
class (``max_run_minutes`` on each). A team's ``user_limits`` bound what each of its members runs
at once. Where a backend holds them is for its descriptor to say (``Backend.max_run_caveat``,
``Backend.user_limit_caveat``): Slurm holds both natively (QoS ``MaxWall``, user associations); the
other backends say in ``validate`` and ``explain`` what they do not hold (docs/governance-file.md,
Run-time and per-user limits).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field, model_validator

from .base import _Frozen

MAX_RUN_MINUTES = 365 * 24 * 60  # a year
MaxRunMinutes = Annotated[int, Field(ge=1, le=MAX_RUN_MINUTES)]

MAX_RUN_DESCRIPTION = (
    f"Longest a job may run, in minutes (1-{MAX_RUN_MINUTES}); a job's limit is the tightest of its team's, "
    "its pool's and its priority class's (docs/governance-file.md, Run-time limits). Unset: no limit of this level"
)


class UserLimits(_Frozen):
    """What each member of a team may run at once in one pool (Slurm user associations: MaxJobs and
    GrpTRES=gres/gpu under the team's account; docs/governance-file.md, Per-user limits)."""

    max_running_jobs: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        default=None, description="Jobs one member may have running at once (1-1000000)"
    )
    max_gpus: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        default=None, description="GPUs one member's running jobs may hold together (1-1000000)"
    )

    @model_validator(mode="after")
    def _something_is_limited(self) -> UserLimits:
        if self.max_running_jobs is None and self.max_gpus is None:
            raise ValueError("give max_running_jobs, max_gpus or both: a user limit that limits nothing says nothing")
        return self

    def shown(self) -> str:
        """As `explain` shows it: ``2 running jobs, 8 GPUs per member``."""
        parts = []
        if self.max_running_jobs is not None:
            parts.append(f"{self.max_running_jobs} running job{'s' if self.max_running_jobs != 1 else ''}")
        if self.max_gpus is not None:
            parts.append(f"{self.max_gpus} GPU{'s' if self.max_gpus != 1 else ''}")
        return f"{', '.join(parts)} per member"


def tightest(*limits: int | None) -> int | None:
    """The smallest declared limit; None when none is declared."""
    declared = [limit for limit in limits if limit is not None]
    return min(declared) if declared else None


def max_run_minutes(team: Any, pool: Any, priority_class: Any | None) -> int | None:
    """A job's wall-time limit: the tightest of its team's, its pool's and (when it has one) its
    priority class's ``max_run_minutes``."""
    return tightest(
        team.max_run_minutes, pool.max_run_minutes, priority_class.max_run_minutes if priority_class else None
    )


def any_class_max_run_minutes(team: Any, pool: Any, classes: Iterable[Any]) -> int | None:
    """The limit of a job whose class is not known (Slurm's borrow QoS, a Batch job by its team):
    its team's and pool's, and the longest any class allows when every class has a limit."""
    per_class = [c.max_run_minutes for c in classes]
    longest = None if not per_class or None in per_class else max(per_class)
    return tightest(team.max_run_minutes, pool.max_run_minutes, longest)


def max_run_limited(model: Any, team: Any, pool: Any) -> bool:
    """Whether any job of the team in the pool has a wall-time limit."""
    return any(max_run_minutes(team, pool, c) is not None for c in model.priority_classes)


def max_run_by_weight(model: Any, team: Any, pool: Any) -> dict[int, int]:
    """Priority weight (a Batch job's scheduling priority) -> the limit of a job of that class, for the
    classes whose limit differs from :func:`any_class_max_run_minutes`; classes of one weight get
    the longest of theirs."""
    overall = any_class_max_run_minutes(team, pool, model.priority_classes)
    by_weight: dict[int, int] = {}
    for priority_class in model.priority_classes:
        limit = max_run_minutes(team, pool, priority_class)
        if limit is not None and limit != overall:
            by_weight[priority_class.weight] = max(limit, by_weight.get(priority_class.weight, 0))
    return by_weight


def max_run_text(model: Any, team: Any, pool: Any) -> str:
    """A team's wall-time limits in a pool as `explain` shows them: the limit of a job of any class
    and each class whose own is tighter; "-" when none is declared."""
    overall = any_class_max_run_minutes(team, pool, model.priority_classes)
    tighter = [
        f"{c.name} {limit} min"
        for c in model.priority_classes
        if (limit := max_run_minutes(team, pool, c)) is not None and limit != overall
    ]
    if overall is None and not tighter:
        return "-"
    text = f"{overall} min per job" if overall is not None else "none per job"
    return f"{text}; {', '.join(tighter)}" if tighter else text
