"""Projects in the model: every rule reports one line with path, value and what is allowed; the
file without projects means what it meant before; explain and audit show each team's project."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import load_model
from constructs_lib.organisation.audit import audit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "org-projects.yaml"


def example_data() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def problems_of(data: dict) -> list[str]:
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    return str(raised.value).splitlines()


def test_the_example_declares_two_projects_and_the_reference_none():
    model = load_model(str(EXAMPLE))
    assert [p.name for p in model.projects] == ["vision", "assistant"]
    assert model.project_of("production").name == "assistant" and model.project_of("nobody") is None
    assert load_model().projects == ()  # everything existing keeps working without projects


def _set(data: dict, path: str, value) -> dict:
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return data


_DELETE = object()
P = "projects.0"
US = "projects.0.unified_studio"


@pytest.mark.parametrize(
    "path, value, expected",
    [
        (
            f"{US}.domain_id",
            "dzd-",
            "projects[0].unified_studio.domain_id: invalid ('dzd-') - must match ^dzd[-_][a-zA-Z0-9_-]{1,36}$",
        ),
        (f"{US}.domain_id", "abc_123", "projects[0].unified_studio.domain_id: invalid ('abc_123') - must match"),
        (
            f"{US}.domain_unit.parent_domain_unit_id",
            "Root Unit",
            "projects[0].unified_studio.domain_unit.parent_domain_unit_id: invalid ('Root Unit') - must match ^[a-z0-9_-]+$",
        ),
        ("projects.1.unified_studio.project_id", "x" * 37, "projects[1].unified_studio.project_id: invalid"),
        (f"{P}.name", "vision project!", "projects[0].name: invalid ('vision project!') - must match"),
        (f"{P}.teams", [], "projects[0].teams: invalid ([]) - at least 1 item(s)"),
        (
            f"{P}.teams",
            ["research", "ghost"],
            "projects[0].teams[1]: undeclared team ('ghost') - one of ['production', 'research', 'training']",
        ),
        (
            "projects.1.teams",
            ["production", "training"],
            "projects[1].teams[1]: already in project vision ('training') - a team of no other project",
        ),
        (
            f"{P}.owner",
            "arn:aws:iam::123456789012:role/Stranger",
            "projects[0].owner: account 123456789012 is not allowed here ('arn:aws:iam::123456789012:role/Stranger') - an account of capacity_account",
        ),
        (f"{P}.owner", "arn:aws:iam::444455556666:role/*", "projects[0].owner: invalid"),
        (
            f"{P}.members.1",
            "arn:aws:iam::444455556666:role/gpu-governance/research-gpu-submit",
            "projects[0].members[1]: a role under the library's path /gpu-governance/",
        ),
        (
            f"{US}.policy_grants.0.principal",
            "arn:aws:iam::444455556666:role/training-gpu-pods",
            "projects[0].unified_studio.policy_grants[0].principal: named like a team role of the library",
        ),
        (
            f"{US}.policy_grants.0.policy",
            "delete_domain",
            "projects[0].unified_studio.policy_grants[0].policy: invalid ('delete_domain') - allowed: 'add_to_project_member_pool', 'create_project' or 'override_project_owners'",
        ),
        (f"{US}.domain_unit_id", "existing01", "projects[0].unified_studio: invalid"),
        ("projects.1.unified_studio.domain_unit_id", "existing01", "projects[1].unified_studio: invalid"),
        (f"{US}.domain_unit", _DELETE, "projects[0].unified_studio: invalid"),
        (
            "pools.2.cluster_name",
            _DELETE,
            "projects[0].unified_studio: the project connects to pool hyperpod-eks, whose HyperPod cluster name is not declared ('arn:aws:sagemaker:us-east-1:111122223333:cluster/abcd1234efgh') - pools[2].cluster_name set to the cluster's name",
        ),
        (
            "projects.1.name",
            "Vision",
            "projects[1].name: duplicate name ('vision') - project names must differ (ignoring case)",
        ),
    ],
)
def test_each_project_rule_names_path_value_and_what_is_allowed(path, value, expected):
    lines = problems_of(_set(example_data(), path, value))
    assert any(line.startswith(expected) for line in lines), lines
    assert all("\n" not in line for line in lines)


def test_contradicting_places_say_what_to_choose():
    both = problems_of(_set(example_data(), f"{US}.domain_unit_id", "existing01"))
    assert any("domain_unit_id (an existing unit) or domain_unit (a new one), not both" in line for line in both)
    existing = problems_of(_set(example_data(), "projects.1.unified_studio.domain_unit_id", "existing01"))
    assert any("project_id names an existing project" in line for line in existing)
    no_unit = problems_of(_set(example_data(), f"{US}.domain_unit", _DELETE))
    assert any("policy_grants apply to the project's domain unit" in line for line in no_unit)


def test_a_project_outside_unified_studio_needs_no_cluster_name():
    data = _set(_set(example_data(), "pools.2.cluster_name", _DELETE), f"{US}", _DELETE)
    data = _set(data, "projects.1.unified_studio", _DELETE)
    model = GovernanceModel.from_dict(data)
    assert all(p.unified_studio is None for p in model.projects)


def test_bad_projects_exit_2_in_one_line_per_problem(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_set(example_data(), f"{P}.teams", ["ghost"])))
    for command in ("validate", "explain", "audit"):
        assert main([command, "--config", str(bad)]) == 2
        err = capsys.readouterr().err
        assert "projects[0].teams[0]: undeclared team ('ghost')" in err and "Traceback" not in err


def test_explain_shows_each_teams_project(capsys):
    assert main(["explain", "--config", str(EXAMPLE), "--json"]) == 0
    deals = json.loads(capsys.readouterr().out)["deals"]
    projects = {deal["team"]: deal["project"] for deal in deals}
    assert projects == {"research": "vision", "training": "vision", "production": "assistant"}
    assert main(["explain", "--config", str(EXAMPLE)]) == 0
    assert "  project                     vision" in capsys.readouterr().out
    assert main(["explain", "--example", "--json"]) == 0  # the reference organisation has none
    assert {deal["project"] for deal in json.loads(capsys.readouterr().out)["deals"]} == {"-"}


def test_audit_json_has_every_team_and_layer(capsys):
    assert main(["audit", "--config", str(EXAMPLE), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["layers"] == ["organisation", "project", "cluster", "workload", "data"]
    assert set(report["teams"]) == {"(platform)", "research", "training", "production"}
    for team in ("research", "training", "production"):
        assert all(report["teams"][team][layer] for layer in report["layers"]), team
    project = report["teams"]["production"]["project"]
    assert {row["who"] for row in project} >= {
        "arn:aws:iam::777788889999:role/ProductLead",
        "arn:aws:iam::111122223333:role/datazone_usr_role_assistant",
    }
    assert all("no IAM" in row["can"] for row in project if row["who"].startswith("arn:"))
    assert main(["audit", "--example"]) == 0  # without projects: no project layer, the rest as before
    text = capsys.readouterr().out
    assert "  project " not in text and "  cluster " in text


PROJECT_FIELDS = {
    "projects[0].name": "projects.0.name",
    "projects[0].teams[0]": "projects.0.teams.0",
    "projects[0].owner": "projects.0.owner",
    "projects[0].members[1]": "projects.0.members.1",
    "projects[0].unified_studio.domain_id": f"{US}.domain_id",
    "projects[0].unified_studio.domain_unit.name": f"{US}.domain_unit.name",
    "projects[0].unified_studio.domain_unit.parent_domain_unit_id": f"{US}.domain_unit.parent_domain_unit_id",
    "projects[0].unified_studio.project_profile_id": f"{US}.project_profile_id",
    "projects[0].unified_studio.policy_grants[0].principal": f"{US}.policy_grants.0.principal",
    "projects[1].unified_studio.project_id": "projects.1.unified_studio.project_id",
}


@pytest.mark.parametrize("field", PROJECT_FIELDS)
def test_hostile_values_in_project_fields_are_refused_or_inert(field):
    """The payloads of tests/security/test_hostile_inputs.py, in every string field of a project."""
    from tests.security.test_hostile_inputs import INERT, PAYLOADS, placements

    location = PROJECT_FIELDS[field]
    base = example_data()
    node = base
    for part in location.split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    for payload in PAYLOADS.values():
        for value in placements(node, payload):
            try:
                GovernanceModel.from_dict(_set(example_data(), location, value))
            except GovernanceError as error:
                assert any(p.path.startswith(field) for p in error.problems), (field, value, str(error))
                assert all("\n" not in line for line in str(error).splitlines())
                continue
            assert INERT.fullmatch(value), f"{field} accepted {value!r}"


def test_a_role_listed_by_two_teams_is_refused_naming_both_teams_and_the_role(tmp_path, capsys):
    data = example_data()
    shared = "arn:aws:iam::111122223333:role/datazone_usr_role_vision_env1"
    teams = {t["name"]: t for t in data["teams"]}
    teams["research"]["members"].append(shared)
    teams["training"]["members"].append(
        shared.replace("datazone_usr_role_vision", "DataZone_Usr_Role_Vision")
    )  # names ignore case
    config = tmp_path / "shared.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["validate", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    research = next(i for i, t in enumerate(data["teams"]) if t["name"] == "research")
    assert (
        f"teams[{research}].members[{len(teams['research']['members']) - 1}]: role is a member of teams research and training ('{shared}')"
        in err
    )
    assert "Traceback" not in err
    # A person's own role per team is fine: different roles, even of one person.
    teams["training"]["members"][-1] = "arn:aws:iam::111122223333:role/alice-training"
    teams["research"]["members"][-1] = "arn:aws:iam::111122223333:role/alice-research"
    GovernanceModel.from_dict(data)


def test_audit_says_every_project_member_gets_the_team_when_a_project_role_is_a_member(capsys):
    data = example_data()
    project_role = "arn:aws:iam::111122223333:role/datazone_usr_role_assistant"  # the assistant project lists it
    next(t for t in data["teams"] if t["name"] == "production")["members"].append(project_role)
    rows = [
        r
        for r in audit(GovernanceModel.from_dict(data))
        if r.team == "production" and r.who.startswith("everyone who acts as")
    ]
    (row,) = rows
    assert row.who.startswith(
        f"everyone who acts as {project_role}: every member of project assistant (teams production): "
    )
    assert "arn:aws:iam::777788889999:role/ProductLead" in row.who
    assert "submission role, access entries, key, bucket, secrets and jobs" in row.can
    # Without a project role among the members, no such row: the example's teams list people only.
    assert not [r for r in audit(load_model(str(EXAMPLE))) if r.who.startswith("everyone who acts as")]
