"""The proof over all requests (prover.py), on the templates `make synth` writes (cdk.json's
context: per_team stacks read the capacity stack through Fn::GetStackOutput): for every role of
every team, no request with any action, resource and condition-key values is allowed on anything
that belongs to another team (ownership.py), and each team still reaches its own things.

Organisations: the reference, the reference with guardrails (an SCP) and two Unified Studio
projects, and a generated one of 22 teams in 3 consumer accounts, one stack per team, on every
backend. One synthesis each. The evaluator (iam_eval) is the second opinion: both must agree.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from cvc5 import Kind

from constructs_lib.batch import TEAM_TAG
from constructs_lib.model import GovernanceModel, team_name_scopes
from constructs_lib.model.loader import load_model
from gpu_governance_runtime.contract import PLATFORM_TAG_KEYS, TAG_COST_CENTRE
from tests.foundation.org import synthesize_reference
from tests.scale.generate import organisation as generated_organisation

from .iam_eval import Principal, Request, load_assembly
from .prover import Prover, name_overlap, principals_of
from .tenants import TLS, Organisation, log_streams, probes_against, read_organisation, secret_arn, training_job_arns
from .test_cross_tenant import GENERATED_ACCOUNTS, GENERATED_TEAMS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

ORGANISATIONS = ("reference", "reference-with-guardrails-and-projects", "generated")


def reference_with_guardrails_and_projects() -> GovernanceModel:
    data = yaml.safe_load((EXAMPLES / "org-projects.yaml").read_text())
    data["guardrails"] = {
        "management_account": {"account_id": "999988887777", "region": "us-east-1"},
        "target_ids": ["r-ab12"],
    }
    return GovernanceModel.from_dict(data)


MODELS = {
    "reference": load_model,
    "reference-with-guardrails-and-projects": reference_with_guardrails_and_projects,
    "generated": lambda: GovernanceModel.from_dict(
        generated_organisation(GENERATED_TEAMS, accounts=GENERATED_ACCOUNTS)
    ),
}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    """name -> (model, organisation, prover), synthesized once, on first use."""
    cache: dict[str, tuple[GovernanceModel, Organisation, Prover]] = {}

    def get(name: str):
        if name not in cache:
            model = MODELS[name]()
            outdir = tmp_path_factory.mktemp(name)
            synthesize_reference(model, outdir, packs=False, cdk_json=True)
            org = read_organisation(model, load_assembly(outdir))
            cache[name] = (model, org, Prover(org))
        return cache[name]

    return get


@pytest.fixture(params=ORGANISATIONS)
def organisation(request, synthesized):
    return synthesized(request.param)


def test_the_templates_are_those_make_synth_writes(synthesized):
    model, org, prover = synthesized("generated")
    assert model.stack_layout == "per_team" and len(org.tenants) == GENERATED_TEAMS
    assert {p.backend for p in model.pools} == {
        "batch_quota_share",
        "batch_fair_share",
        "hyperpod_eks",
        "hyperpod_slurm",
    }
    _, with_projects, _ = synthesized("reference-with-guardrails-and-projects")
    assert with_projects.world.scps and len(with_projects.tenants) == 3
    # Every team's roles and things are there to attack and to reach (the proof is not blind).
    for tenant in org.tenants.values():
        owned = {o.kind for o in prover.ownership()[tenant.name]}
        assert owned >= {
            "key",
            "bucket",
            "quota share",
            "role",
            "secret",
            "discovery and training-plan parameters",
            "training job",
            "training log stream",
            "image repository",
            "access-log prefix",
        }, tenant.name


def test_no_request_of_any_role_reaches_what_belongs_to_another_team(organisation):
    _, org, prover = organisation
    before = len(prover.answers)
    witnesses = []
    for team, principal in principals_of(org):
        witnesses += [(team, a.witness) for a in prover.cross_tenant(principal, team) if a.satisfiable]
    asked = prover.answers[before:]
    print(
        f"\n{len(org.tenants)} teams: {len(asked)} queries, {sum(a.seconds for a in asked):.2f} s solving, worst {max(a.seconds for a in asked):.3f} s"
    )
    assert {kind.partition(":")[0] for t in org.tenants.values() for kind in t.roles} == {
        "submit",
        "training",
        "pods",
        "member",
    }
    assert witnesses == [], f"{len(witnesses)} cross-team requests allowed, e.g. {witnesses[:3]}"
    # Each witness-free answer is the evaluator's too: the requests it asks are denied there.
    for team, principal in principals_of(org)[:4]:
        for victim in org.tenants.values():
            if victim.name != team:
                assert not any(
                    p.allowed(org.world, principal)
                    for p in probes_against(org, team, victim)
                    if not p.label.startswith("read ")
                )


def own_requests(org: Organisation, team: str) -> list[tuple[str, str, str, dict, bool]]:
    """(role kind, action, resource, fixed condition keys, creating) a team's own work needs."""
    tenant, capacity = org.tenants[team], org.capacity
    new_service_job = f"arn:aws:batch:{capacity.region}:{capacity.account}:service-job/new"
    new_job = f"arn:aws:batch:{capacity.region}:{capacity.account}:job/new"
    own_tags = {f"aws:RequestTag/{k}": v for k, v in tenant.submission_tags.items()}
    requests = [
        ("submit", "kms:Decrypt", tenant.key, {}, False),
        ("training", "kms:GenerateDataKey", tenant.key, {}, False),
        ("pods", "s3:GetObject", f"arn:aws:s3:::{tenant.bucket}/data/x", {}, False),
        ("training", "s3:PutObject", f"arn:aws:s3:::{tenant.bucket}/checkpoints/x", {}, False),
        ("submit", "iam:PassRole", tenant.roles["training"], {"iam:PassedToService": "sagemaker.amazonaws.com"}, False),
        ("submit", "secretsmanager:GetSecretValue", secret_arn(capacity, org.organisation, team), {}, False),
        ("submit", "ssm:GetParameter", tenant.parameters[0], {}, False),
        ("submit", "ecr:PutImage", tenant.repository, {}, False),
        ("training", "ecr:BatchGetImage", tenant.repository, {}, False),
        *(("training", "logs:PutLogEvents", stream, {}, False) for stream in log_streams(capacity, team)),
        *(("submit", "sagemaker:StopTrainingJob", job, {}, False) for job in training_job_arns(capacity, team)),
    ]
    for queue, share in tenant.quota_shares:
        requests += [
            ("submit", "batch:SubmitServiceJob", r, own_tags, r == new_service_job)
            for r in (queue, share, new_service_job)
        ]
        requests += [
            ("submit", "batch:TagResource", new_service_job, {**own_tags, "batch:SchedulingPriority": "50"}, True),
            (
                "submit",
                "batch:TerminateServiceJob",
                f"{new_service_job}-1",
                {f"aws:ResourceTag/{TEAM_TAG}": team},
                False,
            ),
        ]
    for queue in tenant.fair_share_queues:
        requests += [
            ("submit", "batch:SubmitJob", r, {**own_tags, "batch:ShareIdentifier": team}, r == new_job)
            for r in (queue, new_job)
        ]
        requests += [
            ("submit", "batch:TagResource", new_job, {**own_tags, "batch:ShareIdentifier": team}, True),
            ("submit", "batch:CancelJob", f"{new_job}-1", {f"aws:ResourceTag/{TEAM_TAG}": team}, False),
        ]
    return requests


