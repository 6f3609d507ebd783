"""A team's access on a ``batch_fair_share`` pool, for ``gpu-governance audit``."""

from __future__ import annotations

from constructs_lib.organisation.access import Access, team_roles


def workload(model, team, pool) -> tuple[str, str]:
    return team_roles(model, team)["submission"], f"share identifier {team.name} of Batch job queue {pool.name}"


def cluster(model, team, pool) -> list[Access]:
    return []  # the compute environments are the platform's: no cluster or file system of the team's


def data(model, team, pool) -> list[Access]:
    return []  # the compute environments are the platform's: no cluster or file system of the team's
