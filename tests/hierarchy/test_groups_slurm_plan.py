"""A group's Slurm plan without a cluster: the parent account, its GPU cap, the teams under it, and
the grouped borrowers' caps that leave the group's limit in force (tests/slurm proves it on Slurm)."""

from __future__ import annotations

import pytest

from constructs_lib.backends.hyperpod_slurm.plan import slurm_plan
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime.slurm import (
    SlurmGroupAccount,
    SlurmPlan,
    render_apply_script,
)
from tests.slurm.models import GPUS_PER_NODE, INSTANCE_TYPE, POOL, model_data


def grouped(name: str = "ops", quota: int = 2) -> GovernanceModel:
    return GovernanceModel.from_dict(
        {
            **model_data(),
            "groups": [{"name": name, "teams": ["critical", "burst"], "quotas": {POOL: {INSTANCE_TYPE: quota}}}],
        }
    )


def test_the_group_is_a_parent_account_with_its_quota_in_gpus():
    plan = slurm_plan(grouped(), POOL)
    assert plan.group_accounts == (SlurmGroupAccount(name="ops", fairshare=50 + 20, grp_gpus=2 * GPUS_PER_NODE),)
    parents = {a.name: a.parent for a in plan.accounts}
    assert parents == {"critical": "ops", "steady": None, "burst": "ops"}


def test_a_grouped_borrower_is_capped_per_account_not_by_a_qos_grptres():
    qos = {q.name: q for q in slurm_plan(grouped(), POOL).qos}
    assert (qos["burst.borrow"].grp_gpus, qos["burst.borrow"].account_gpus) == (None, GPUS_PER_NODE)


def test_the_script_creates_the_parent_before_its_teams():
    lines = render_apply_script(slurm_plan(grouped(), POOL)).splitlines()
    parent = lines.index("gg_account ops acme-ml 70")
    assert lines[parent + 1] == f"gg_account_gpus ops {2 * GPUS_PER_NODE}"
    burst = next(i for i, line in enumerate(lines) if line.startswith("gg_account burst "))
    assert burst > parent and lines[burst].startswith("gg_account burst ops 20 ")
    assert f"gg_qos burst.borrow 0 '' 0 {GPUS_PER_NODE}" in lines


def test_a_group_named_like_the_organisation_is_refused_on_slurm():
    with pytest.raises(GovernanceError) as raised:
        grouped(name="acme-ml")
    assert any("groups[0].name" in str(p) and "reserved on Slurm" in str(p) for p in raised.value.problems)


def test_a_group_name_slurm_would_lower_case_is_refused():
    with pytest.raises(GovernanceError) as raised:
        grouped(name="Ops")
    assert any(
        "groups[0].name" in str(p) and "not a Slurm account name" in str(p) and "Ops" in str(p)
        for p in raised.value.problems
    )


def test_a_team_under_an_undeclared_parent_is_refused_by_the_plan():
    plan = slurm_plan(grouped(), POOL)
    with pytest.raises(ValueError, match="account ops"):
        SlurmPlan(**{**plan.__dict__, "group_accounts": ()})