def test_each_team_reaches_its_own_things(organisation):
    _, org, prover = organisation
    for tenant in org.tenants.values():
        refused = [
            (kind, action, resource)
            for kind, action, resource, fixed, creating in own_requests(org, tenant.name)
            if not prover.reaches(
                Principal(arn=tenant.roles[kind]), action, resource, creating=creating, **fixed
            ).satisfiable
        ]
        members = [Principal(arn=arn) for kind, arn in tenant.roles.items() if kind.startswith("member:")]
        refused += [
            ("member", "sts:AssumeRole", m.arn)
            for m in members
            if not prover.reaches(m, "sts:AssumeRole", tenant.roles["submit"]).satisfiable
        ]
        assert members and refused == [], f"{tenant.name}: {refused}"


def test_prover_and_evaluator_agree_request_by_request(synthesized):
    """Every probe of test_cross_tenant (each team's roles against each other team) and every
    request of a team's own work: the solver, with the request fixed, decides as iam_eval does."""
    _, org, prover = synthesized("reference")
    decided = 0
    for attacker in org.tenants.values():
        for kind, role in attacker.roles.items():
            principal = Principal(arn=role)
            for victim in org.tenants.values():
                for probe in probes_against(org, attacker.name, victim) if victim is not attacker else ():
                    extra = probe.resource_context or tuple({} for _ in probe.resources)
                    for resource, more in zip(probe.resources, extra, strict=False):
                        context = {**probe.context, **more}
                        creating = probe.action.startswith("batch:Submit") and (
                            ":job/" in resource or ":service-job/" in resource
                        )
                        expected = org.world.is_allowed(Request(principal, probe.action, resource, context))
                        assert (
                            prover.decides(principal, probe.action, resource, context, creating=creating) == expected
                        ), (kind, probe.label, resource)
                        decided += 1
        for kind, action, resource, fixed, creating in own_requests(org, attacker.name):
            principal, context = Principal(arn=attacker.roles[kind]), {k: [v] for k, v in fixed.items()}
            if action in ("s3:GetObject", "s3:PutObject"):
                context.update(TLS)
            if any(k.startswith("aws:RequestTag/") for k in context):
                context["aws:TagKeys"] = [k.split("/", 1)[1] for k in context if k.startswith("aws:RequestTag/")]
            assert (
                prover.decides(principal, action, resource, context, creating=creating)
                == org.world.is_allowed(Request(principal, action, resource, context))
                is True
            )
            decided += 1
    assert decided > 500


