"""Compile the governance model into the runtime policy document the controllers read.

The document is plain JSON so the Lambda code needs neither pydantic nor CDK; it is derived
from the model on every synth and never edited by hand.
"""

from __future__ import annotations

import json
from typing import Any

from constructs_lib.backends import backend_of
from constructs_lib.model import AnyPool, GovernanceModel, Team
from constructs_lib.model.projects import group_in_pool, groups_in_pool
from constructs_lib.model.quota import borrow_instances, instance_quota
from constructs_lib.model.run_limits import any_class_max_run_minutes, max_run_by_weight
from gpu_governance_runtime.contract import POLICY_VERSION


def _share(model: GovernanceModel, team: Team, pool: AnyPool) -> dict[str, Any]:
    sharing = team.sharing
    return {
        "name": team.name,
        # The one translation of a quota into whole instances (GPUs / GPUs per instance): the reclaim
        # planner, the capacity controller and `simulate` all read this.
        "quota": instance_quota(team, pool),
        "strategy": sharing.strategy.value,
        # null means unlimited for lend_and_borrow and "does not borrow" otherwise
        "borrow_limit": sharing.borrow_percent,
        # {instance type: instances borrowed at most}, overriding the percent for those types
        "borrow_limit_instances": borrow_instances(team, pool),
        "in_share_preemption": sharing.in_share_preemption,
        "fair_share_weight": team.fair_share_weight,
        # null: lends all its idle quota (as its strategy allows). A lending limit holds only where the
        # reclaim controller plans the borrowers; elsewhere the policy says what happens (`validate` warns).
        "lending_limit": sharing.lending_limit if backend_of(pool).holds_lending_limits else None,
        "paused": team.paused,
        # enforced by the reclaim controller where the backend has no limit of its own (reclaim/gpu_hours.py)
        "gpu_hour_limit": {"hours": team.gpu_hour_limit.hours, "period": team.gpu_hour_limit.period.value}
        if team.gpu_hour_limit
        else None,
    } | _max_run(model, team, pool)


def _max_run(model: GovernanceModel, team: Team, pool: AnyPool) -> dict[str, Any]:
    """A team's run-time limits where the reclaim controller stops its jobs at them (reclaim/run_time.py):
    ``max_run``, the seconds of a job of any class and, by scheduling priority (a class's weight), those
    whose limit differs (none where the team has no limit there, or its backend holds limits itself)."""
    if not backend_of(pool).reclaim_terminates_jobs:
        return {}
    overall = any_class_max_run_minutes(team, pool, model.priority_classes)
    by_weight = max_run_by_weight(model, team, pool)
    if overall is None and not by_weight:
        return {}
    return {
        "max_run": {
            "seconds": None if overall is None else overall * 60,
            "by_priority": {str(weight): minutes * 60 for weight, minutes in sorted(by_weight.items())},
        }
    }


def _groups(model: GovernanceModel, pool: AnyPool) -> dict[str, Any]:
    """The tree of groups with a quota in the pool, parents first, where the reclaim controller
    plans or the scheduler holds it (Slurm holds its own as parent accounts too; Batch quota shares
    and HyperPod EKS have no level above the team and the controller does not schedule there:
    `validate` says so). Each names its nearest ancestor with a quota in the pool (``parent``); its
    ``shares`` are the pool's teams whose nearest such group it is; ``borrowing_limit`` names every
    type of the quota, 0 where the file declares none; ``lending_limit`` (absent, or a type without
    one: all its idle quota) what the file declares."""
    if not backend_of(pool).holds_lending_limits:
        return {}
    pooled = [t.name for t in model.teams_in(pool.name)]
    groups = []
    for group, parent in groups_in_pool(model.groups, pool.name):
        placed = {t for t in pooled if group_in_pool(model.groups, t, pool.name) is group}
        quota = dict(group.quotas[pool.name])
        entry: dict[str, Any] = {
            "name": group.name,
            # its own teams in the file's order, then those of child groups without a quota here
            "shares": [t for t in group.teams if t in placed] + [t for t in pooled if t in placed - set(group.teams)],
            "quota": quota,
        }
        if parent is not None:
            entry["parent"] = parent.name
        # Written for every type, 0 where the file declares none (its default: the quota is the
        # ceiling): the reader takes an absent limit as none.
        declared = group.borrowing_limits.get(pool.name, {})
        entry["borrowing_limit"] = {t: declared.get(t, 0) for t in quota}
        if pool.name in group.lending_limits:
            entry["lending_limit"] = dict(group.lending_limits[pool.name])
        groups.append(entry)
    return {"groups": groups} if groups else {}


def _reclaim(pool: AnyPool) -> dict[str, Any]:
    settings = getattr(pool, "reclaim", None)  # HyperPod EKS pools reclaim with Kueue: none
    if settings is None:
        return {}
    return {
        "reclaim": {
            "reborrow_backoff_s": settings.reborrow_backoff_seconds,
            "borrow_horizon_s": settings.borrow_horizon_seconds,
            "grace_s": settings.grace_seconds,
            "usage_half_life_s": settings.fair_share.half_life_seconds,
        }
    }


def compile_policy(model: GovernanceModel) -> dict[str, Any]:
    return {
        "version": POLICY_VERSION,
        "organisation": model.organisation,
        "priority_classes": [{"name": p.name, "weight": p.weight} for p in model.priority_classes],
        "pools": [
            {
                "name": pool.name,
                "backend": pool.backend,
                "capacity": dict(pool.capacity),
                "shares": [_share(model, team, pool) for team in model.teams_in(pool.name)],
                **_reclaim(pool),
                **_groups(model, pool),
            }
            for pool in model.pools
        ],
        "capacity_windows": [window.to_policy(model) for window in model.capacity_windows],
    }


def policy_json(model: GovernanceModel) -> str:
    """Stable text (sorted keys) so an unchanged model gives an unchanged Lambda asset hash."""
    return json.dumps(compile_policy(model), indent=2, sort_keys=True)
