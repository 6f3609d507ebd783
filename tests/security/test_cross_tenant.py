"""The cross-tenant proof: every role of every team asks for everything of every other team, on
the synthesized templates (identity, trust, key, bucket policies and SCPs, intrinsics resolved).

Expected: nothing, except the Describe/List reads that Batch cannot scope (docs/security.md
names them). Run on the reference organisation (with and without the guardrails SCP) and on a
generated one of 22 teams in 3 accounts.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from aws_cdk import App

from constructs_lib.batch import TEAM_TAG
from constructs_lib.loader import load_model
from constructs_lib.model import GovernanceModel
from stacks import build_reference_app

from tests.foundation.org import default_data
from .iam_eval import Principal, Request, load_assembly
from .tenants import SAGEMAKER, TLS, Organisation, job_attack, log_streams, probes_against, read_organisation, training_job

ROOT = Path(__file__).resolve().parents[2]
UNSCOPABLE_READS = {"batch:DescribeServiceJob", "batch:ListServiceJobs", "batch:DescribeJobs", "batch:ListJobs"}
GENERATED_TEAMS = 22


def synthesized(model: GovernanceModel, outdir: Path) -> Organisation:
    app = App(outdir=str(outdir))
    build_reference_app(app, model)
    app.synth()
    return read_organisation(model, load_assembly(outdir))


def generated_model() -> GovernanceModel:
    """22 teams over 3 consumer accounts, on two quota-share queues (Batch allows 20 shares per
    queue) and one fair-share queue. Without HyperPod pools: with every backend the capacity
    stack passes CloudFormation's 500 resources at about 21 teams (fixed separately)."""
    data = default_data()
    template = copy.deepcopy(data["teams"][0])
    template.pop("kubernetes", None)
    accounts = {"research": "444455556666", "product": "777788889999", "platform": "123412341234"}
    data["consumer_accounts"]["platform"] = {"account_id": accounts["platform"], "region": "eu-west-1"}
    halves = ("sagemaker-a", "sagemaker-b")
    per_half = GENERATED_TEAMS // 2
    data["pools"] = [
        *({"name": name, "backend": "batch_quota_share", "capacity": {"ml.g6e.12xlarge": per_half}} for name in halves),
        {"name": "ec2-gpu", "backend": "batch_fair_share", "capacity": {"g6e.12xlarge": GENERATED_TEAMS},
         "compute_environments": ["arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-g6e"]},
    ]
    data.pop("capacity_windows", None)
    data["teams"] = []
    for index in range(GENERATED_TEAMS):
        account = list(accounts)[index % 3]
        team = copy.deepcopy(template)
        team.update(
            name=f"team-{index:02d}", account=account,
            members=[f"arn:aws:iam::{accounts[account]}:role/ml/Team{index:02d}Scientists"],
            quotas={halves[index % 2]: {"ml.g6e.12xlarge": 1}, "ec2-gpu": {"g6e.12xlarge": 1}},
        )
        data["teams"].append(team)
    return GovernanceModel.from_dict(data)


def with_guardrails() -> GovernanceModel:
    data = default_data()
    data["guardrails"] = {"management_account": {"account_id": "999988887777", "region": "us-east-1"}, "target_ids": ["r-ab12"]}
    return GovernanceModel.from_dict(data)


@pytest.fixture(scope="module", params=["reference", "reference-with-guardrails", "generated"])
def organisation(request, tmp_path_factory):
    model = {"reference": load_model, "reference-with-guardrails": with_guardrails, "generated": generated_model}[request.param]()
    org = synthesized(model, tmp_path_factory.mktemp(request.param))
    assert bool(org.world.scps) == (model.guardrails is not None)  # the SCP is read when deployed
    return model, org


def cross_tenant_allows(org: Organisation) -> list[tuple[str, str, str, str]]:
    """(attacker team, attacker role, victim team, what) for every request that is allowed."""
    found = []
    for attacker in org.tenants.values():
        for kind, role in attacker.roles.items():
            principal = Principal(arn=role)
            for victim in org.tenants.values():
                if victim is attacker:
                    continue
                found += [(attacker.name, kind, victim.name, p.label) for p in probes_against(org, attacker.name, victim) if p.allowed(org.world, principal)]
                found += [(attacker.name, kind, victim.name, attack) for attack in job_attack(org, principal, attacker.name, victim)]
    return found


