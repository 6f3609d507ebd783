"""What each team's deal is, per pool and backend: the table a team lead reads."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_governance_runtime.contract import BATCH_FAIR_SHARE, HYPERPOD_EKS

from constructs_lib.model import AnyPool, GovernanceModel, SharingStrategy, Team


@dataclass(frozen=True, kw_only=True)
class Deal:
    team: str
    pool: str
    backend: str
    guaranteed: str
    max_with_borrowing: str
    lends_idle: str
    reclaimable: str
    in_share_preemption: str
    project: str = "-"  # the team's project, if any (a collaboration boundary, not an access one)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} x {t}" for t, n in sorted(counts.items()))


def deal(team: Team, pool: AnyPool) -> Deal:
    quota = team.quotas[pool.name]
    sharing = team.sharing
    # An unlimited borrower (ceiling None) and every other is bounded by what the pool holds.
    ceiling = {t: min(sharing.borrow_ceiling(n) or pool.capacity[t], pool.capacity[t]) for t, n in quota.items()}
    natively_preempts = pool.backend != BATCH_FAIR_SHARE
    lends_idle = "yes" if sharing.lends else "no (reserved)"
    if sharing.strategy is SharingStrategy.LEND_AND_BORROW:
        reclaimable = "yes, jobs on borrowed capacity" if natively_preempts else "only by the reclaim controller"
    else:
        reclaimable = "no (never borrows)"
    if pool.backend == HYPERPOD_EKS:
        # HyperPod semantics that differ from the model (docs/hyperpod-eks.md).
        if not pool.idle_resource_sharing:
            ceiling = dict(quota)
            lends_idle = reclaimable = "no (idle resource sharing off on the cluster)"
        elif sharing.strategy is SharingStrategy.RESERVE:
            lends_idle = "no (DontLend: HyperPod documents only that it does not lend)"
    if pool.backend == BATCH_FAIR_SHARE:
        preemption = "no (Batch fair share never preempts)"
    else:
        preemption = "yes, lower priority first" if sharing.in_share_preemption else "no"
        if pool.backend == HYPERPOD_EKS:
            preemption += f" (PreemptTeamTasks {'LowerPriority' if sharing.in_share_preemption else 'Never'})"
    return Deal(
        team=team.name,
        pool=pool.name,
        backend=pool.backend,
        guaranteed=_counts(dict(quota)),
        max_with_borrowing=_counts(ceiling),
        lends_idle=lends_idle,
        reclaimable=reclaimable,
        in_share_preemption=preemption,
    )


def deals(model: GovernanceModel) -> list[Deal]:
    projects = {team: project.name for project in model.projects for team in project.teams}
    return [replace(deal(team, model.pool(pool_name)), project=projects.get(team.name, "-")) for team in model.teams for pool_name in team.quotas]


_COLUMNS = (
    ("team", "team"),
    ("pool", "pool"),
    ("backend", "backend"),
    ("guaranteed", "guaranteed"),
    ("max_with_borrowing", "most with borrowing"),
    ("lends_idle", "idle capacity lent"),
    ("reclaimable", "jobs can be reclaimed"),
    ("in_share_preemption", "in-share preemption"),
    ("project", "project"),
)


def render_table(rows: list[Deal]) -> str:
    header = [title for _, title in _COLUMNS]
    body = [[str(getattr(row, field)) for field, _ in _COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
