from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model.loader import load_model, parse_config
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime.planners.reclaim import Settings, Share, Strategy
from gpu_governance_runtime.policy import PolicyError, parse_policy, read_policy_file


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
        name="research",
        quota={"ml.p5.48xlarge": 2, "ml.g6e.12xlarge": 8},
        strategy=Strategy.LEND_AND_BORROW,
        borrow_limit=100,
        in_share_preemption=True,
        fair_share_weight=30,
        gpu_hour_limit=(8000, "month"),
    )
    assert policy.priority_weight("urgent") == 90


def test_null_borrow_limit_with_lend_and_borrow_means_unlimited():
    document = {
        "version": 1,
        "organisation": "o",
        "priority_classes": [],
        "capacity_windows": [],
        "pools": [
            {
                "name": "p",
                "backend": "hyperpod_slurm",
                "capacity": {"ml.p5.48xlarge": 8},
                "shares": [
                    {
                        "name": "a",
                        "quota": {"ml.p5.48xlarge": 2},
                        "strategy": "lend_and_borrow",
                        "borrow_limit": None,
                        "in_share_preemption": False,
                        "fair_share_weight": 5,
                    }
                ],
            }
        ],
    }
    (share,) = parse_policy(document).pool("p").shares
    assert share.ceiling("ml.p5.48xlarge", 8) == 8


def test_every_problem_is_named_with_its_path():
    document = {
        "version": 2,
        "organisation": "o",
        "priority_classes": [{"name": "x", "weight": "high"}],
        "pools": [
            {
                "name": "p",
                "backend": "kubernetes",
                "capacity": {"ml.p5.48xlarge": 0},
                "shares": [
                    {"name": "a", "quota": {}, "strategy": "hoard", "borrow_limit": 10, "in_share_preemption": "yes"}
                ],
            }
        ],
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


OPENB = "benchmarks/openb-lend-and-borrow.yaml"


def _with_reclaim(settings: str):
    text = (
        Path(OPENB)
        .read_text(encoding="utf-8")
        .replace("      ml.g5.xlarge: 40\n", f"      ml.g5.xlarge: 40\n    reclaim: {settings}\n", 1)
    )
    return parse_config(text, "openb")


def test_a_pools_reclaim_settings_reach_the_planner_settings_through_the_policy():
    pool = parse_policy(
        compile_policy(
            _with_reclaim("{reborrow_backoff_seconds: 86400, borrow_horizon_seconds: 7200, grace_seconds: 300}")
        )
    ).pool("openb")
    base = Settings(min_run_time_s=120, max_preemptions_per_tick=5)
    assert pool.settings(base) == replace(base, reborrow_backoff_s=86_400, borrow_horizon_s=7_200, grace_s=300)
    # unset: the planner's defaults, stated in the document all the same
    default = compile_policy(_with_reclaim("{}"))["pools"][0]["reclaim"]
    assert default == {
        "reborrow_backoff_s": Settings().reborrow_backoff_s,
        "borrow_horizon_s": None,
        "grace_s": 0,
        "usage_half_life_s": None,
    }
    assert parse_policy(compile_policy(_with_reclaim("{}"))).pool("openb").settings(base) == base


@pytest.mark.parametrize(
    "fair_share, half_life_s",
    [("{by: usage, half_life_hours: 24}", 86_400), ("{by: usage}", 168 * 3600), ("{by: borrowed}", None), ("{}", None)],
)
def test_a_pools_fair_share_order_reaches_the_planner_settings(fair_share, half_life_s):
    pool = parse_policy(compile_policy(_with_reclaim(f"{{fair_share: {fair_share}}}"))).pool("openb")
    assert pool.settings().usage_half_life_s == half_life_s


def test_hyperpod_eks_pools_have_no_reclaim_settings_kueue_reclaims():
    model = load_model()
    eks = [p for p in compile_policy(model)["pools"] if p["backend"] == "hyperpod_eks"]
    assert eks and all("reclaim" not in p for p in eks)


@pytest.mark.parametrize(
    "settings, message",
    [
        ("{reborrow_backoff_seconds: -1}", "pools[0].reclaim.reborrow_backoff_seconds: invalid (-1) - at least 0"),
        ("{borrow_horizon_seconds: 0}", "pools[0].reclaim.borrow_horizon_seconds: invalid (0) - at least 60"),
        ("{reborrow_backoff_seconds: soon}", "pools[0].reclaim.reborrow_backoff_seconds:"),
        ("{backoff: 60}", "pools[0].reclaim.backoff: invalid (60) - not a known setting"),
        ("{grace_seconds: -1}", "pools[0].reclaim.grace_seconds: invalid (-1) - at least 0"),
        ("{grace_seconds: 3601}", "pools[0].reclaim.grace_seconds: invalid (3601) - at most 3600"),
        (
            "{fair_share: {by: past}}",
            "pools[0].reclaim.fair_share.by: invalid ('past') - allowed: 'borrowed' or 'usage'",
        ),
        (
            "{fair_share: {by: usage, half_life_hours: 0}}",
            "pools[0].reclaim.fair_share.half_life_hours: invalid (0) - at least 1",
        ),
        (
            "{fair_share: {by: usage, half_life_hours: 8761}}",
            "pools[0].reclaim.fair_share.half_life_hours: invalid (8761) - at most 8760",
        ),
        (
            "{fair_share: {half_life_hours: 24}}",
            "pools[0].reclaim.fair_share: invalid ({'half_life_hours': 24}) - half_life_hours (24) is read only with by: usage",
        ),
        (
            "{fair_share: {by: usage, decay: 7d}}",
            "pools[0].reclaim.fair_share.decay: invalid ('7d') - not a known setting",
        ),
    ],
)
def test_bad_reclaim_settings_in_the_governance_file_are_one_line_errors(settings, message):
    with pytest.raises(GovernanceError) as error:
        _with_reclaim(settings)
    lines = str(error.value).splitlines()
    assert any(line.startswith(message) for line in lines), lines


@pytest.mark.parametrize(
    "reclaim, message",
    [
        ({"reborrow_backoff_s": -5}, "pools[0].reclaim.reborrow_backoff_s: -5 - a finite number of seconds >= 0"),
        ({"reborrow_backoff_s": True}, "pools[0].reclaim.reborrow_backoff_s: True - a finite number of seconds >= 0"),
        ({"borrow_horizon_s": 0}, "pools[0].reclaim.borrow_horizon_s: 0 - a finite number of seconds > 0"),
        ({"borrow_horizon_s": float("inf")}, "pools[0].reclaim.borrow_horizon_s: inf - a finite number of seconds > 0"),
        ({"grace_s": -1}, "pools[0].reclaim.grace_s: -1 - a finite number of seconds >= 0"),
        ({"usage_half_life_s": 0}, "pools[0].reclaim.usage_half_life_s: 0 - a finite number of seconds > 0"),
        (
            [],
            "pools[0].reclaim: [] - an object with reborrow_backoff_s, borrow_horizon_s, grace_s and usage_half_life_s",
        ),
    ],
)
def test_bad_reclaim_settings_in_the_policy_document_are_named(reclaim, message):
    document = {
        "version": 1,
        "organisation": "o",
        "priority_classes": [],
        "capacity_windows": [],
        "pools": [
            {
                "name": "p",
                "backend": "hyperpod_slurm",
                "capacity": {"ml.p5.48xlarge": 1},
                "shares": [],
                "reclaim": reclaim,
            }
        ],
    }
    with pytest.raises(PolicyError) as error:
        parse_policy(document)
    assert message in str(error.value).splitlines()
