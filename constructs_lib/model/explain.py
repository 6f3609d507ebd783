"""What each team's deal is, per pool and backend: the table a team lead reads."""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass, replace
from typing import Any

from constructs_lib.backends import backend_of
from constructs_lib.model import AnyPool, GovernanceModel, SharingStrategy, Team
from constructs_lib.model.projects import group_in_pool, groups_in_pool, parent_in_pool
from constructs_lib.model.quota import (
    ResourceQuota,
    borrow_instances,
    declared,
    gpus_of,
    instance_quota,
    whole_instances,
)
from constructs_lib.model.run_limits import max_run_limited, max_run_text
from gpu_governance_runtime.contract import lendable


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
    group: str = "-"  # the team's place above it: its group and what the group holds in the pool
    state: str = "active"  # or "paused": no new job of the team starts
    gpu_hour_limit: str = "-"  # "N GPU h per month", or "-": no limit
    max_run: str = "-"  # a job's wall-time limit there, "-": none (run_limits.max_run_text)
    user_limits: str = "-"  # what each member may run at once there, "-": none
    fair_share: str = "-"  # where the pool orders borrowers by decayed usage: how; "-": by what they borrow now


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} x {t}" for t, n in sorted(counts.items()))


def _most_with_borrowing(team: Team, pool: AnyPool) -> str:
    """Per instance type, the most the team may hold, in the unit its quota is declared in: GPUs
    for a GPU quota, instances otherwise. An unlimited borrower (ceiling None) and every other is
    bounded by what the pool holds; an absolute limit replaces the percent for its type."""
    sharing, absolute = team.sharing, borrow_instances(team, pool)
    shown = {}
    for t, entry in team.quotas[pool.name].items():
        gpus = gpus_of(pool, t)
        if isinstance(entry, ResourceQuota) and entry.accelerators is not None and gpus:
            borrowed = (
                entry.borrow_accelerators
                if entry.borrow_accelerators is not None
                else (sharing.borrow_ceiling(entry.accelerators) or pool.capacity[t] * gpus) - entry.accelerators
            )
            shown[t] = (
                f"{min(entry.accelerators + borrowed, pool.capacity[t] * gpus)} GPUs"
                if sharing.borrows
                else f"{entry.accelerators} GPUs"
            )
            continue
        count = whole_instances(entry, gpus)
        ceiling = count + absolute[t] if t in absolute and sharing.borrows else sharing.borrow_ceiling(count)
        shown[t] = min(ceiling or pool.capacity[t], pool.capacity[t])
    return _counts(shown)


def gpu_hour_limit_text(team: Team, pool: AnyPool) -> str:
    """The team's GPU-hour limit as explain and audit show it, saying where it is not enforced."""
    limit = team.gpu_hour_limit
    if limit is None:
        return "-"
    text = f"{limit.hours} GPU h per {limit.period.value}"
    return f"{text} (not enforced here)" if backend_of(pool).gpu_hour_limit_caveat else text


def fair_share_text(team: Team, pool: AnyPool) -> str:
    """How a borrowing team's turn to borrow, and to be reclaimed from, is decided where the pool
    orders by decayed usage (docs/governance-file.md#fair-share); "-" otherwise."""
    reclaim = getattr(pool, "reclaim", None)  # HyperPod EKS pools: Kueue orders them
    if reclaim is None or reclaim.fair_share.half_life_seconds is None or not team.sharing.borrows:
        return "-"
    text = (
        f"by usage: its instance-hours decayed with a {reclaim.fair_share.half_life_seconds // 3600} h half-life, "
        f"per fair_share_weight {team.fair_share_weight}; the least borrows first, the most is reclaimed from first"
    )
    return f"{text} (not applied here)" if not backend_of(pool).reclaim_plans else text


