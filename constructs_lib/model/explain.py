"""What each team's deal is, per pool and backend: the table a team lead reads."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_governance_runtime.contract import BATCH_FAIR_SHARE, BATCH_QUOTA_SHARE, HYPERPOD_EKS, lendable

from constructs_lib.model import AnyPool, GovernanceModel, SharingStrategy, Team
from constructs_lib.model.policy import LENDING_LIMIT_BACKENDS


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
    state: str = "active"  # or "paused": no new job of the team starts


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} x {t}" for t, n in sorted(counts.items()))


def deal(team: Team, pool: AnyPool) -> Deal:
    quota = team.quotas[pool.name]
    sharing = team.sharing
    # An unlimited borrower (ceiling None) and every other is bounded by what the pool holds.
    ceiling = {t: min(sharing.borrow_ceiling(n) or pool.capacity[t], pool.capacity[t]) for t, n in quota.items()}
    natively_preempts = pool.backend != BATCH_FAIR_SHARE
    lends_idle = "yes" if sharing.lends else "no (reserved)"
    if sharing.lends and sharing.lending_limit is not None:
        lends_idle = f"at most {_counts({t: lendable(sharing.strategy, n, sharing.lending_limit) for t, n in quota.items()})}"
        if pool.backend not in LENDING_LIMIT_BACKENDS:
            lends_idle = "yes, all (lending_limit not enforceable here)"
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
        state="paused" if team.paused else "active",
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
    ("state", "state"),
    ("project", "project"),
)


def render_table(rows: list[Deal]) -> str:
    header = [title for _, title in _COLUMNS]
    body = [[str(getattr(row, field)) for field, _ in _COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


# Why a lending limit does not hold outside LENDING_LIMIT_BACKENDS: the backend has none (Batch quota shares:
# ResourceSharingConfiguration is Strategy and BorrowLimit only,
# https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaShareResourceSharingConfiguration.html;
# HyperPod compute quotas: ResourceSharingConfig is Strategy, BorrowLimit and AbsoluteBorrowLimits only,
# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceSharingConfig.html) and the
# reclaim controller does not schedule there (it observes quota-share queues; Kueue reclaims on EKS).
_NO_LENDING_LIMIT = {
    BATCH_QUOTA_SHARE: "Batch quota shares have no lending limit and the reclaim controller only observes them",
    HYPERPOD_EKS: "HyperPod compute quotas have no lending limit and Kueue, not the reclaim controller, schedules there",
}


def caveats(model: GovernanceModel) -> list[str]:
    """Settings a pool's backend ignores, one line each naming the field: ``validate`` warns with
    them and ``explain`` lists them under the table. None of them stops a deploy."""
    lines = []
    for index, pool in enumerate(model.pools):
        # Batch preempts quota-share jobs itself, with no grace: a quota share's preemption setting is
        # inSharePreemption alone (https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaSharePreemptionConfiguration.html).
        if pool.backend == BATCH_QUOTA_SHARE and pool.reclaim.grace_seconds:
            lines.append(f"pools[{index}].reclaim.grace_seconds: not enforced on pool {pool.name} ({pool.backend}): Batch preempts quota-share jobs "
                         "itself, at once, with no grace setting, and the reclaim controller only observes them; only `simulate` applies it")
    for index, team in enumerate(model.teams):
        for pool_name in team.quotas:
            pool = model.pool(pool_name)
            where = f"on pool {pool.name} ({pool.backend})"
            if team.sharing.lending_limit is not None and pool.backend not in LENDING_LIMIT_BACKENDS:
                lines.append(f"teams[{index}].sharing.lending_limit: not enforced {where}: {_NO_LENDING_LIMIT[pool.backend]}; the team lends all of its idle quota there")
            elif team.sharing.lending_limit is not None and pool.backend == BATCH_FAIR_SHARE:
                lines.append(f"teams[{index}].sharing.lending_limit: {where} Batch may start borrowers on the part held back; the reclaim controller takes it back as soon as the team's job waits for it")
            if team.paused and pool.backend == BATCH_FAIR_SHARE:
                lines.append(f"teams[{index}].paused: not enforced {where}: a fair-share queue has no per-share state and Batch, not the reclaim controller, starts jobs there; the team's jobs still start")
        # Quota-share queues assign idle capacity FIFO, the only strategy
        # (https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaSharePolicy.html); every
        # other backend weighs the team by it, so only a team in quota-share pools alone is told.
        if "fair_share_weight" in team.model_fields_set and all(model.pool(p).backend == BATCH_QUOTA_SHARE for p in team.quotas):
            lines.append(f"teams[{index}].fair_share_weight: does nothing: the team's pools ({', '.join(team.quotas)}) are quota-share queues, "
                         "which hand idle capacity to borrowers first in, first out")
    return lines
