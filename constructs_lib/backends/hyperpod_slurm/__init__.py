"""SageMaker HyperPod on Slurm: accounts, QoS, fair share and partitions."""

from __future__ import annotations

from gpu_governance_runtime.contract import CONSUMER_HYPERPOD_INSTANCE_GROUP, HYPERPOD_SLURM

from ..base import CLUSTER, Backend

BACKEND = Backend(
    name=HYPERPOD_SLURM,
    instance_types=CLUSTER,
    family="hyperpod",
    reclaim_plans=True,
    slurm_accounts=True,
    window_feeds=(CONSUMER_HYPERPOD_INSTANCE_GROUP,),
    drains_on_head_node=True,
    reached_on_head_node=True,
    team_resources=1,
    shared_resources=1,
    audit_cluster="constructs_lib.organisation.audit:slurm_cluster_access",
    audit_workload="constructs_lib.organisation.audit:slurm_place",
    audit_data="constructs_lib.organisation.audit:slurm_data_access",
    discovery="constructs_lib.member.discovery:slurm_keys",
    status_reader="constructs_lib.cli.status:read_slurm",
    member_tool="slurm",
    submit_example="constructs_lib.cli.member:slurm_example",
    construct="constructs_lib.backends.hyperpod_slurm.construct:build_pool",
    stack_attribute="hyperpod_slurm_clusters",
)
