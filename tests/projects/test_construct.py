"""UnifiedStudioProjects on its own: created only for projects with a domain, construct ids
keyed by names (never positions), an existing project reused rather than created."""

from __future__ import annotations

from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.unified_studio import UnifiedStudioProjects

from .test_model import example_data


def datazone_resources(data: dict) -> dict[str, dict]:
    stack = Stack(App(), "Projects")
    UnifiedStudioProjects(stack, "UnifiedStudio", model=GovernanceModel.from_dict(data))
    return {
        k: r
        for k, r in Template.from_stack(stack).to_json().get("Resources", {}).items()
        if r["Type"].startswith("AWS::DataZone::")
    }


def test_projects_without_a_domain_create_nothing():
    data = example_data()
    for project in data["projects"]:
        del project["unified_studio"]
    assert datazone_resources(data) == {}


def test_removing_a_member_leaves_every_other_resource_as_it_is():
    before = datazone_resources(example_data())
    data = example_data()
    removed = data["projects"][0]["members"].pop(0)
    after = datazone_resources(data)
    gone = set(before) - set(after)
    assert [before[k]["Properties"]["Member"]["UserIdentifier"] for k in gone] == [removed]
    assert set(after) < set(before) and all(after[k] == before[k] for k in after)


def test_an_existing_project_is_reused_not_created():
    resources = datazone_resources(example_data())
    created = [r["Properties"]["Name"] for r in resources.values() if r["Type"] == "AWS::DataZone::Project"]
    assert created == ["vision"]
    existing = [r for r in resources.values() if r["Properties"].get("ProjectIdentifier") == "acmeassistant01"]
    assert {r["Type"] for r in existing} == {"AWS::DataZone::ProjectMembership", "AWS::DataZone::Connection"}
