"""The cross-tenant proof: every role of every team asks for everything of every other team, on
the synthesized templates (identity, trust, key, bucket policies and SCPs, intrinsics resolved).

Expected: nothing, except the Describe/List reads that Batch cannot scope (docs/security.md
names them). Run on the reference organisation (with and without the guardrails SCP) and on a
generated one of 22 teams in 3 consumer accounts on every backend, one stack per team
(``stack_layout: per_team``, so the team stacks' Fn::ImportValue of the capacity stack's exports
are resolved too). One synthesis per organisation.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from constructs_lib.batch import TEAM_TAG
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import load_model
from tests.foundation.org import default_data, synthesize_reference
from tests.scale.generate import organisation as generated_organisation

from .iam_eval import Principal, Request, load_assembly
from .ownership import READINGS
from .tenants import (
    EKS_POD_IDENTITY,
    SAGEMAKER,
    TLS,
    Organisation,
    job_attack,
    log_streams,
    probes_against,
    read_organisation,
    secret_arn,
    training_job,
    training_job_arns,
)

ROOT = Path(__file__).resolve().parents[2]
UNSCOPABLE_READS = {
    "batch:DescribeServiceJob",
    "batch:ListServiceJobs",
    "batch:DescribeJobs",
    "batch:ListJobs",
    "sagemaker:ListTrainingJobs",
    "cloudwatch:GetMetricData",
    "logs:DescribeLogStreams",
}
GENERATED_TEAMS = 22
GENERATED_ACCOUNTS = 3


def synthesized(model: GovernanceModel, outdir: Path) -> Organisation:
    synthesize_reference(model, outdir, packs=False, cdk_json=True)  # as `make synth`: weak references between stacks
    return read_organisation(model, load_assembly(outdir))


def generated_model() -> GovernanceModel:
    """22 teams over 3 consumer accounts, each on one of two quota-share queues (Batch allows 20
    shares per queue), the fair-share queue, HyperPod EKS (so a pod identity role each) and
    HyperPod Slurm, one stack per team: tests/scale/generate.py's organisation."""
    return GovernanceModel.from_dict(generated_organisation(GENERATED_TEAMS, accounts=GENERATED_ACCOUNTS))


def with_guardrails() -> GovernanceModel:
    data = default_data()
    data["guardrails"] = {
        "management_account": {"account_id": "999988887777", "region": "us-east-1"},
        "target_ids": ["r-ab12"],
    }
    return GovernanceModel.from_dict(data)


@pytest.fixture(scope="module", params=["reference", "reference-with-guardrails", "generated"])
def organisation(request, tmp_path_factory):
    model = {"reference": load_model, "reference-with-guardrails": with_guardrails, "generated": generated_model}[
        request.param
    ]()
    org = synthesized(model, tmp_path_factory.mktemp(request.param))
    assert bool(org.world.scps) == (model.guardrails is not None)  # the SCP is read when deployed
    return model, org


def cross_tenant_requests(org: Organisation) -> list[tuple[str, str, str, str, bool]]:
    """(attacker team, attacker role kind, victim team, what, allowed) for every request asked."""
    asked = []
    for attacker in org.tenants.values():
        for kind, role in attacker.roles.items():
            principal, kind = Principal(arn=role), kind.partition(":")[0]
            for victim in org.tenants.values():
                if victim is attacker:
                    continue
                asked += [
                    (attacker.name, kind, victim.name, p.label, p.allowed(org.world, principal))
                    for p in probes_against(org, attacker.name, victim)
                ]
                asked += [
                    (attacker.name, kind, victim.name, attack, True)
                    for attack in job_attack(org, principal, attacker.name, victim)
                ]
    return asked


def on_hyperpod_eks(model: GovernanceModel) -> set[str]:
    pools = {p.name for p in model.pools if p.backend == "hyperpod_eks"}
    return {t.name for t in model.teams if pools & set(t.quotas)}


def test_organisation_has_the_roles_and_resources_the_proof_attacks(organisation):
    model, org = organisation
    if len(model.teams) == GENERATED_TEAMS:
        assert model.stack_layout == "per_team"
        assert len({a.account_id for a in model.consumer_accounts.values()}) == GENERATED_ACCOUNTS
        assert Counter(p.backend for p in model.pools) == {
            "batch_quota_share": 2,
            "batch_fair_share": 1,
            "hyperpod_eks": 1,
            "hyperpod_slurm": 1,
        }
    else:
        assert len(org.tenants) == 3 and len({a.account_id for a in model.consumer_accounts.values()}) >= 2
    assert on_hyperpod_eks(model) == set(org.tenants)  # every team has a pod identity role to attack with and to attack
    for tenant in org.tenants.values():
        assert {"submit", "training", "pods"} <= set(tenant.roles), tenant.name
        assert (
            tenant.key and tenant.bucket and tenant.quota_shares and tenant.fair_share_queues and tenant.pod_sessions
        ), tenant.name
        assert tenant.repository and tenant.parameters, tenant.name  # the member journey's resources, attacked too