def deal(team: Team, pool: AnyPool) -> Deal:
    sharing = team.sharing
    max_with_borrowing = _most_with_borrowing(team, pool)
    quota = instance_quota(team, pool)
    backend = backend_of(pool)
    lends_idle = "yes" if sharing.lends else "no (reserved)"
    if sharing.lends and sharing.lending_limit is not None:
        lends_idle = (
            f"at most {_counts({t: lendable(sharing.strategy, n, sharing.lending_limit) for t, n in quota.items()})}"
        )
        if not backend.holds_lending_limits:
            lends_idle = "yes, all (lending_limit not enforceable here)"
    if sharing.strategy is SharingStrategy.LEND_AND_BORROW:
        reclaimable = (
            "yes, jobs on borrowed capacity" if backend.natively_preempts else "only by the reclaim controller"
        )
    else:
        reclaimable = "no (never borrows)"
    return backend.refine_deal(
        Deal(
            team=team.name,
            pool=pool.name,
            backend=pool.backend,
            guaranteed=declared(team.quotas[pool.name]),
            max_with_borrowing=max_with_borrowing,
            lends_idle=lends_idle,
            reclaimable=reclaimable,
            in_share_preemption="yes, lower priority first" if sharing.in_share_preemption else "no",
            state="paused" if team.paused else "active",
            gpu_hour_limit=gpu_hour_limit_text(team, pool),
            fair_share=fair_share_text(team, pool),
        ),
        team,
        pool,
    )


def group_place(model: GovernanceModel, team: Team, pool_name: str) -> str:
    """Where ``team`` sits above itself in a pool: its nearest group with a quota there, what that
    group is guaranteed there, the teams and child groups it shares that with, and the groups above
    it; "-" for a team in no group."""
    own = model.group_of(team.name)
    group = group_in_pool(model.groups, team.name, pool_name)
    if own is None:
        return "-"
    if group is None:
        return f"{own.name}: no group quota in this pool"
    quotas = {t.name: t.quotas for t in model.teams}
    others = [name for name in group.teams if name != team.name and pool_name in quotas[name]]
    others += [g.name for g, parent in groups_in_pool(model.groups, pool_name) if parent is group]
    place = f"{group.name}: {_counts(group.quotas[pool_name])} shared with {', '.join(others) or 'no other team'}"
    ancestors = []
    while (parent := parent_in_pool(model.groups, group, pool_name)) is not None:
        ancestors.append(f"{parent.name} ({_counts(parent.quotas[pool_name])})")
        group = parent
    return f"{place}; within {' within '.join(ancestors)}" if ancestors else place


def _unless(text: str, caveat: str | None, held_for: str = "") -> str:
    """A declared limit as `explain` shows it, saying where the backend does not hold it (or holds
    it for ``held_for`` only)."""
    if text == "-" or not caveat:
        return text
    return f"{text} (enforced for {held_for} only)" if held_for else f"{text} (not enforced here)"


def deals(model: GovernanceModel) -> list[Deal]:
    projects = {team: project.name for project in model.projects for team in project.teams}
    return [
        replace(
            deal(team, model.pool(pool_name)),
            project=projects.get(team.name, "-"),
            group=group_place(model, team, pool_name),
            max_run=_unless(
                max_run_text(model, team, model.pool(pool_name)),
                backend_of(model.pool(pool_name)).max_run_caveat,
                backend_of(model.pool(pool_name)).max_run_held_for,
            ),
            user_limits=_unless(
                team.user_limits.shown() if team.user_limits else "-",
                backend_of(model.pool(pool_name)).user_limit_caveat,
            ),
        )
        for team in model.teams
        for pool_name in team.quotas
    ]


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
    ("gpu_hour_limit", "GPU-hour limit"),
    ("max_run", "run-time limit"),
    ("user_limits", "per-member limit"),
    ("fair_share", "fair share"),
    ("group", "group (its teams together)"),
    ("project", "project"),
)


def render(rows: list[Deal], windows: list[str], width: int) -> str:
    """One block per team and pool, each value wrapped to ``width`` under its label (a table of
    every column was 357 characters wide); "-" values are left out; then the capacity windows."""
    label = max(len(title) for _, title in _COLUMNS[3:])
    room = max(20, width - label - 4)
    lines: list[str] = []
    for row in rows:
        lines.append(f"{row.team} in pool {row.pool} ({row.backend})")
        for field, title in _COLUMNS[3:]:
            value = str(getattr(row, field))
            if value != "-":
                first, *rest = _wrap(value, room) or [""]
                lines += [f"  {title:<{label}}  {first}", *(f"  {'':<{label}}  {more}" for more in rest)]
        lines.append("")
    if windows:
        lines.append("capacity windows")
        for window in windows:
            lines += _wrap(window, width, initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines).rstrip()


