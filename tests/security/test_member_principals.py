"""Members are admitted through their account plus ``aws:PrincipalArn`` (issue 30): the policies
IAM and KMS store name no role that may not exist yet or may be re-created, and nothing widens.

IAM refuses a policy whose principal does not exist ("Invalid principal in policy") and stores a
role principal as its unique id, so a member role created after the capacity stack, or deleted
and re-created, must not be a principal of its own:
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html#principal-roles
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from constructs_lib.model import GovernanceModel, identity_center_role_patterns
from constructs_lib.model.loader import load_model
from tests.foundation.org import default_data, synthesize_reference

from .iam_eval import Principal, Request, load_assembly
from .tenants import identity_center_roles, read_organisation

ROOT_PRINCIPAL = r"^arn:aws:iam::[0-9]{12}:root$"


def _not_yet_created_member() -> GovernanceModel:
    """The reference organisation with a member role that no account holds at synth time."""
    data = default_data()
    data["teams"][0]["members"].append("arn:aws:iam::444455556666:role/created-later/NewHires")
    return GovernanceModel.from_dict(data)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    model = _not_yet_created_member()
    outdir = tmp_path_factory.mktemp("members")
    synthesize_reference(model, outdir, packs=False)
    templates = load_assembly(outdir)
    return model, templates, read_organisation(model, templates)


def _principal_values(document: dict) -> list:
    return [
        value
        for statement in document.get("Statement", [])
        for value in (
            statement.get("Principal", {}).get("AWS", []) if isinstance(statement.get("Principal"), dict) else []
        )
        for value in (value if isinstance(value, list) else [value])
    ]


def test_no_policy_names_a_declared_principal_itself(synthesized):
    """Every declared member and platform admin appears in a condition, never as a principal: the
    form IAM and KMS accept before the role exists."""
    model, templates, _ = synthesized
    declared = {*model.platform_admins, *(arn for team in model.teams for arn in model.member_principals(team))}
    named = []
    for template in templates:
        for _, props in template.of_type("AWS::IAM::Role"):
            named += _principal_values(template.resolve(props["AssumeRolePolicyDocument"]))
        for _, props in template.of_type("AWS::KMS::Key"):
            named += _principal_values(template.resolve(props["KeyPolicy"]))
    assert declared & set(named) == set()
    trust = json.dumps(
        next(
            t.resolve(p["AssumeRolePolicyDocument"])
            for t in templates
            for _, p in t.of_type("AWS::IAM::Role")
            if p.get("RoleName") == "research-gpu-submit"
        )
    )
    assert "arn:aws:iam::444455556666:root" in trust and "created-later/NewHires" in trust and '"ArnEquals"' in trust
    assert '"ArnLike"' in trust and "AWSReservedSSO_DataScientists_*" in trust


def test_a_member_created_later_and_identity_center_users_reach_their_team(synthesized):
    _, _, org = synthesized
    research = org.tenants["research"]
    world = org.world
    new_hire = Principal(arn="arn:aws:iam::444455556666:role/created-later/NewHires")
    world.add_identity(new_hire.arn, {"Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}]})
    assert world.is_allowed(Request(new_hire, "sts:AssumeRole", research.roles["submit"]))
    sso = [role for kind, role in research.roles.items() if "AWSReservedSSO_" in kind]
    assert len(sso) == 2  # with and without the Identity Center region in the path
    assert all(
        world.is_allowed(Request(Principal(arn=role), "sts:AssumeRole", research.roles["submit"])) for role in sso
    )


@pytest.mark.parametrize(
    "stranger",
    [
        "arn:aws:iam::444455556666:role/ResearchInterns",  # another role of the member's account
        "arn:aws:iam::777788889999:role/ResearchScientists",  # the member's name in another account
        "arn:aws:iam::444455556666:user/ResearchScientists",  # a user of the member's name
        "arn:aws:iam::444455556666:role/aws-reserved/sso.amazonaws.com/eu-west-2/AWSReservedSSO_DataScience_0123456789abcdef",
        "arn:aws:iam::777788889999:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_DataScientists_0123456789abcdef",
        "arn:aws:iam::444455556666:role/DataScientists",  # the permission set's name as a plain role
    ],
)
def test_nobody_else_of_the_accounts_gets_in_even_allowed_by_its_own_iam(synthesized, stranger):
    """Naming the account delegates to its IAM only for the ARNs in the condition: a role that its
    own account lets assume anything still cannot assume any team's roles."""
    _, _, org = synthesized
    world = org.world
    world.add_identity(stranger, {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
    for tenant in org.tenants.values():
        for kind in ("submit", "training", "pods"):
            assert not world.is_allowed(Request(Principal(arn=stranger), "sts:AssumeRole", tenant.roles[kind])), (
                stranger,
                tenant.name,
                kind,
            )


def test_identity_center_patterns_follow_the_documented_role_path():
    """arn:aws:iam::<account>:role/aws-reserved/sso.amazonaws.com/[<region>/]AWSReservedSSO_<set>_<suffix>
    (https://docs.aws.amazon.com/singlesignon/latest/userguide/referencingpermissionsets.html)."""
    assert identity_center_role_patterns("444455556666", "DataScientists") == (
        "arn:aws:iam::444455556666:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_DataScientists_*",
        "arn:aws:iam::444455556666:role/aws-reserved/sso.amazonaws.com/*/AWSReservedSSO_DataScientists_*",
    )
    model = load_model(None)
    research = next(t for t in model.teams if t.name == "research")
    assert research.permission_sets and identity_center_roles(model, research)  # the reference example has one


def test_audit_shows_identity_center_members_and_the_policy_their_permission_set_needs(capsys):
    from constructs_lib.cli import main

    example = Path(__file__).resolve().parents[2] / "constructs_lib" / "data" / "default-governance.yaml"
    assert main(["audit", "--config", str(example), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["teams"]["research"]["organisation"]
    (row,) = [r for r in rows if "DataScientists" in r["who"]]
    assert (
        row["who"]
        == "IAM Identity Center users of permission set DataScientists in consumer account research (444455556666)"
    )
    assert "acme-ml-research-gpu-submit" in row["can"] and row["on"].endswith(
        ":role/gpu-governance/research-gpu-submit"
    )
