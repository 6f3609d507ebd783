"""The organisation with two Unified Studio projects (examples/org-projects.yaml), synthesized once
with every compliance pack: clean under the packs and cfn-lint, its DataZone resources checked
against the CloudFormation resource schemas, the projects adding nothing but DataZone resources,
and the audit matching what the templates deploy."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from constructs_lib.backends.hyperpod_slurm.plan import slurm_plan
from constructs_lib.cli.report import summarise
from constructs_lib.model import PROJECT_CONTRIBUTOR, PROJECT_OWNER, GovernanceModel
from constructs_lib.model.loader import load_model
from constructs_lib.organisation.audit import audit
from tests.foundation.org import synthesize_reference
from tests.security.iam_eval import Template, load_assembly

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "org-projects.yaml"
DATAZONE = "AWS::DataZone::"
# The ProjectMembership schema's primary identifier is (domain, project) although a project has
# one membership per member; acknowledged on each membership (docs/unified-studio.md).
MEMBERSHIP_PRIMARY_ID = "E3019"


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    model = load_model(str(EXAMPLE))
    outdir = tmp_path_factory.mktemp("projects")
    synthesize_reference(model, outdir)  # raises on any unacknowledged finding of any pack
    return model, outdir, {t.name: t for t in load_assembly(outdir)}


@pytest.fixture(scope="module")
def without_projects(tmp_path_factory):
    model = GovernanceModel.from_dict(
        {**load_model(str(EXAMPLE)).model_dump(mode="json", exclude_none=True), "projects": []}
    )
    outdir = tmp_path_factory.mktemp("no-projects")
    synthesize_reference(model, outdir, packs=False)
    return outdir


def stack_templates(outdir: Path) -> dict[str, tuple[str, dict]]:
    manifest = json.loads((outdir / "manifest.json").read_text())
    return {
        name: (a["environment"].rsplit("/", 1)[1], json.loads((outdir / a["properties"]["templateFile"]).read_text()))
        for name, a in manifest["artifacts"].items()
        if a["type"] == "aws:cloudformation:stack"
    }


def lint(body: dict, region: str) -> list:
    from cfnlint.api import lint as cfn_lint

    return [m for m in cfn_lint(json.dumps(body), regions=[region]) if m.rule.id.startswith("E")]


def test_every_pack_is_clean_and_the_one_acknowledgement_has_its_reason(synthesized):
    _, outdir, _ = synthesized
    summary = summarise(outdir)
    assert summary.open_findings == []
    reasons = {rule: reason for rule, reason in summary.acknowledged.items() if MEMBERSHIP_PRIMARY_ID in rule}
    assert reasons and all("primary identifier" in r for r in reasons.values())
    docs = (ROOT / "docs" / "unified-studio.md").read_text()
    assert all(reason in docs for reason in reasons.values())


def test_cfn_lint_finds_no_error_but_the_acknowledged_membership_identifier(synthesized):
    _, outdir, templates = synthesized
    for name, (region, body) in stack_templates(outdir).items():
        errors = lint(body, region)
        membership_ids = [m for m in errors if m.rule.id == MEMBERSHIP_PRIMARY_ID]
        assert all(body["Resources"][m.path[1]]["Type"] == f"{DATAZONE}ProjectMembership" for m in membership_ids), name
        assert [str(m) for m in errors if m.rule.id != MEMBERSHIP_PRIMARY_ID] == [], name
    kinds = {r["Type"] for t in templates.values() for r in t.resources.values() if r["Type"].startswith(DATAZONE)}
    assert kinds == {
        f"{DATAZONE}{k}" for k in ("Project", "ProjectMembership", "Connection", "DomainUnit", "PolicyGrant")
    }


@pytest.mark.parametrize(
    "kind, change, rule",
    [
        ("Connection", lambda p: p["Props"]["HyperPodProperties"].update(ClusterName="not_a_cluster!"), "E3031"),
        ("Connection", lambda p: p["Props"].update(HyperPodProperties={"Cluster": "acme"}), "E3"),
        ("Project", lambda p: p.update(DomainIdentifier="domain-1"), "E3031"),
        ("ProjectMembership", lambda p: p.update(Designation="PROJECT OWNER"), "E3031"),
        ("PolicyGrant", lambda p: p.update(PolicyType="CREATE_EVERYTHING"), "E3030"),
        ("DomainUnit", lambda p: p.update(ParentDomainUnitIdentifier="Root Unit"), "E3031"),
    ],
)
def test_cfn_lint_validates_datazone_properties_against_the_resource_schemas(synthesized, kind, change, rule):
    """The clean result above means something: the same templates with one DataZone property
    broken are refused by the schema cfn-lint ships for that type."""
    _, outdir, _ = synthesized
    region, body = stack_templates(outdir)["acme-ml-capacity"]
    body = copy.deepcopy(body)
    logical_id = next(k for k, r in body["Resources"].items() if r["Type"] == f"{DATAZONE}{kind}")
    change(body["Resources"][logical_id]["Properties"])
    found = [
        m for m in lint(body, region) if m.path[:2] == ["Resources", logical_id] and m.rule.id != MEMBERSHIP_PRIMARY_ID
    ]
    assert any(m.rule.id.startswith(rule) for m in found), [str(m) for m in found]


def _datazone(templates: dict[str, Template], kind: str) -> list[dict]:
    return [t.resolve(p) for t in templates.values() for _, p in t.of_type(f"{DATAZONE}{kind}")]


def test_each_project_gets_its_project_members_and_a_connection_per_cluster(synthesized):
    model, _, templates = synthesized
    capacity = templates["acme-ml-capacity"]
    created = _datazone(templates, "Project")
    assert [p["Name"] for p in created] == [p.name for p in model.projects if not p.unified_studio.project_id]
    assert all("ProjectExecutionRole" not in p for p in created)  # no role handed to every member at once
    project_ids = {}
    for logical_id, props in capacity.of_type(f"{DATAZONE}Project"):
        project_ids[props["Name"]] = capacity.resolve({"Fn::GetAtt": [logical_id, "Id"]})
    for project in model.projects:
        project_ids.setdefault(project.name, project.unified_studio.project_id)
    memberships = _datazone(templates, "ProjectMembership")
    connections = _datazone(templates, "Connection")
    for project in model.projects:
        pid = project_ids[project.name]
        mine = {m["Member"]["UserIdentifier"]: m["Designation"] for m in memberships if m["ProjectIdentifier"] == pid}
        assert mine == {**{a: PROJECT_CONTRIBUTOR for a in project.members}, project.owner: PROJECT_OWNER}
        clusters = sorted(
            c["Props"]["HyperPodProperties"]["ClusterName"] for c in connections if c["ProjectIdentifier"] == pid
        )
        assert clusters == sorted(p.cluster_name for p in model.hyperpod_pools_of(project))
    units = _datazone(templates, "DomainUnit")
    assert [u["Name"] for u in units] == [
        p.unified_studio.domain_unit.name for p in model.projects if p.unified_studio.domain_unit
    ]
    grants = _datazone(templates, "PolicyGrant")
    assert [g["Principal"]["User"]["UserIdentifier"] for g in grants] == [
        g.principal for p in model.projects for g in p.unified_studio.policy_grants
    ]
    assert grants[0]["Detail"] == {"AddToProjectMemberPool": {"IncludeChildDomainUnits": False}}


def test_projects_add_datazone_resources_and_nothing_else(synthesized, without_projects):
    """No role, policy, key policy statement, access entry or trust changes with the projects:
    project membership cannot be where any access comes from."""
    _, outdir, _ = synthesized
    with_projects, plain = stack_templates(outdir), stack_templates(without_projects)
    assert set(with_projects) == set(plain)
    for name, (_, body) in with_projects.items():
        kept = {k: r for k, r in body["Resources"].items() if not r["Type"].startswith(DATAZONE)}
        assert kept == plain[name][1]["Resources"], name
        assert {k: v for k, v in body.items() if k != "Resources"} == {
            k: v for k, v in plain[name][1].items() if k != "Resources"
        }


# --- the audit against the templates ----------------------------------------------------------

ROLE_ARN = re.compile(r"arn:aws:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+")


def test_every_role_the_audit_lists_is_deployed_with_that_name(synthesized):
    model, _, templates = synthesized
    deployed = {t.get_att(k, "Arn") for t in templates.values() for k, _ in t.of_type("AWS::IAM::Role")}
    listed = {
        arn
        for row in audit(model)
        for text in (row.who, row.on)
        for arn in ROLE_ARN.findall(text)
        if "/gpu-governance/" in arn
    }
    assert len(listed) == 3 * len(model.teams)  # submission, training, pods on every team of the example
    assert listed <= deployed, listed - deployed


def test_every_eks_access_entry_is_in_the_audit_and_nothing_more(synthesized):
    model, _, templates = synthesized
    entries = set()
    for template in templates.values():
        for _, props in template.of_type("AWS::EKS::AccessEntry"):
            principal = template.resolve(props["PrincipalArn"])
            groups = props.get("KubernetesGroups")
            policies = [p["PolicyArn"] for p in props.get("AccessPolicies", [])]
            entries.add((principal, groups[0] if groups else policies[0].rsplit("/", 1)[1]))
    rows = audit(model)
    listed = {
        (r.who, r.can.rsplit(" ", 1)[1])
        for r in rows
        if r.layer == "cluster" and r.can.startswith("reach the cluster's Kubernetes API (an EKS access entry)")
    }
    admins = {
        (r.who, "AmazonEKSClusterAdminPolicy")
        for r in rows
        if r.team == "(platform)" and r.who in model.platform_admins
    }
    provider = {e for e in entries if e not in listed | admins}
    # The one entry no model names: the kubectl provider role the construct creates (cluster admin).
    assert len(provider) == 1 and next(iter(provider))[1] == "AmazonEKSClusterAdminPolicy"
    assert next(iter(provider))[0].split("/")[-1].startswith("acme-ml-capacity-PoolhyperpodeksKubectlProvider")
    assert listed <= entries and admins <= entries


def test_the_audit_names_the_deployed_keys_shares_quotas_and_slurm_accounts(synthesized):
    model, outdir, templates = synthesized
    capacity = templates["acme-ml-capacity"]
    text = "\n".join(f"{r.who} {r.can} {r.on}" for r in audit(model))
    aliases = [p["AliasName"] for _, p in capacity.of_type("AWS::KMS::Alias")]
    shares = [
        (p["QuotaShareName"], capacity.resolve(p["JobQueue"]).rsplit("/", 1)[1])
        for _, p in capacity.of_type("AWS::Batch::QuotaShare")
    ]
    quotas = [p["Name"] for _, p in capacity.of_type("AWS::SageMaker::ComputeQuota")]
    assert aliases and shares and quotas
    assert all(f"use key {alias};" in text for alias in aliases)
    assert all(f"quota share {share} of Batch job queue {queue}" in text for share, queue in shares)
    assert all(f"compute quota {name} " in text for name in quotas)
    scripts = "\n".join(p.read_text() for p in Path(outdir).glob("asset.*.sh"))
    plan = slurm_plan(model, "hyperpod-slurm")
    assert scripts and plan.users
    for user in plan.users:
        assert f"Slurm user {user.name}" in text and user.name in scripts
    for account in plan.accounts:
        assert all(qos in scripts and qos in text for qos in account.qos)


def test_the_limits_estimate_counts_the_datazone_resources(synthesized):
    # validate's estimate (organisation/limits.py) knows each project's DataZone resources, so a
    # large organisation is refused before synthesis rather than by CloudFormation.
    from constructs_lib.organisation.limits import unified_studio_resources

    model, outdir, _ = synthesized
    created = sum(
        1
        for _, body in stack_templates(outdir).values()
        for r in body["Resources"].values()
        if r["Type"].startswith(DATAZONE)
    )
    assert created == sum(unified_studio_resources(model, project) for project in model.projects) > 0
