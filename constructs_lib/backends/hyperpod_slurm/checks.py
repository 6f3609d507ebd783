"""What ``validate`` refuses on a ``hyperpod_slurm`` pool: what Slurm and the OS would refuse of
the plan (names, group ids, instance groups, windows' groups)."""

from __future__ import annotations

from constructs_lib.core.errors import Problem

from .plan import slurm_problems


def problems(model, pool) -> list[Problem]:
    return slurm_problems(model, pool.name)