def test_organisation_has_the_roles_and_resources_the_proof_attacks(organisation):
    model, org = organisation
    assert len(org.tenants) >= (3 if len(model.teams) == 3 else 20)
    assert len({a.account_id for a in model.consumer_accounts.values()}) >= 2
    for tenant in org.tenants.values():
        assert {"submit", "training"} <= set(tenant.roles), tenant.name
        assert tenant.key and tenant.bucket and tenant.quota_shares and tenant.fair_share_queues, tenant.name
    assert any("pods" in t.roles for t in org.tenants.values()) == (len(model.teams) == 3)  # HyperPod only in the reference


def test_no_team_reaches_another_except_unscopable_reads(organisation):
    _, org = organisation
    allows = cross_tenant_allows(org)
    unexpected = [a for a in allows if not a[3].startswith("read ")]
    assert unexpected == [], f"{len(unexpected)} cross-tenant allows, e.g. {unexpected[:8]}"
    reads = {a[3].removeprefix("read ") for a in allows}
    assert reads <= UNSCOPABLE_READS
    assert reads, "the proof should see the documented reads: the evaluator would be blind otherwise"


def test_each_team_can_still_do_its_own_work(organisation):
    _, org = organisation
    world, capacity = org.world, org.capacity
    for team in org.tenants.values():
        submit, training = Principal(arn=team.roles["submit"]), Principal(arn=team.roles["training"])
        own_tag = {f"aws:RequestTag/{TEAM_TAG}": [team.name], "aws:TagKeys": [TEAM_TAG]}
        for queue, share in team.quota_shares:
            new = f"arn:aws:batch:{capacity.region}:{capacity.account}:service-job/new"
            assert all(world.is_allowed(Request(submit, "batch:SubmitServiceJob", r, own_tag)) for r in (queue, share, new))
            assert world.is_allowed(Request(submit, "batch:TagResource", new, own_tag))  # tags at creation
        for queue in team.fair_share_queues:
            definition = f"arn:aws:batch:{capacity.region}:{capacity.account}:job-definition/{team.name}-train:3"
            context = {**own_tag, "batch:ShareIdentifier": [team.name]}
            assert world.is_allowed(Request(submit, "batch:SubmitJob", queue, context))
            assert world.is_allowed(Request(submit, "batch:SubmitJob", definition, {**context, f"aws:ResourceTag/{TEAM_TAG}": [team.name]}))
        for kind, action in (("service-job", "batch:TerminateServiceJob"), ("service-job", "batch:UpdateServiceJob"), ("job", "batch:CancelJob")):
            job = f"arn:aws:batch:{capacity.region}:{capacity.account}:{kind}/mine"
            assert world.is_allowed(Request(submit, action, job, {f"aws:ResourceTag/{TEAM_TAG}": [team.name]}))
        assert world.is_allowed(Request(submit, "iam:PassRole", team.roles["training"], {"iam:PassedToService": ["sagemaker.amazonaws.com"]}))
        for principal in (submit, training):
            assert world.is_allowed(Request(principal, "s3:GetObject", f"arn:aws:s3:::{team.bucket}/data/x", TLS))
            assert world.is_allowed(Request(principal, "kms:Decrypt", team.key))
        for stream in log_streams(capacity, team.name):
            assert world.is_allowed(Request(training, "logs:PutLogEvents", stream))
        for kind, member in team.roles.items():
            if kind.startswith("member:"):
                assert world.is_allowed(Request(Principal(arn=member), "sts:AssumeRole", team.roles["submit"]))


def test_sagemaker_runs_a_team_role_only_for_jobs_named_after_the_team(organisation):
    _, org = organisation
    for victim in org.tenants.values():
        role = victim.roles["training"]
        assert org.world.is_allowed(Request(SAGEMAKER, "sts:AssumeRole", role, training_job(org.capacity, f"{victim.name}-train")))
        assert org.world.is_allowed(Request(SAGEMAKER, "sts:AssumeRole", role, training_job(org.capacity, f"AWSBatch{victim.name}-train")))
        for attacker in org.tenants.values():
            if attacker is not victim:
                assert not org.world.is_allowed(Request(SAGEMAKER, "sts:AssumeRole", role, training_job(org.capacity, f"{attacker.name}-train")))


def test_docs_name_every_read_that_remains():
    docs = (ROOT / "docs" / "security.md").read_text()
    assert all(f"`{action}`" in docs for action in UNSCOPABLE_READS)
