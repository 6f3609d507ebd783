"""Who the tenant resources trust: platform admins operate tenant keys without widening who may
use them, submission roles trust members only from inside the organisation (unless an account
is listed as external), and no role the library creates can be made a member or an admin.

The reference organisation is synthesized once, with an organisation id and one external
account declared, under the standard compliance packs."""

from __future__ import annotations

import fnmatch
import json

import pytest
from aws_cdk import App, Stack, aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib.cli.report import summarise
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import load_model
from constructs_lib.tenancy import TeamTenancy
from tests.foundation.org import default_data, synthesize_reference

ORGANIZATION_ID = "o-a1b2c3d4e5"
PARTNER = "123412341234"  # an account outside the organisation, listed in external_accounts
PARTNER_CI = f"arn:aws:iam::{PARTNER}:role/PartnerCI"
ADMIN = "arn:aws:iam::111122223333:role/GpuPlatformAdmin"
# Actions that would let an admin use a tenant key or widen who may (grants, policy, the aliases
# and tags that access conditions can read).
WIDENING = [
    "kms:CreateGrant",
    "kms:PutKeyPolicy",
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
    "kms:GenerateDataKey",
    "kms:CreateAlias",
    "kms:UpdateAlias",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ImportKeyMaterial",
]


def organisation_data() -> dict:
    data = default_data()
    data["organization_id"] = ORGANIZATION_ID
    data["external_accounts"] = [PARTNER]
    data["teams"][0]["members"].append(PARTNER_CI)
    return data


@pytest.fixture(scope="module")
def assembly(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    model = GovernanceModel.from_dict(organisation_data())
    stacks = synthesize_reference(model, outdir)
    capacity = next(s for s in stacks if s.stack_name == "acme-ml-capacity")
    return model, capacity, Template.from_stack(capacity), outdir


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def _aws_principals(statement: dict) -> list:
    return _listed(statement.get("Principal", {}).get("AWS", []))


def tenant_key_policies(template: Template) -> dict[str, list[dict]]:
    keys = template.find_resources("AWS::KMS::Key")
    return {
        logical_id: key["Properties"]["KeyPolicy"]["Statement"]
        for logical_id, key in keys.items()
        if key["Properties"]["Description"].startswith("Data key of GPU tenant")
    }


def test_the_packs_find_nothing_open(assembly):
    *_, outdir = assembly
    assert summarise(outdir).open_findings == []


def test_platform_admins_operate_tenant_keys_but_cannot_widen_who_uses_them(assembly):
    model, _, template, _ = assembly
    policies = tenant_key_policies(template)
    assert len(policies) == len(model.teams)
    for logical_id, statements in policies.items():
        # The admins' account as principal, narrowed to the admins by aws:PrincipalArn (issue 30).
        admin_statements = [s for s in statements if ADMIN in json.dumps(s.get("Condition", {}))]
        assert all(s["Condition"] == {"ArnEquals": {"aws:PrincipalArn": [ADMIN]}} for s in admin_statements), logical_id
        assert admin_statements, logical_id
        for statement in admin_statements:
            actions = _listed(statement["Action"])
            assert {"kms:DisableKey", "kms:ScheduleKeyDeletion", "kms:CancelKeyDeletion", "kms:DescribeKey"} <= set(
                actions
            )
            widening = [w for w in WIDENING if any(fnmatch.fnmatchcase(w, a) for a in actions)]
            assert widening == [], (logical_id, widening)


def test_the_deployment_role_keeps_the_key_policy_it_must_be_able_to_update(assembly):
    # KMS refuses to create a key whose policy locks its creator (CloudFormation) out.
    _, _, template, _ = assembly
    for logical_id, statements in tenant_key_policies(template).items():
        deployer = [s for s in statements if s.get("Sid") == "DeploymentAdministration"]
        assert len(deployer) == 1, logical_id
        assert "cfn-exec-role" in str(deployer[0]["Principal"]["AWS"])
        assert any(fnmatch.fnmatchcase("kms:PutKeyPolicy", a) for a in deployer[0]["Action"])


def test_every_trust_of_an_outside_principal_requires_the_organisation(assembly):
    model, _, template, _ = assembly
    capacity = model.capacity_account.account_id
    checked = 0
    for logical_id, role in template.find_resources("AWS::IAM::Role").items():
        for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            for principal in _aws_principals(statement):
                if not isinstance(principal, str):
                    continue  # a reference to a role of the same stack
                account = principal.split(":")[4]
                condition = statement.get("Condition", {})
                members = [arn for arn in condition.get("ArnEquals", {}).get("aws:PrincipalArn", [])]
                if account == PARTNER:
                    assert set(condition) == {"ArnEquals"}, (logical_id, principal)  # the documented opt-in
                elif account != capacity:
                    assert condition["StringEquals"] == {"aws:PrincipalOrgID": ORGANIZATION_ID}, (logical_id, principal)
                    checked += len(members)
    assert checked == sum(len(team.members) for team in model.teams) - 1  # every member but the partner's


def test_without_an_organisation_id_members_share_one_unconditioned_statement():
    stack = Stack(App(), "NoOrg", env={"account": "111122223333", "region": "us-east-1"})
    team = load_model().teams[0]
    members = ["arn:aws:iam::444455556666:role/A", "arn:aws:iam::444455556666:role/B"]
    TeamTenancy(
        stack,
        "T",
        team=team,
        organisation="acme-ml",
        platform_admins=[ADMIN],
        access_log_bucket=s3.Bucket(stack, "Logs"),
        submitters=members,
    )
    (role,) = (
        Template.from_stack(stack)
        .find_resources("AWS::IAM::Role", {"Properties": {"RoleName": "research-gpu-submit"}})
        .values()
    )
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"AWS": "arn:aws:iam::444455556666:root"},
            "Condition": {"ArnEquals": {"aws:PrincipalArn": members}},
        }
    ]


