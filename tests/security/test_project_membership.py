"""Project membership alone grants nothing: in an organisation with two Unified Studio projects
sharing the same HyperPod clusters (examples/org-projects.yaml), every principal that is a
project owner, member or policy-grant holder but no team's member is refused every team's key,
bucket, queue, quota share and role, and has no EKS access entry, on the synthesized templates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import load_model
from tests.foundation.org import synthesize_reference

from .iam_eval import Principal, Request, World, arn_account, load_assembly
from .tenants import _read_identities, probes_against, read_organisation

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "org-projects.yaml"
ALLOW_ALL = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


def project_only(model: GovernanceModel) -> set[str]:
    people = {arn for p in model.projects for arn in (p.owner, *p.members)}
    people |= {g.principal for p in model.projects if p.unified_studio for g in p.unified_studio.policy_grants}
    return people - {arn for team in model.teams for arn in team.members}


@pytest.fixture(scope="module")
def organisation(tmp_path_factory):
    model = load_model(str(EXAMPLE))
    outdir = tmp_path_factory.mktemp("projects")
    synthesize_reference(model, outdir, packs=False)
    templates = load_assembly(outdir)
    org = read_organisation(model, templates)
    for template in templates:  # whatever any stack attaches to a project-only principal counts too
        _read_identities(org.world, template, sorted(project_only(model)))
    return model, org, templates


def test_two_projects_share_one_cluster_and_have_members_of_their_own(organisation):
    model, _, templates = organisation
    assert len(model.projects) == 2
    clusters = [{c.cluster_name for c in model.hyperpod_pools_of(p)} for p in model.projects]
    assert clusters[0] & clusters[1]  # the same HyperPod clusters
    connections = [t.resolve(props) for t in templates for _, props in t.of_type("AWS::DataZone::Connection")]
    shared = {c["Props"]["HyperPodProperties"]["ClusterName"] for c in connections}
    assert shared == clusters[0] | clusters[1] and len(connections) == sum(len(c) for c in clusters)
    outsiders = project_only(model)
    capacity = model.capacity_account.account_id
    # A consumer-account analyst, the project owners, and a project role in the cluster's own account.
    assert {arn_account(a) for a in outsiders} >= {capacity, *(a.account_id for a in model.consumer_accounts.values())}
    memberships = {
        t.resolve(p)["Member"]["UserIdentifier"]
        for t in templates
        for _, p in t.of_type("AWS::DataZone::ProjectMembership")
    }
    assert (
        outsiders - memberships
        == {g.principal for p in model.projects for g in p.unified_studio.policy_grants} - memberships
    )


def _refused(world: World, org, principal: Principal) -> list[str]:
    allowed = []
    for victim in org.tenants.values():
        allowed += [
            f"{victim.name}: {p.label}" for p in probes_against(org, "outsider", victim) if p.allowed(world, principal)
        ]
    return allowed


def test_project_membership_alone_reaches_no_key_bucket_queue_or_role(organisation):
    model, org, _ = organisation
    asked = 0
    for arn in sorted(project_only(model)):
        assert _refused(org.world, org, Principal(arn=arn)) == [], arn
        asked += 1
    assert asked >= 4
    # The evaluator is not blind: a team member (also a project member) reaches its own team.
    member = model.teams[0].members[0]
    assert org.world.is_allowed(
        Request(Principal(arn=member), "sts:AssumeRole", org.tenants[model.teams[0].name].roles["submit"])
    )


def test_even_an_administrator_of_its_own_account_reaches_nothing_through_the_project(organisation):
    """Worst case: the principal's own account allows it everything. Key policies still refuse
    every team key (so no object of a team bucket can be decrypted); outside the capacity account
    every team bucket, queue, log and role refuses it too. Not asked there: passing a role (AWS
    passes only roles of the caller's own account; the evaluator decides PassRole by identity
    policies alone) and the reads on ``*`` (in its own account they name its own jobs)."""
    model, org, _ = organisation
    capacity = model.capacity_account.account_id
    for arn in sorted(project_only(model)):
        world = World(**{**org.world.__dict__, "identity": {**org.world.identity, arn: [ALLOW_ALL]}})
        allowed = _refused(world, org, Principal(arn=arn))
        if arn_account(arn) != capacity:
            assert [a for a in allowed if not a.split(": ", 1)[1].startswith(("pass ", "read "))] == [], arn
        else:
            assert not [a for a in allowed if ": key " in a], arn
            assert not [a for a in allowed if "assume " in a], arn  # trust policies name only team members


def test_no_project_only_principal_has_an_eks_access_entry(organisation):
    model, _, templates = organisation
    entries = {t.resolve(p["PrincipalArn"]) for t in templates for _, p in t.of_type("AWS::EKS::AccessEntry")}
    assert entries  # the cluster has entries: the teams' roles and members
    assert not entries & project_only(model)
