from __future__ import annotations

import json

import pytest

from constructs_lib.model.loader import load_model
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime.policy import PolicyError, parse_policy, read_policy_file
from gpu_governance_runtime.reclaim.planner import Share, Strategy


def test_reads_the_policy_compiled_from_the_default_organisation(tmp_path):
    model = load_model()
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(compile_policy(model)))
    policy = read_policy_file(path)
    assert policy.organisation == model.organisation
    pool = policy.pool("sagemaker-training")
    assert pool.backend == "batch_quota_share"
    assert pool.capacity == dict(model.pool("sagemaker-training").capacity)
    research = next(s for s in pool.shares if s.name == "research")
    assert research == Share(
        name="research", quota={"ml.p5.48xlarge": 2, "ml.g6e.12xlarge": 8}, strategy=Strategy.LEND_AND_BORROW,
        borrow_limit=100, in_share_preemption=True, fair_share_weight=30,
    )
    assert policy.priority_weight("urgent") == 90


def test_null_borrow_limit_with_lend_and_borrow_means_unlimited():
    document = {
        "version": 1, "organisation": "o", "priority_classes": [], "capacity_windows": [],
        "pools": [{"name": "p", "backend": "hyperpod_slurm", "capacity": {"ml.p5.48xlarge": 8}, "shares": [
            {"name": "a", "quota": {"ml.p5.48xlarge": 2}, "strategy": "lend_and_borrow", "borrow_limit": None,
             "in_share_preemption": False, "fair_share_weight": 5}]}],
    }
    (share,) = parse_policy(document).pool("p").shares
    assert share.ceiling("ml.p5.48xlarge", 8) == 8


def test_every_problem_is_named_with_its_path():
    document = {
        "version": 2, "organisation": "o", "priority_classes": [{"name": "x", "weight": "high"}],
        "pools": [{"name": "p", "backend": "kubernetes", "capacity": {"ml.p5.48xlarge": 0}, "shares": [
            {"name": "a", "quota": {}, "strategy": "hoard", "borrow_limit": 10, "in_share_preemption": "yes"}]}],
    }
    with pytest.raises(PolicyError) as error:
        parse_policy(document)
    text = str(error.value)
    for expected in (
        "version: 2 - this controller reads version 1",
        "priority_classes[0].weight: 'high'",
        "pools[0].backend: 'kubernetes' - one of",
        "pools[0].capacity.ml.p5.48xlarge: 0 - a whole number >= 1",
        "pools[0].shares[0].strategy: 'hoard'",
        "pools[0].shares[0].borrow_limit: 10 - only lend_and_borrow",
        "pools[0].shares[0].in_share_preemption: 'yes' - true or false",
    ):
        assert expected in text


def test_unreadable_file_is_a_policy_error(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text("{not json")
    with pytest.raises(PolicyError, match="cannot read a JSON policy document"):
        read_policy_file(path)