def _deployed_role_arns(capacity: Stack, template: Template) -> list[str]:
    """ARNs the capacity stack's roles get once deployed: their fixed name and path, or the
    name CloudFormation generates (stack name, logical id, random suffix; at most 64)."""
    account = capacity.account
    arns = []
    for logical_id, role in template.find_resources("AWS::IAM::Role").items():
        properties = role["Properties"]
        name = properties.get("RoleName") or f"{capacity.stack_name}-{logical_id}"[:51] + "-1A2B3C4D5E6F"
        arns.append(f"arn:aws:iam::{account}:role{properties.get('Path', '/')}{name}")
    return arns


def test_no_role_the_library_creates_can_be_a_member_or_an_admin(assembly):
    _, capacity, template, _ = assembly
    arns = _deployed_role_arns(capacity, template)
    assert len(arns) >= 10 and any("gpu-submit" in a for a in arns) and any("capacity-controller" in a for a in arns)
    for arn in arns:
        data = organisation_data()
        data["teams"][1]["members"] = [arn]
        data["platform_admins"] = [arn]
        with pytest.raises(GovernanceError) as raised:
            GovernanceModel.from_dict(data)
        paths = {problem.path for problem in raised.value.problems}
        assert {"teams[1].members[0]", "platform_admins[0]"} <= paths, arn


def test_a_tenant_key_refuses_admins_of_another_account():
    stack = Stack(App(), "Keys", env={"account": "111122223333", "region": "us-east-1"})
    stranger = "arn:aws:iam::444455556666:role/GpuPlatformAdmin"
    with pytest.raises(
        GovernanceError,
        match=r"platform_admins: not in the account of the tenant key .*444455556666.* - roles or users of account 111122223333",
    ):
        TeamTenancy(
            stack,
            "T",
            team=load_model().teams[0],
            organisation="acme-ml",
            platform_admins=[ADMIN, stranger],
            access_log_bucket=s3.Bucket(stack, "Logs"),
        )
