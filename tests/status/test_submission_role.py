"""`gpu-governance status` runs with the team's own submission role and needs nothing more: the
offline policy evaluation of the synthesized reference organisation allows each team's
submission role every call the Batch reader makes (constructs_lib.backends.batch_quota_share.status.BATCH_CALLS)
on the team's quota-share queues."""

from __future__ import annotations

import pytest

from constructs_lib.backends.batch_quota_share.status import BATCH_CALLS
from constructs_lib.model.loader import load_model
from gpu_governance_runtime.contract import team_training_plans_parameter
from tests.foundation.org import synthesize_reference
from tests.security.iam_eval import Principal, Request, load_assembly
from tests.security.tenants import read_organisation


@pytest.fixture(scope="module")
def organisation(tmp_path_factory):
    model = load_model(None)
    outdir = tmp_path_factory.mktemp("cdk.out")
    synthesize_reference(model, outdir, packs=False)
    return read_organisation(model, load_assembly(outdir))


def test_the_submission_role_may_make_every_call_status_makes(organisation):
    checked = 0
    for team in organisation.tenants.values():
        submit = Principal(arn=team.roles["submit"])
        for queue, _share in team.quota_shares:
            resources = {
                "batch:GetJobQueueSnapshot": queue,
                "batch:ListServiceJobs": "*",
                "batch:DescribeServiceJob": "*",
                "batch:ListQuotaShares": queue,
            }
            assert set(resources) == set(BATCH_CALLS)
            for action, resource in resources.items():
                assert organisation.world.is_allowed(Request(submit, action, resource)), (team.name, action)
                checked += 1
    assert checked >= 3 * len(BATCH_CALLS)  # every team of the reference organisation has a quota share


def test_the_submission_role_may_read_its_own_teams_training_plans_and_no_other(organisation):
    # status tells running jobs whether they are on the team's plan from this parameter (cli/status.py)
    model = load_model(None)
    capacity = model.capacity_account
    owners = sorted({w.team for w in model.capacity_windows if w.feeds.kind == "sagemaker_training_jobs"})
    assert owners, "the reference organisation has a window feeding training jobs"

    def plans(team):
        return f"arn:aws:ssm:{capacity.region}:{capacity.account_id}:parameter{team_training_plans_parameter(model.organisation, team)}"

    for name, team in organisation.tenants.items():
        submit = Principal(arn=team.roles["submit"])
        for owner in owners:
            assert organisation.world.is_allowed(Request(submit, "ssm:GetParameter", plans(owner))) == (
                owner == name
            ), (name, owner)