def _wrap(text: str, width: int, **indents: str) -> list[str]:
    """Lines of at most ``width``, never splitting a word, name or path (``instance-hour``, ARNs)."""
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False, **indents)


def wrapped_note(note: str, width: int) -> str:
    """A caveat as `explain` prints it: ``note: ...`` wrapped, further lines indented."""
    return "\n".join(_wrap(f"note: {note}", width, subsequent_indent="  "))


def as_json(rows: list[Deal], windows: dict[str, dict[str, Any]], notes: list[str]) -> dict[str, Any]:
    """`explain --json`: the same deals, field by field, the windows and the notes."""
    return {"deals": [asdict(row) for row in rows], "capacity_windows": windows, "notes": notes}


def caveats(model: GovernanceModel) -> list[str]:
    """Settings a pool's backend ignores, one line each naming the field: ``validate`` warns with
    them and ``explain`` lists them under the table. None of them stops a deploy."""
    lines = []
    for index, pool in enumerate(model.pools):
        reclaim = getattr(pool, "reclaim", None)  # HyperPod EKS pools have no reclaim settings
        grace_caveat = backend_of(pool).grace_caveat
        if reclaim is not None and reclaim.grace_seconds and grace_caveat:
            lines.append(
                f"pools[{index}].reclaim.grace_seconds: {grace_caveat.format(where=f'on pool {pool.name} ({pool.backend})')}"
            )
        fair_share_caveat = backend_of(pool).fair_share_caveat
        if reclaim is not None and reclaim.fair_share.by == "usage" and fair_share_caveat:
            lines.append(
                f"pools[{index}].reclaim.fair_share: {fair_share_caveat.format(where=f'on pool {pool.name} ({pool.backend})')}"
            )
    lines += _group_caveats(model)
    for index, team in enumerate(model.teams):
        for pool_name in team.quotas:
            pool = model.pool(pool_name)
            where = f"on pool {pool.name} ({pool.backend})"
            backend = backend_of(pool)
            if team.sharing.lending_limit is not None and backend.lending_limit_caveat:
                lines.append(
                    f"teams[{index}].sharing.lending_limit: {backend.lending_limit_caveat.format(where=where)}"
                )
            for instance_type, entry in team.quotas[pool_name].items():
                gpus = gpus_of(pool, instance_type)
                if (
                    isinstance(entry, ResourceQuota)
                    and entry.instances is None
                    and (entry.accelerators is None or not gpus or entry.accelerators % gpus)
                ):
                    lines.append(
                        f"teams[{index}].quotas.{pool_name}.{instance_type}: {entry.declared()} is not whole instances: task governance enforces it {where}; "
                        f"the reclaim controller's policy and `simulate` count the {whole_instances(entry, gpus)} whole instances it covers"
                    )
            if team.gpu_hour_limit and backend.gpu_hour_limit_caveat:
                lines.append(
                    f"teams[{index}].gpu_hour_limit: not enforced {where}: {backend.gpu_hour_limit_caveat}; the team's jobs still start after its limit"
                )
            elif team.gpu_hour_limit and len(team.quotas) > 1:
                how = "the reclaim controller" if backend.gpu_hour_switch else "Slurm (GrpTRESMins)"
                lines.append(
                    f"teams[{index}].gpu_hour_limit: counted {where} alone: {how} limits the team's usage there, not its GPU hours elsewhere"
                )
            if team.paused and backend.paused_caveat:
                lines.append(f"teams[{index}].paused: {backend.paused_caveat.format(where=where)}")
        # Only a team whose pools all ignore the weight is told (quota-share queues hand out idle
        # capacity first in, first out).
        if "fair_share_weight" in team.model_fields_set and not any(
            backend_of(model.pool(p)).weighs_teams for p in team.quotas
        ):
            lines.append(
                f"teams[{index}].fair_share_weight: does nothing: the team's pools ({', '.join(team.quotas)}) are quota-share queues, "
                "which hand idle capacity to borrowers first in, first out"
            )
    return lines + _limit_caveats(model)


