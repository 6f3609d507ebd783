"""A pool's fair-share order (issue 43 item 2): `explain` says how a borrowing team's turn is
decided where the pool orders by decayed usage, and `validate` names the pool where it is not applied."""

from __future__ import annotations

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats, deals

from .org import default_data


def with_fair_share(fair_share: dict) -> GovernanceModel:
    data = default_data()
    for team in data["teams"]:  # on Slurm, usage that decays and a GPU-hour limit exclude each other
        team.pop("gpu_hour_limit", None)
    for pool in data["pools"]:
        if pool["backend"] != "hyperpod_eks":  # Kueue orders borrowers there: the pool takes no reclaim settings
            pool["reclaim"] = {"fair_share": fair_share}
    return GovernanceModel.from_dict(data)


def fair_share_of(model: GovernanceModel) -> dict[tuple[str, str], str]:
    return {(d.team, d.pool): d.fair_share for d in deals(model)}


def test_explain_says_how_a_borrowers_turn_is_decided_and_where_it_is_not_applied():
    shown = fair_share_of(with_fair_share({"by": "usage", "half_life_hours": 72}))
    assert shown["research", "ec2-gpu"] == (
        "by usage: its instance-hours decayed with a 72 h half-life, per fair_share_weight 30; "
        "the least borrows first, the most is reclaimed from first"
    )
    assert shown["research", "hyperpod-slurm"] == shown["research", "ec2-gpu"]
    assert shown["research", "sagemaker-training"].endswith("(not applied here)")
    assert shown["research", "hyperpod-eks"] == "-"  # Kueue's own fair sharing
    assert shown["production", "ec2-gpu"] == "-"  # never borrows: nothing to order
    assert set(fair_share_of(with_fair_share({"by": "borrowed"})).values()) == {"-"}


def test_validate_names_the_batch_pools_where_the_controllers_order_is_not_the_whole_story():
    lines = [line for line in caveats(with_fair_share({"by": "usage"})) if line.startswith("pools[")]
    assert lines == [
        "pools[0].reclaim.fair_share: by usage is not applied on pool sagemaker-training (batch_quota_share): "
        "the reclaim controller only observes a quota-share queue, whose own order decides who borrows and who is "
        "reclaimed; `simulate` replays the order all the same",
        "pools[1].reclaim.fair_share: by usage orders the teams a reclaim takes from on pool ec2-gpu "
        "(batch_fair_share); Batch, not the reclaim controller, starts jobs there, in its own fair-share order, "
        "which decays usage over the pool's share_decay_seconds",
    ]
    assert not [line for line in caveats(with_fair_share({"by": "borrowed"})) if line.startswith("pools[")]


def test_slurm_decays_its_own_fair_share_usage_with_the_pools_half_life():
    from constructs_lib.slurm import slurm_plan
    from gpu_governance_runtime.slurm import render_apply_script

    plan = slurm_plan(with_fair_share({"by": "usage", "half_life_hours": 36}), "hyperpod-slurm")
    assert plan.decay_half_life == "1-12"
    assert "gg_setting PriorityDecayHalfLife 1-12" in render_apply_script(plan)
    assert slurm_plan(with_fair_share({"by": "usage"}), "hyperpod-slurm").decay_half_life == "7-0"
    unset = slurm_plan(with_fair_share({"by": "borrowed"}), "hyperpod-slurm")
    assert unset.decay_half_life is None and "PriorityDecayHalfLife" not in render_apply_script(unset)


def test_usage_order_and_a_gpu_hour_limit_on_one_slurm_pool_are_refused():
    data = default_data()
    slurm = next(p for p in data["pools"] if p["backend"] == "hyperpod_slurm")
    slurm["reclaim"] = {"fair_share": {"by": "usage"}}
    assert data["teams"][0]["gpu_hour_limit"]  # the reference's research team has one
    with pytest.raises(GovernanceError) as error:
        GovernanceModel.from_dict(data)
    assert (
        "pools[3].reclaim.fair_share.by: usage decays on Slurm pool hyperpod-slurm, where team research's GPU-hour "
        "limit needs usage kept until its period ends (PriorityDecayHalfLife=0; the cluster has one setting for all "
        "accounts) ('usage') - borrowed, or no gpu_hour_limit on the pool's teams"
    ) in str(error.value)
