"""The cost centre is required at submission where IAM can require it: a team that declares one
may submit (Batch SubmitServiceJob into its quota share, SubmitJob into its fair share) only with
``gpu-governance:cost-centre`` = that value on the request, as it must carry its team tag; without
it, or with another cost centre, the request is denied. A team without a cost centre submits with
its team tag alone, as before. Evaluated on the synthesized templates (tests/security/iam_eval.py),
one synthesis of the reference organisation with one team's cost centre removed."""

from __future__ import annotations

import pytest

from constructs_lib.model import GovernanceModel
from gpu_governance_runtime.contract import TAG_COST_CENTRE, TAG_TEAM, submission_tags
from tests.foundation.org import default_data, synthesize_reference

from .iam_eval import Principal, Request, load_assembly
from .ownership import READINGS
from .tenants import Probe, _batch_arn, read_organisation

WITHOUT_COST_CENTRE = "production"


@pytest.fixture(scope="module")
def organisation(tmp_path_factory):
    data = default_data()
    next(t for t in data["teams"] if t["name"] == WITHOUT_COST_CENTRE).pop("cost_centre")
    model = GovernanceModel.from_dict(data)
    outdir = tmp_path_factory.mktemp("cost-centre")
    synthesize_reference(model, outdir, packs=False)
    return model, read_organisation(model, load_assembly(outdir))


def submissions(org, team: str, tags: dict[str, str]) -> list[Probe]:
    """Every submission ``team`` can make, sending ``tags``: into each of its quota shares and,
    with one of its own job definitions, into each of its fair shares."""
    tenant = org.tenants[team]
    context = {**{f"aws:RequestTag/{k}": [v] for k, v in tags.items()}, "aws:TagKeys": list(tags)}
    probes = [
        Probe(
            "submit into share",
            "batch:SubmitServiceJob",
            (queue, share, _batch_arn(org.capacity, "service-job/new")),
            context,
        )
        for queue, share in tenant.quota_shares
    ]
    definition = _batch_arn(org.capacity, f"job-definition/{team}-train:1")
    probes += [
        Probe(
            "submit into fair share",
            "batch:SubmitJob",
            (queue, _batch_arn(org.capacity, "job/new"), definition),
            {**context, "batch:ShareIdentifier": [team]},
            ({}, {}, {f"aws:ResourceTag/{TAG_TEAM}": [team]}),
        )
        for queue in tenant.fair_share_queues
    ]
    return probes


def allowed(org, team: str, tags: dict[str, str]) -> list[bool]:
    role = Principal(arn=org.tenants[team].roles["submit"])
    return [probe.allowed(org.world, role) for probe in submissions(org, team, tags)]


def test_a_team_with_a_cost_centre_submits_only_with_it(organisation):
    model, org = organisation
    declared = {t.cost_centre for t in model.teams if t.cost_centre}
    teams = [t for t in model.teams if t.cost_centre]
    assert teams and {"quota share", "fair share"} <= {
        kind
        for t in teams
        for kind, has in (
            ("quota share", org.tenants[t.name].quota_shares),
            ("fair share", org.tenants[t.name].fair_share_queues),
        )
        if has
    }
    for team in teams:
        required = submission_tags(team.name, team.cost_centre)
        assert required == {TAG_TEAM: team.name, TAG_COST_CENTRE: team.cost_centre}
        assert allowed(org, team.name, required) and all(allowed(org, team.name, required)), team.name
        assert not any(allowed(org, team.name, {TAG_TEAM: team.name})), f"{team.name} submitted without its cost centre"
        for other in sorted(declared - {team.cost_centre}) + ["CC-0000"]:
            assert not any(allowed(org, team.name, {**required, TAG_COST_CENTRE: other})), (
                f"{team.name} submitted as cost centre {other}"
            )


def test_a_team_without_a_cost_centre_submits_with_its_team_tag_alone(organisation):
    _, org = organisation
    assert allowed(org, WITHOUT_COST_CENTRE, {TAG_TEAM: WITHOUT_COST_CENTRE})
    assert all(allowed(org, WITHOUT_COST_CENTRE, {TAG_TEAM: WITHOUT_COST_CENTRE}))


def test_the_cost_centre_is_tagged_at_creation_with_the_team_tag(organisation):
    """Batch authorises the tags of a new job as batch:TagResource on it, inside the submission:
    both tags at once are allowed, whichever way Batch builds that context (issue 37), and another
    cost centre is not."""
    model, org = organisation
    team = next(t for t in model.teams if t.cost_centre)
    submit, job = Principal(arn=org.tenants[team.name].roles["submit"]), _batch_arn(org.capacity, "service-job/new")
    for reading in READINGS:
        for centre, allowed in ((team.cost_centre, True), (f"not-{team.cost_centre}", False)):
            context = reading.tagging(submission_tags(team.name, centre), {"batch:SchedulingPriority": "50"})
            assert org.world.is_allowed(Request(submit, "batch:TagResource", job, context)) is allowed, reading