def test_no_team_reaches_another_except_unscopable_reads(organisation):
    _, org = organisation
    asked = cross_tenant_requests(org)
    # Every kind of role attacks, and the pod identity role is attacked (assume and pass) too.
    assert {kind for _, kind, *_ in asked} == {"submit", "training", "pods", "member"}
    assert {label for *_, label, _ in asked} >= {
        "assume pods role",
        "pass pods role to pods.eks.amazonaws.com",
        "images ecr:BatchGetImage",
        "discovery ssm:GetParameter",
        "secret secretsmanager:GetSecretValue",
        "training job sagemaker:StopTrainingJob",
        "training logs logs:GetLogEvents",
    }
    allows = [a for a in asked if a[4]]
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
        # What the team's tooling sends (the discovery document's submission_tags): team and cost centre.
        own_tag = {
            **{f"aws:RequestTag/{k}": [v] for k, v in team.submission_tags.items()},
            "aws:TagKeys": list(team.submission_tags),
        }
        for queue, share in team.quota_shares:
            new = f"arn:aws:batch:{capacity.region}:{capacity.account}:service-job/new"
            assert all(
                world.is_allowed(Request(submit, "batch:SubmitServiceJob", r, own_tag)) for r in (queue, share, new)
            )
            # Tags at creation: Batch authorises them inside SubmitServiceJob, whichever way it builds that context.
            for reading in READINGS:
                context = reading.tagging(team.submission_tags, {"batch:SchedulingPriority": "50"})
                assert world.is_allowed(Request(submit, "batch:TagResource", new, context)), reading
        for queue in team.fair_share_queues:
            definition = f"arn:aws:batch:{capacity.region}:{capacity.account}:job-definition/{team.name}-train:3"
            context = {**own_tag, "batch:ShareIdentifier": [team.name]}
            assert world.is_allowed(Request(submit, "batch:SubmitJob", queue, context))
            assert world.is_allowed(
                Request(submit, "batch:SubmitJob", definition, {**context, f"aws:ResourceTag/{TEAM_TAG}": [team.name]})
            )
        for kind, action in (
            ("service-job", "batch:TerminateServiceJob"),
            ("service-job", "batch:UpdateServiceJob"),
            ("job", "batch:CancelJob"),
        ):
            job = f"arn:aws:batch:{capacity.region}:{capacity.account}:{kind}/mine"
            assert world.is_allowed(Request(submit, action, job, {f"aws:ResourceTag/{TEAM_TAG}": [team.name]}))
        assert world.is_allowed(
            Request(
                submit, "iam:PassRole", team.roles["training"], {"iam:PassedToService": ["sagemaker.amazonaws.com"]}
            )
        )
        for principal in (submit, training, Principal(arn=team.roles["pods"])):
            assert world.is_allowed(Request(principal, "s3:GetObject", f"arn:aws:s3:::{team.bucket}/data/x", TLS))
            assert world.is_allowed(Request(principal, "kms:Decrypt", team.key))
        for stream in log_streams(capacity, team.name):
            assert world.is_allowed(Request(training, "logs:PutLogEvents", stream))
        for kind, member in team.roles.items():
            if kind.startswith("member:"):
                assert world.is_allowed(Request(Principal(arn=member), "sts:AssumeRole", team.roles["submit"]))


def member_journey(org: Organisation, team) -> list[tuple[str, str, Request]]:
    """(step, role kind, request) of a member's whole journey on the team's own resources: find
    the team's settings, push and pull its image, run (SageMaker as the execution role: pull,
    log, checkpoint, read a secret), watch, read the logs and metrics, stop."""
    capacity = org.capacity
    submit, training = Principal(arn=team.roles["submit"]), Principal(arn=team.roles["training"])
    checkpoint = f"arn:aws:s3:::{team.bucket}/checkpoints/run-1/step-100.pt"
    secret = secret_arn(capacity, org.organisation, team.name)
    steps = [
        ("discover", "submit", Request(submit, action, p))
        for p in team.parameters
        for action in ("ssm:GetParameter", "ssm:GetParameters")
    ]
    steps += [
        ("discover by path", "submit", Request(submit, "ssm:GetParametersByPath", team.parameters[0].rsplit("/", 1)[0]))
    ]
    steps += [
        ("registry login", kind, Request(p, "ecr:GetAuthorizationToken", "*"))
        for kind, p in (("submit", submit), ("training", training))
    ]
    steps += [
        ("push image", "submit", Request(submit, a, team.repository))
        for a in ("ecr:InitiateLayerUpload", "ecr:UploadLayerPart", "ecr:CompleteLayerUpload", "ecr:PutImage")
    ]
    steps += [
        ("pull image", kind, Request(p, a, team.repository))
        for kind, p in (("submit", submit), ("training", training))
        for a in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability")
    ]
    steps += [
        (
            "keep a secret",
            "submit",
            Request(submit, "secretsmanager:CreateSecret", secret, {"secretsmanager:KmsKeyArn": [team.key]}),
        ),
        ("keep a secret", "submit", Request(submit, "secretsmanager:PutSecretValue", secret)),
        ("keep a secret", "submit", Request(submit, "kms:GenerateDataKey", team.key)),
    ]
    steps += [
        ("read a secret", kind, Request(p, "secretsmanager:GetSecretValue", secret))
        for kind, p in (("submit", submit), ("training", training))
    ]
    steps += [
        ("read a secret", kind, Request(p, "kms:Decrypt", team.key))
        for kind, p in (("submit", submit), ("training", training))
    ]
    steps += [
        ("checkpoint", "training", Request(training, a, checkpoint, TLS)) for a in ("s3:PutObject", "s3:GetObject")
    ]
    steps += [("read checkpoints", "submit", Request(submit, "s3:GetObject", checkpoint, TLS))]
    steps += [
        ("write logs", "training", Request(training, a, s))
        for s in log_streams(capacity, team.name)
        for a in ("logs:CreateLogStream", "logs:PutLogEvents")
    ]
    steps += [
        ("watch", "submit", Request(submit, a, job))
        for job in training_job_arns(capacity, team.name)
        for a in ("sagemaker:DescribeTrainingJob", "sagemaker:StopTrainingJob")
    ]
    steps += [
        ("watch", "submit", Request(submit, a, "*"))
        for a in (
            "sagemaker:ListTrainingJobs",
            "cloudwatch:GetMetricData",
            "cloudwatch:GetMetricStatistics",
            "cloudwatch:ListMetrics",
            "batch:DescribeServiceJob",
            "batch:ListServiceJobs",
        )
    ]
    steps += [
        ("read logs", "submit", Request(submit, "logs:GetLogEvents", s)) for s in log_streams(capacity, team.name)
    ]
    return steps