def test_tags_are_set_on_a_job_only_inside_its_submission(synthesized):
    """Finding 1: TagResource on an existing job that carries no team tag (a platform job,
    another queue's) made it the attacker's, to stop or update. Now only the tagging Batch
    authorises inside SubmitJob / SubmitServiceJob (their own condition keys) is allowed."""
    _, org, prover = synthesized("reference")
    capacity = org.capacity
    for tenant in org.tenants.values():
        submit = Principal(arn=tenant.roles["submit"])
        own = {f"aws:RequestTag/{TEAM_TAG}": [tenant.name], "aws:TagKeys": [TEAM_TAG]}
        for kind in ("job", "service-job"):
            platform_job = f"arn:aws:batch:{capacity.region}:{capacity.account}:{kind}/platform-1"
            assert not org.world.is_allowed(Request(submit, "batch:TagResource", platform_job, own))
            claim = prover.reaches(submit, "batch:TagResource", platform_job)
            assert not claim.satisfiable, claim.witness
        submitting = (
            {"batch:SchedulingPriority": ["50"]} if tenant.quota_shares else {"batch:ShareIdentifier": [tenant.name]}
        )
        new = (
            f"arn:aws:batch:{capacity.region}:{capacity.account}:{'service-job' if tenant.quota_shares else 'job'}/new"
        )
        assert org.world.is_allowed(Request(submit, "batch:TagResource", new, {**own, **submitting}))


def test_a_member_never_sets_a_platform_tag_key(synthesized):
    """issue 23: the submit statements let a member set any tag key but the platform's own
    (purchases, requeues, cost allocation by pool), on a job it submits or tags."""
    _, org, prover = synthesized("reference")
    e = prover.encoder
    for tenant in org.tenants.values():
        submit = Principal(arn=tenant.roles["submit"])
        platform_key = e.any_of(
            [
                e.t(Kind.AND, has, e.eq(value, e.s(key)))
                for has, value in e.keys["aws:tagkeys"]
                for key in PLATFORM_TAG_KEYS
            ]
        )
        for action in ("batch:submitservicejob", "batch:submitjob", "batch:tagresource"):
            answer = prover.ask(f"{tenant.name} sets a platform tag key", submit, [action], e.creating, platform_key)
            assert not answer.satisfiable, answer.witness
        tags = {
            **{f"aws:RequestTag/{k}": [v] for k, v in tenant.submission_tags.items()},
            "aws:TagKeys": [*tenant.submission_tags, "project"],
        }
        for queue, _share in tenant.quota_shares:
            new = f"{queue.rsplit(':', 1)[0]}:service-job/new"
            assert org.world.is_allowed(
                Request(submit, "batch:SubmitServiceJob", new, tags)
            )  # a key of its own ("project") is fine
            with_platform_key = {**tags, "aws:TagKeys": [*tenant.submission_tags, PLATFORM_TAG_KEYS[0]]}
            assert not org.world.is_allowed(Request(submit, "batch:SubmitServiceJob", new, with_platform_key))
    assert TAG_COST_CENTRE not in PLATFORM_TAG_KEYS and TEAM_TAG not in PLATFORM_TAG_KEYS


def test_no_two_teams_name_scopes_overlap(organisation):
    """Finding 4, proven pairwise: no name (in any case) lies in a scope of two teams."""
    model, org, _ = organisation
    scopes = {
        t.name: [p for patterns in team_name_scopes(model.organisation, t.name).values() for p in patterns]
        for t in model.teams
    }
    overlaps = [(a, b, w) for a in scopes for b in scopes if a < b and (w := name_overlap(scopes[a], scopes[b]))]
    assert overlaps == []


def test_the_prover_finds_the_overlap_validation_refuses():
    """A team named AWSBatch<other>: validate refuses it (test_prefix_collision); were it let
    through, the prover names a training job both teams' scopes cover."""
    data = copy.deepcopy(yaml.safe_load((EXAMPLES / "org-projects.yaml").read_text()))
    victim = data["teams"][0]["name"]
    first, second = (team_name_scopes("acme-ml", name) for name in (victim, f"AWSBatch{victim}"))
    witness = name_overlap([p for ps in first.values() for p in ps], [p for ps in second.values() for p in ps])
    assert witness is not None and witness.lower().startswith(f"awsbatch{victim}-".lower())
    assert name_overlap(["research-*"], ["Research-X-*"]) is not None  # case does not separate names
    assert name_overlap(["research-*"], ["researchx-*"]) is None
