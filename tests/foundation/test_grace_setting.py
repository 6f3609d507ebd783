"""A pool's grace before preemption (issue 28): validated, compiled for the controller, and named
in one `validate` line where the backend cannot give it."""

from __future__ import annotations

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime.policy import parse_policy

from .org import default_data


def with_grace(grace) -> GovernanceModel:
    data = default_data()
    for pool in data["pools"]:
        if pool["backend"] != "hyperpod_eks":  # Kueue reclaims there: the pool takes no reclaim settings
            pool["reclaim"] = {"grace_seconds": grace}
    return GovernanceModel.from_dict(data)


def test_the_grace_reaches_the_controllers_settings():
    policy = parse_policy(compile_policy(with_grace(300)))
    assert {pool.name: pool.settings().grace_s for pool in policy.pools if pool.backend != "hyperpod_eks"} == {
        "sagemaker-training": 300,
        "ec2-gpu": 300,
        "hyperpod-slurm": 300,
    }


@pytest.mark.parametrize(
    "grace, expected",
    [
        (-1, "reclaim.grace_seconds: invalid (-1) - at least 0"),
        (3_601, "reclaim.grace_seconds: invalid (3601) - at most 3600"),
        ("soon", "reclaim.grace_seconds: invalid ('soon')"),
    ],
)
def test_a_bad_grace_is_refused_naming_field_value_and_range(grace, expected):
    with pytest.raises(GovernanceError) as error:
        with_grace(grace)
    assert expected in str(error.value)


def test_only_the_quota_share_pool_says_it_cannot_give_a_grace():
    lines = [line for line in caveats(with_grace(120)) if "grace_seconds" in line]
    assert len(lines) == 1
    assert lines[0].startswith(
        "pools[0].reclaim.grace_seconds: not enforced on pool sagemaker-training (batch_quota_share): "
    )
    assert not [line for line in caveats(with_grace(0)) if "grace_seconds" in line]


def test_slurm_gives_the_grace_to_every_qos_another_may_preempt_and_only_to_those():
    from constructs_lib.slurm import slurm_plan
    from gpu_governance_runtime.slurm import render_apply_script

    plan = slurm_plan(with_grace(300), "hyperpod-slurm")
    preempted = {name for q in plan.qos for name in q.preempts}
    assert preempted  # the reference organisation lends and borrows there
    assert {q.name: q.grace_time_s for q in plan.qos} == {q.name: 300 if q.name in preempted else 0 for q in plan.qos}
    script = render_apply_script(plan)
    borrow = next(q for q in plan.qos if q.name.endswith(".borrow"))
    assert f"gg_qos {borrow.name} 0 {borrow.grp_gpus if borrow.grp_gpus is not None else chr(39) * 2} 300" in script
