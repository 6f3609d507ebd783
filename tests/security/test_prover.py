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
from gpu_governance_runtime.contract import PLATFORM_TAG_KEYS, TAG_COST_CENTRE, TAG_REQUEUED_FROM, TAG_TIMES_PREEMPTED
from tests.foundation.org import synthesize_reference
from tests.scale.generate import organisation as generated_organisation

from .iam_eval import Principal, Request, load_assembly
from .ownership import CREATED, READINGS, Reading
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


@pytest.mark.parametrize("reading", READINGS, ids=str)
def test_no_request_of_any_role_reaches_what_belongs_to_another_team(organisation, reading):
    """Under each reading of how Batch authorises a submission's tags (issue 37, row 1)."""
    _, org, prover = organisation
    prover = prover.under(reading)
    before = len(prover.answers)
    witnesses = []
    for team, principal in principals_of(org):
        witnesses += [(team, a.witness) for a in prover.cross_tenant(principal, team) if a.satisfiable]
    asked = prover.answers[before:]
    print(
        f"\n{len(org.tenants)} teams, {reading}: {len(asked)} queries, {sum(a.seconds for a in asked):.2f} s solving, worst {max(a.seconds for a in asked):.3f} s"
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
    """(role kind, action, resource, fixed condition keys, creating) a team's own work needs; its
    submissions and their tagging, under every reading: test_every_submission_and_every_copy_is_allowed."""
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
        requests.append(
            (
                "submit",
                "batch:TerminateServiceJob",
                f"{new_service_job}-1",
                {f"aws:ResourceTag/{TEAM_TAG}": team},
                False,
            )
        )
    for queue in tenant.fair_share_queues:
        requests += [
            ("submit", "batch:SubmitJob", r, {**own_tags, "batch:ShareIdentifier": team}, r == new_job)
            for r in (queue, new_job)
        ]
        requests.append(("submit", "batch:CancelJob", f"{new_job}-1", {f"aws:ResourceTag/{TEAM_TAG}": team}, False))
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


def submissions(org: Organisation, reading: Reading) -> list[tuple[str, Principal, str, str, dict, bool]]:
    """(who, principal, action, resource, whole context, creating) of every submission a team's
    tooling makes and every copy the reclaim controller submits, with the tagging Batch authorises
    inside each as ``reading`` builds it. Nothing else is in the context: each key is as sent."""
    capacity, requests = org.capacity, []
    batch = lambda resource: f"arn:aws:batch:{capacity.region}:{capacity.account}:{resource}"  # noqa: E731
    reclaimer = Principal(arn=org.controllers["reclaim"])
    for tenant in org.tenants.values():
        submit, tags = Principal(arn=tenant.roles["submit"]), tenant.submission_tags
        sent_tags = {f"aws:RequestTag/{k}": [v] for k, v in tags.items()} | {"aws:TagKeys": list(tags)}
        new = batch("service-job/new")
        for queue, share in tenant.quota_shares:
            # schedulingPriority is optional: a submission without it is the team's too
            for sent in ({"batch:SchedulingPriority": "50"}, {}):
                context = sent_tags | {k: [v] for k, v in sent.items()}
                requests += [
                    (tenant.name, submit, "batch:SubmitServiceJob", r, context, r == new) for r in (queue, share)
                ]
                requests.append(
                    (tenant.name, submit, "batch:SubmitServiceJob", new, _created(context, reading, tags), True)
                )
                requests.append((tenant.name, submit, "batch:TagResource", new, reading.tagging(tags, sent), True))
        new, definition = batch("job/new"), batch(f"job-definition/{tenant.name}-train:1")
        copy = {**tags, TAG_REQUEUED_FROM: "0123-original", TAG_TIMES_PREEMPTED: "1"}
        for queue in tenant.fair_share_queues:
            for who, principal, job_tags in ((tenant.name, submit, tags), ("reclaim controller", reclaimer, copy)):
                share = {"batch:ShareIdentifier": tenant.name}
                context = {f"aws:RequestTag/{k}": [v] for k, v in job_tags.items()} | {"aws:TagKeys": list(job_tags)}
                context |= {k: [v] for k, v in share.items()}
                requests += [
                    (who, principal, "batch:SubmitJob", queue, context, False),
                    (
                        who,
                        principal,
                        "batch:SubmitJob",
                        definition,
                        context | {f"aws:ResourceTag/{TEAM_TAG}": [tenant.name]},
                        False,
                    ),
                    (who, principal, "batch:SubmitJob", new, _created(context, reading, job_tags), True),
                    (who, principal, "batch:TagResource", new, reading.tagging(job_tags, share), True),
                ]
    return requests


def _created(context: dict, reading: Reading, tags: dict) -> dict:
    """A submission's context on the job it creates: with the new job's tags where ``reading`` puts them."""
    return context | ({f"aws:ResourceTag/{k}": [v] for k, v in tags.items()} if reading.resource_tags else {})


@pytest.mark.parametrize("reading", READINGS, ids=str)
def test_every_submission_and_every_copy_is_allowed_under_every_reading(synthesized, reading):
    """Issue 37, row 1: the policies rely on documented condition keys only, so whichever way Batch
    builds the context of a submission's tagging, each team's tagged submissions and each copy of a
    stopped job the reclaim controller submits are allowed (the solver and the evaluator agree)."""
    for name in ("reference", "generated"):
        _, org, prover = synthesized(name)
        prover = prover.under(reading)
        refused = []
        for who, principal, action, resource, context, creating in submissions(org, reading):
            by_evaluator = org.world.is_allowed(Request(principal, action, resource, context))
            by_solver = prover.decides(principal, action, resource, context, creating=creating)
            assert by_evaluator == by_solver, (who, action, resource, context)
            if not by_evaluator:
                refused.append((who, action, resource.rsplit(":", 1)[-1], sorted(context)))
        assert refused == [], f"{name}, {reading}: {len(refused)} refused, e.g. {refused[:3]}"


@pytest.mark.parametrize("reading", READINGS, ids=str)
def test_no_job_of_a_governed_queue_is_submitted_without_a_team_tag(synthesized, reading):
    """What closes the hole the undocumented keys closed (issue 37, row 1): a team may tag an
    existing job that carries no team tag, so no job of a governed queue may be without one. No
    principal of the organisation (teams' roles, members, the reclaim controller) submits one."""
    _, org, prover = synthesized("reference")
    prover = prover.under(reading)
    queues = sorted({q for t in org.tenants.values() for q in [*t.fair_share_queues, *(q for q, _ in t.quota_shares)]})
    principals = [p for _, p in principals_of(org)] + [Principal(arn=arn) for arn in org.controllers.values()]
    assert queues and "reclaim" in org.controllers
    witnesses = [
        a.witness for p in principals for q in queues for a in prover.untagged_submission(p, q) if a.satisfiable
    ]
    assert witnesses == []


@pytest.mark.parametrize("reading", READINGS, ids=str)
def test_no_team_removes_or_hands_on_the_owner_tags_of_a_job(synthesized, reading):
    """Untagging its own job's team tag would make it anyone's to claim; naming another team in it
    would make it that team's to stop (and bill); removing a platform key would reset the count of
    preemptions a copy carries."""
    _, org, prover = synthesized("reference")
    prover = prover.under(reading)
    witnesses = [
        (team, a.question, a.witness)
        for team, principal in principals_of(org)
        for a in prover.owner_changed(principal, team)
        if a.satisfiable
    ]
    assert witnesses == []


def test_the_denies_hold_where_another_policy_of_the_role_allows_any_tagging(synthesized):
    """A team's role may hold more than the library gives it (a permission set, an admin's grant):
    with batch:TagResource and batch:UntagResource allowed on every job beside the library's
    policies, still no team touches another team's job, removes or hands on an owner tag, or sets a
    platform key, under any reading."""
    _, org, prover = synthesized("reference")
    world = copy.deepcopy(org.world)
    jobs = [prover.tagged[kind] for kind in CREATED]
    anything = {"Effect": "Allow", "Action": ["batch:TagResource", "batch:UntagResource"], "Resource": jobs}
    submit_roles = {t.name: Principal(arn=t.roles["submit"]) for t in org.tenants.values()}
    for principal in submit_roles.values():
        world.add_identity(principal.arn, {"Statement": [anything]})
    widened = Prover(Organisation(world, org.tenants, org.capacity, org.organisation, org.controllers))
    e = widened.encoder
    platform_key = e.any_of(
        [e.t(Kind.AND, has, e.eq(value, e.s(key))) for has, value in e.keys["aws:tagkeys"] for key in PLATFORM_TAG_KEYS]
    )
    for reading in READINGS:
        prover = widened.under(reading)
        for team, principal in submit_roles.items():
            found = [a.witness for a in prover.cross_tenant(principal, team) if a.satisfiable]
            found += [a.witness for a in prover.owner_changed(principal, team) if a.satisfiable]
            platform = prover.ask(f"{team} sets a platform tag key", principal, ["batch:tagresource"], platform_key)
            assert found == [] and not platform.satisfiable, (team, reading, found or platform.witness)


def test_an_untagged_job_is_all_a_team_can_claim(synthesized):
    """The residual of documented keys, pinned so that it is never larger than stated (docs/security.md):
    a team can tag, as its own, an existing job that carries no team tag (none is in a governed
    queue, above), and nothing that carries another team's tag (the proof above). An existing job is
    no submission: no reading changes its context."""
    _, org, prover = synthesized("reference")
    capacity = org.capacity
    for tenant in org.tenants.values():
        submit, tags = Principal(arn=tenant.roles["submit"]), tenant.submission_tags
        own = {f"aws:RequestTag/{k}": [v] for k, v in tags.items()} | {"aws:TagKeys": list(tags)}
        other = next(t for t in org.tenants if t != tenant.name)
        for kind in ("job", "service-job"):
            job = f"arn:aws:batch:{capacity.region}:{capacity.account}:{kind}/outside-1"
            assert org.world.is_allowed(Request(submit, "batch:TagResource", job, own))
            assert prover.decides(submit, "batch:TagResource", job, own)
            held = own | {f"aws:ResourceTag/{TEAM_TAG}": [other]}
            assert not org.world.is_allowed(Request(submit, "batch:TagResource", job, held))
            assert not prover.decides(submit, "batch:TagResource", job, held)


def test_a_member_never_sets_a_platform_tag_key(synthesized):
    """issue 23: the submit statements let a member set any tag key but the platform's own
    (purchases, requeues, cost allocation by pool), on a job it submits or tags, new or existing,
    under every reading of a submission's tagging (issue 37)."""
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
        for reading in READINGS:
            # A submission is authorised on each of its resources; the job it creates takes the tags.
            for action, on_the_job in (
                ("batch:submitservicejob", e.creating),
                ("batch:submitjob", e.creating),
                ("batch:tagresource", e.true),  # a new job or an existing one
            ):
                answer = prover.under(reading).ask(
                    f"{tenant.name} sets a platform tag key", submit, [action], on_the_job, platform_key
                )
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
