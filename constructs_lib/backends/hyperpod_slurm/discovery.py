"""A team's keys of the discovery document on a ``hyperpod_slurm`` pool: its account, partitions
and QoS."""

from __future__ import annotations

from typing import Any

from gpu_governance_runtime.slurm import BORROW_PARTITION, borrow_qos_name, class_qos_name

from .plan import slurm_plan


def keys(model, team, pool, classes) -> tuple[dict[str, Any], dict[str, Any]]:
    plan = slurm_plan(model, pool.name)
    slurm_account = next(a for a in plan.accounts if a.name == team.name)
    borrows = any(p.name == BORROW_PARTITION and team.name in p.allow_accounts for p in plan.partitions)
    found = {
        "cluster_name": pool.cluster_name,
        "slurm_account": slurm_account.name,
        "partition": team.name,
        "qos": list(slurm_account.qos),
        "default_qos": slurm_account.default_qos,
        "borrow_partition": BORROW_PARTITION if borrows else None,
        "borrow_qos": borrow_qos_name(team.name) if borrows else None,
    }
    return found, {c.name: class_qos_name(team.name, c.name) for c in classes}
