"""Groups reach the reclaim controller: compiled into the policy of the pools it plans (Batch fair
share, Slurm), read back, and handed to the planner by the adapter; never for Batch quota shares or
HyperPod EKS, which have no level above the team (validate says so)."""

from __future__ import annotations

import copy

import pytest
import yaml

from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats
from constructs_lib.model.loader import default_config_text, load_model
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter
from gpu_governance_runtime.planners.reclaim import ShareGroup
from gpu_governance_runtime.policy import PolicyError, parse_policy
from tests.hierarchy.test_groups_model import EXAMPLE
from tests.reclaim.test_controller import G6E, NOW, POLICY, QUEUE, expect_read, stubbed

DOCUMENT = {
    "version": 1,
    "organisation": "acme",
    "capacity_windows": [],
    "priority_classes": [{"name": "standard", "weight": 50}],
    "pools": [
        {
            "name": "ec2-gpu",
            "backend": "batch_fair_share",
            "capacity": {G6E: 8},
            "shares": [
                {
                    "name": s,
                    "quota": {G6E: q},
                    "strategy": "lend_and_borrow",
                    "borrow_limit": None,
                    "in_share_preemption": False,
                    "fair_share_weight": 10,
                }
                for s, q in (("research", 2), ("training", 6))
            ],
            "groups": [{"name": "lab", "shares": ["research", "training"], "quota": {G6E: 8}}],
        }
    ],
}


def test_the_example_groups_are_compiled_for_the_pools_the_controller_plans():
    document = compile_policy(load_model(EXAMPLE))
    policy = parse_policy(document)

    def written(pool: str) -> dict:  # the borrowing limit the library writes (absent: none, issue 43's tree)
        entry = next(p for p in document["pools"] if p["name"] == pool)
        return entry["groups"][0].get("borrowing_limit", {})

    assert policy.pool("ec2-gpu").groups == (
        ShareGroup(
            name="vision",
            shares=("perception", "mapping"),
            quota={"g6e.12xlarge": 8},
            borrowing_limit=written("ec2-gpu"),
        ),
    )
    assert policy.pool("hyperpod-slurm").groups == (
        ShareGroup(
            name="vision",
            shares=("perception", "mapping"),
            quota={"ml.p5.48xlarge": 4},
            borrowing_limit=written("hyperpod-slurm"),
        ),
    )


def test_the_fair_share_adapter_hands_the_groups_to_the_planner():
    pool = parse_policy(DOCUMENT).pool("ec2-gpu")
    client, stubber = stubbed("batch")
    expect_read(stubber)
    with stubber:
        state = BatchFairShareAdapter(client, job_queue=QUEUE, pool=pool, submit=client).read(NOW)
    assert state.groups == pool.groups and state.groups[0].name == "lab"
    assert POLICY.pool("ec2-gpu").groups == ()  # a policy without groups: flat, as before


def test_a_malformed_group_in_the_policy_is_refused_naming_it():
    document = copy.deepcopy(DOCUMENT)
    document["pools"][0]["groups"][0]["shares"] = "research"
    with pytest.raises(PolicyError, match=r"pools\[0\]\.groups\[0\]\.shares"):
        parse_policy(document)


def test_validate_says_in_one_line_where_a_group_quota_is_not_enforced():
    assert not [
        line for line in caveats(load_model(EXAMPLE)) if line.startswith("groups[")
    ]  # Slurm and fair share: enforced
    data = yaml.safe_load(default_config_text())
    data["groups"] = [
        {
            "name": "lab",
            "teams": ["research", "training"],
            "quotas": {
                "sagemaker-training": {"ml.p5.48xlarge": 6, "ml.g6e.12xlarge": 12},
                "hyperpod-eks": {"ml.p5.48xlarge": 4, "ml.g6e.48xlarge": 4},
            },
        }
    ]
    lines = [line for line in caveats(GovernanceModel.from_dict(data)) if line.startswith("groups[")]
    assert len(lines) == 2
    assert lines[0].startswith("groups[0].quotas.sagemaker-training: not enforced") and "quota share" in lines[0]
    assert lines[1].startswith("groups[0].quotas.hyperpod-eks: not enforced") and "compute quota" in lines[1]
