"""SageMaker HyperPod on Slurm: accounts, QoS, fair share and partitions."""

from __future__ import annotations

from gpu_governance_runtime.contract import CONSUMER_HYPERPOD_INSTANCE_GROUP, HYPERPOD_SLURM

from ..base import CLUSTER, Backend
from .pool import HyperPodSlurmPool

BACKEND = Backend(
    name=HYPERPOD_SLURM,
    package=__name__,
    pool=HyperPodSlurmPool,
    exports={
        "pool": ("HyperPodSlurmPool",),
        "plan": ("slurm_plan",),
        "construct": ("HyperPodSlurmGovernance", "HyperPodSlurmGovernanceProps"),
    },
    instance_types=CLUSTER,
    family="hyperpod",
    reclaim_plans=True,
    window_feeds=(CONSUMER_HYPERPOD_INSTANCE_GROUP,),
    drains_on_head_node=True,
    reached_on_head_node=True,
    team_resources=1,
    shared_resources=1,
    member_tool="slurm",
    stack_attribute="hyperpod_slurm_clusters",
)
