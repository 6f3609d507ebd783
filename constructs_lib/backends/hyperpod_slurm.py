"""SageMaker HyperPod on Slurm: accounts, QoS, fair share and partitions."""

from __future__ import annotations

from gpu_governance_runtime.contract import HYPERPOD_SLURM

from .base import Backend

BACKEND = Backend(
    name=HYPERPOD_SLURM,
    family="hyperpod",
    reclaim_plans=True,
    team_resources=1,
    shared_resources=1,
    construct="constructs_lib.slurm.construct:build_pool",
    stack_attribute="hyperpod_slurm_clusters",
)
