"""The governance model the Slurm tests use: three teams, one per sharing strategy, on the
three emulated 4-GPU nodes that tests/slurm/slurm-up.sh starts."""

from __future__ import annotations

from typing import Any

from constructs_lib.model import GovernanceModel

INSTANCE_TYPE = "ml.g5.12xlarge"
GPUS_PER_NODE = 4
POOL = "research-slurm"
# Instance group -> node of the local test cluster (HyperPod would name them ip-a-b-c-d).
NODE_MAP = {
    "critical-g5-12xlarge": "gpu-1",
    "steady-g5-12xlarge": "gpu-2",
    "burst-g5-12xlarge": "gpu-3",
}


def member(name: str) -> str:
    return f"arn:aws:iam::444455556666:role/{name}"


def team(name: str, preset: str, users: list[str], **sharing: Any) -> dict[str, Any]:
    return {
        "name": name,
        "account": "research",
        "preset": preset,
        "sharing": sharing,
        "fair_share_weight": {"critical": 50, "steady": 30, "burst": 20}.get(name, 10),
        "members": [member(u) for u in users],
        "quotas": {POOL: {INSTANCE_TYPE: 1}},
    }


def model_data(*, teams: list[dict[str, Any]] | None = None, capacity: int = 3) -> dict[str, Any]:
    return {
        "organisation": "acme-ml",
        "capacity_account": {"account_id": "111122223333", "region": "us-east-1"},
        "consumer_accounts": {"research": {"account_id": "444455556666", "region": "us-east-1"}},
        "platform_admins": ["arn:aws:iam::111122223333:role/GpuPlatformAdmin"],
        "priority_classes": [
            {"name": "urgent", "weight": 90},
            {"name": "standard", "weight": 50},
            {"name": "low", "weight": 10},
        ],
        "pools": [
            {
                "name": POOL,
                "backend": "hyperpod_slurm",
                "cluster_name": "research",
                "capacity": {INSTANCE_TYPE: capacity},
                "gpus_per_instance": {INSTANCE_TYPE: GPUS_PER_NODE},
            }
        ],
        "teams": teams if teams is not None else default_teams(),
    }


def default_teams() -> list[dict[str, Any]]:
    return [
        team("critical", "critical", ["alice"]),  # reserve, in-share preemption on
        team("steady", "steady", ["bob"]),  # lend, in-share preemption off
        team("burst", "background", ["carol", "dave"], borrow_limit=100),  # lend and borrow 1 node
    ]


def governance_model(**kwargs: Any) -> GovernanceModel:
    return GovernanceModel.from_dict(model_data(**kwargs))
