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
    # Slurm counts a child's jobs against every ancestor's Grp limits (https://slurm.schedmd.com/resource_limits.html).
    group_tree="Slurm's account tree (a parent account per group under its parent group's, GrpTRES=gres/gpu at the "
    "group's quota plus its borrowing limit), and the reclaim controller's planner where it governs the pool (head_node)",
    # A partition's nodes are open to every account it allows (https://slurm.schedmd.com/slurm.conf.html, AllowAccounts):
    # the borrow partition holds every lent node, with no limit per lender.
    group_lending_limit_caveat="not held by Slurm {where}: an account has no lending limit, and the group's idle nodes "
    "are in the borrow partition for every borrower; only the reclaim controller's planner holds it, where it governs "
    "the pool (head_node)",
    window_feeds=(CONSUMER_HYPERPOD_INSTANCE_GROUP,),
    drains_on_head_node=True,
    reached_on_head_node=True,
    team_resources=1,
    shared_resources=1,
    member_tool="slurm",
    stack_attribute="hyperpod_slurm_clusters",
)
