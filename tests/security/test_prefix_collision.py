"""Teams ``research`` and ``research-x``: a name-prefix scope of one covers the other's names.

The loader refuses such a pair (training-job names and log streams are scoped by prefix, and
have no tags). Apps that build the constructs directly skip the loader, so Batch job definitions
are authorised by the team tag as well: research cannot submit with research-x's definition."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from aws_cdk import App, Environment, Stack, aws_s3 as s3

from constructs_lib.batch import FairShareJobQueue
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import BatchFairSharePool, GovernanceModel, Team
from constructs_lib.tenancy import TeamTenancy
from tests.foundation.org import default_data

from .iam_eval import Principal, load_assembly
from .tenants import probes_against, read_organisation

CAPACITY = SimpleNamespace(account_id="111122223333", region="us-east-1")


def test_loader_refuses_a_team_name_that_extends_another():
    data = default_data()
    extended = copy.deepcopy(data["teams"][0])
    extended["name"] = "Research-X"  # case does not help either
    data["teams"].append(extended)
    with pytest.raises(
        GovernanceError,
        match=r"teams\[3\]\.name: its training jobs and their log streams scope 'Research-X-\*' overlaps team research's 'research-\*' \('Research-X'\)",
    ):
        GovernanceModel.from_dict(data)


@pytest.mark.parametrize("name", ["AWSBatchresearch", "awsbatchRESEARCH"])
def test_loader_refuses_a_team_named_after_batchs_prefix_and_another_team(name):
    """Finding 4: Batch names a service job's training job AWSBatch<payload name>, so team
    AWSBatchresearch's scope AWSBatchresearch-* covers research's Batch-run jobs and their logs."""
    data = default_data()
    other = copy.deepcopy(data["teams"][0])
    other.update(
        name=name,
        quotas={k: v for k, v in other["quotas"].items() if not k.startswith("hyperpod")},
        members=other["members"],
    )
    other.pop("kubernetes", None)
    data["teams"].append(other)
    with pytest.raises(
        GovernanceError,
        match=rf"teams\[3\]\.name: its training jobs and their log streams scope '{name}-\*' overlaps team research's 'AWSBatchresearch-\*'",
    ):
        GovernanceModel.from_dict(data)


@pytest.fixture(scope="module")
def colliding(tmp_path_factory):
    template = {
        k: v for k, v in default_data()["teams"][0].items() if k not in ("kubernetes", "quotas", "permission_sets")
    }
    teams = [
        Team(**{**template, "name": name, "quotas": {"ec2-gpu": {"g6e.12xlarge": 1}}})
        for name in ("research", "research-x")
    ]
    pool = BatchFairSharePool(
        name="ec2-gpu",
        capacity={"g6e.12xlarge": 2},
        compute_environments=["arn:aws:batch:us-east-1:111122223333:compute-environment/gpu"],
    )
    outdir = tmp_path_factory.mktemp("collision")
    app = App(outdir=str(outdir))
    stack = Stack(app, "capacity", env=Environment(account=CAPACITY.account_id, region=CAPACITY.region))
    logs = s3.Bucket(stack, "Logs")
    queue = FairShareJobQueue(stack, "Queue", pool=pool, teams=teams)
    for team in teams:
        TeamTenancy(
            stack, f"Team{team.name}", team=team, organisation="acme", platform_admins=[], access_log_bucket=logs
        ).allow_submission(queue)
    app.synth()
    model = SimpleNamespace(
        teams=teams, organisation="acme", capacity_account=CAPACITY, consumer_accounts={}, guardrails=None
    )
    return read_organisation(model, load_assembly(outdir))


def test_research_cannot_submit_with_research_x_job_definition(colliding):
    victim = colliding.tenants["research-x"]
    submitter = Principal(arn=colliding.tenants["research"].roles["submit"])
    submissions = [p for p in probes_against(colliding, "research", victim) if p.action == "batch:SubmitJob"]
    assert submissions and not any(p.allowed(colliding.world, submitter) for p in submissions)
    # ... while research-x itself still may (the probe is not blind).
    owner = Principal(arn=victim.roles["submit"])
    own = [p for p in probes_against(colliding, "research-x", victim) if p.action == "batch:SubmitJob"]
    assert any(p.allowed(colliding.world, owner) for p in own)