_GUARD_REPORTS = (
    "the submission guard only reports service jobs asking for longer than their run-time limit "
    "(StoppingCondition.MaxRuntimeInSeconds); act stops them"
)
_RECLAIM_REPORTS = "the reclaim controller only reports jobs that run past their run-time limit; act stops them"


def _group_caveats(model: GovernanceModel) -> list[str]:
    """Where a group's quota, parent or limits are not held, per group and pool."""
    lines = []
    for index, group in enumerate(model.groups):
        for pool_name in group.quotas:
            pool = model.pool(pool_name)
            backend, where = backend_of(pool), f"on pool {pool.name} ({pool.backend})"
            if backend.group_caveat:
                lines.append(
                    f"groups[{index}].quotas.{pool_name}: not enforced {where}: {backend.group_caveat}; "
                    "each team there holds its own quota and borrow limit only"
                )
                unheld = [
                    f"groups[{index}].{field}"
                    for field, declared in (
                        ("parent", group.parent is not None),
                        (f"borrowing_limits.{pool_name}", pool_name in group.borrowing_limits),
                        (f"lending_limits.{pool_name}", pool_name in group.lending_limits),
                    )
                    if declared
                ]
                lines += [f"{field}: not enforced {where}: {backend.group_caveat}" for field in unheld]
            elif pool_name in group.lending_limits and backend.group_lending_limit_caveat:
                lines.append(
                    f"groups[{index}].lending_limits.{pool_name}: {backend.group_lending_limit_caveat.format(where=where)}"
                )
    return lines


def group_notes(model: GovernanceModel) -> list[str]:
    """Per pool with groups, who holds its group tree: the scheduler, the reclaim controller, or
    nobody (then ``caveats`` warns). ``validate`` and ``explain`` print them as notes."""
    lines = []
    for index, pool in enumerate(model.pools):
        tree = groups_in_pool(model.groups, pool.name)
        if not tree:
            continue
        names = ", ".join(g.name if parent is None else f"{g.name} (in {parent.name})" for g, parent in tree)
        holder = backend_of(pool).group_tree or "nobody (see the warnings)"
        lines.append(f"pools[{index}] {pool.name} ({pool.backend}): groups {names} are held by {holder}")
    return lines


def _limit_caveats(model: GovernanceModel) -> list[str]:
    """Where a run-time or per-member limit is not held (docs/governance-file.md, Run-time and
    per-member limits): per pool, then per team and pool."""
    lines = []
    for index, pool in enumerate(model.pools):
        backend, where = backend_of(pool), f"on pool {pool.name} ({pool.backend})"
        teams = model.teams_in(pool.name)
        # Where a controller holds the limit, it only reports in dry run: the guard on quota-share
        # queues, the reclaim controller on fair-share ones.
        reporters = (
            (backend.guards_submissions, "guard_mode", model.guard_mode, _GUARD_REPORTS),
            (backend.reclaim_terminates_jobs, "reclaim_mode", model.reclaim_mode, _RECLAIM_REPORTS),
        )
        if any(max_run_limited(model, team, pool) for team in teams):
            lines += [
                f"{field}: dry_run: {where} {what}"
                for held, field, mode, what in reporters
                if held and mode == "dry_run"
            ]
        if backend.max_run_caveat and teams:
            if pool.max_run_minutes is not None:
                lines.append(f"pools[{index}].max_run_minutes: {backend.max_run_caveat.format(where=where)}")
            lines += [
                f"priority_classes[{c}].max_run_minutes: {backend.max_run_caveat.format(where=where)}"
                for c, priority_class in enumerate(model.priority_classes)
                if priority_class.max_run_minutes is not None
            ]
    for index, team in enumerate(model.teams):
        for pool in (model.pool(name) for name in team.quotas):
            backend, where = backend_of(pool), f"on pool {pool.name} ({pool.backend})"
            if team.max_run_minutes is not None and backend.max_run_caveat:
                lines.append(f"teams[{index}].max_run_minutes: {backend.max_run_caveat.format(where=where)}")
            if team.user_limits is not None and backend.user_limit_caveat:
                lines.append(f"teams[{index}].user_limits: {backend.user_limit_caveat.format(where=where)}")
    return lines
