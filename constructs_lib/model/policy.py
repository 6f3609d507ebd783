"""Compile the governance model into the runtime policy document the controllers read.

The document is plain JSON so the Lambda code needs neither pydantic nor CDK; it is derived
from the model on every synth and never edited by hand.
"""

from __future__ import annotations

import json
from typing import Any

from gpu_governance_runtime.contract import BATCH_FAIR_SHARE, HYPERPOD_SLURM, POLICY_VERSION

from constructs_lib.model import UNLIMITED, AnyPool, GovernanceModel, Team


# Where a lending limit holds: the pools whose borrowers the reclaim controller plans. Batch quota
# shares and HyperPod compute quotas have none and the controller does not schedule there, so the
# policy says what happens: the whole idle quota is lent (`validate` warns; docs/governance-file.md).
LENDING_LIMIT_BACKENDS = (BATCH_FAIR_SHARE, HYPERPOD_SLURM)


def _share(team: Team, pool: AnyPool) -> dict[str, Any]:
    sharing = team.sharing
    return {
        "name": team.name,
        "quota": dict(team.quotas[pool.name]),
        "strategy": sharing.strategy.value,
        # null means unlimited for lend_and_borrow and "does not borrow" otherwise
        "borrow_limit": None if sharing.borrow_limit in (None, UNLIMITED) else sharing.borrow_limit,
        "in_share_preemption": sharing.in_share_preemption,
        "fair_share_weight": team.fair_share_weight,
        # null: lends all its idle quota (as its strategy allows)
        "lending_limit": sharing.lending_limit if pool.backend in LENDING_LIMIT_BACKENDS else None,
        "paused": team.paused,
    }


def _reclaim(pool: AnyPool) -> dict[str, Any]:
    settings = getattr(pool, "reclaim", None)  # HyperPod EKS pools reclaim with Kueue: none
    if settings is None:
        return {}
    return {"reclaim": {"reborrow_backoff_s": settings.reborrow_backoff_seconds, "borrow_horizon_s": settings.borrow_horizon_seconds,
                        "grace_s": settings.grace_seconds}}


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
                "shares": [_share(team, pool) for team in model.teams_in(pool.name)],
                **_reclaim(pool),
            }
            for pool in model.pools
        ],
        "capacity_windows": [window.to_policy(model) for window in model.capacity_windows],
    }


def policy_json(model: GovernanceModel) -> str:
    """Stable text (sorted keys) so an unchanged model gives an unchanged Lambda asset hash."""
    return json.dumps(compile_policy(model), indent=2, sort_keys=True)