def test_each_member_journey_is_allowed_on_the_teams_own_resources(organisation):
    """Discover, push, submit (test_each_team_can_still_do_its_own_work), run, watch, read logs
    and metrics, stop: every step allowed for the team's own resources. The same requests
    against every other team's resources are probes_against's, denied above."""
    model, org = organisation
    for team in org.tenants.values():
        assert team.repository and len(team.parameters) == len(
            next(t for t in model.teams if t.name == team.name).quotas
        ), team.name
        refused = [
            (step, kind, r.action, r.resource)
            for step, kind, r in member_journey(org, team)
            if not org.world.is_allowed(r)
        ]
        assert refused == [], f"{team.name}: {refused[:6]}"


def test_a_team_creates_secrets_only_with_its_own_key(organisation):
    """CreateSecret needs the team's key (ARN or alias): a secret left on the account's default
    key would be readable by any role of the account that IAM lets read it."""
    _, org = organisation
    for team in org.tenants.values():
        submit, secret = Principal(arn=team.roles["submit"]), secret_arn(org.capacity, org.organisation, team.name)
        alias = f"arn:aws:kms:{org.capacity.region}:{org.capacity.account}:alias/{org.organisation}/{team.name}"
        assert all(
            org.world.is_allowed(
                Request(submit, "secretsmanager:CreateSecret", secret, {"secretsmanager:KmsKeyArn": [k]})
            )
            for k in (team.key, alias)
        )
        default_key = f"arn:aws:kms:{org.capacity.region}:{org.capacity.account}:alias/aws/secretsmanager"
        assert not org.world.is_allowed(
            Request(submit, "secretsmanager:CreateSecret", secret, {"secretsmanager:KmsKeyArn": [default_key]})
        )
        assert not org.world.is_allowed(Request(submit, "secretsmanager:CreateSecret", secret))


def test_sagemaker_runs_a_team_role_only_for_jobs_named_after_the_team(organisation):
    _, org = organisation
    for victim in org.tenants.values():
        role = victim.roles["training"]
        assert org.world.is_allowed(
            Request(SAGEMAKER, "sts:AssumeRole", role, training_job(org.capacity, f"{victim.name}-train"))
        )
        assert org.world.is_allowed(
            Request(SAGEMAKER, "sts:AssumeRole", role, training_job(org.capacity, f"AWSBatch{victim.name}-train"))
        )
        for attacker in org.tenants.values():
            if attacker is not victim:
                assert not org.world.is_allowed(
                    Request(SAGEMAKER, "sts:AssumeRole", role, training_job(org.capacity, f"{attacker.name}-train"))
                )


def test_eks_gives_a_team_pod_role_only_to_pods_of_the_team_namespace(organisation):
    """A pod identity association in another team's namespace (a cluster admin's slip, or one
    made through a lent node's credentials) still cannot assume the role: the trust policy pins
    the session tags EKS sets."""
    _, org = organisation
    for victim in org.tenants.values():
        role = victim.roles["pods"]
        assert all(
            org.world.is_allowed(Request(EKS_POD_IDENTITY, "sts:AssumeRole", role, s)) for s in victim.pod_sessions
        )
        for attacker in org.tenants.values():
            if attacker is not victim:
                assert not any(
                    org.world.is_allowed(Request(EKS_POD_IDENTITY, "sts:AssumeRole", role, s))
                    for s in attacker.pod_sessions
                )


def test_docs_name_every_read_that_remains():
    docs = (ROOT / "docs" / "security.md").read_text()
    assert all(f"`{action}`" in docs for action in UNSCOPABLE_READS)
