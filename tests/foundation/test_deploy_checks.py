"""What only a deployment would refuse, found offline (constructs_lib.organisation.deploy_checks,
docs/delivery.md): each check fails on a template the way CloudFormation, IAM or KMS would, and
the reference organisation, in both stack layouts, passes all of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.deploy_checks import check_deployable

from .org import default_data, synthesize_reference

ROOT = Path(__file__).resolve().parents[2]
CAPACITY = ("111122223333", "us-east-1")
DEPLOYER = {
    "Fn::Sub": "arn:${AWS::Partition}:iam::111122223333:role/cdk-hnb659fds-cfn-exec-role-111122223333-us-east-1"
}
DEPLOYER_ADMINISTERS = {
    "Sid": "DeploymentAdministration",
    "Effect": "Allow",
    "Action": ["kms:Put*", "kms:Get*"],
    "Principal": {"AWS": DEPLOYER},
    "Resource": "*",
}


def assembly(tmp_path: Path, stacks: dict[str, tuple[tuple[str, str], dict]]) -> Path:
    """A cloud assembly of ``stacks`` (name -> ((account, region), template)), as cdk.out holds it."""
    artifacts = {}
    for name, ((account, region), template) in stacks.items():
        (tmp_path / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "environment": f"aws://{account}/{region}",
            "properties": {"templateFile": f"{name}.template.json"},
        }
    (tmp_path / "manifest.json").write_text(json.dumps({"version": "48.0.0", "artifacts": artifacts}))
    return tmp_path


def one_stack(tmp_path: Path, resources: dict, outputs: dict | None = None) -> list[str]:
    outdir = assembly(tmp_path, {"org-capacity": (CAPACITY, {"Resources": resources, "Outputs": outputs or {}})})
    return [str(problem) for problem in check_deployable(outdir)]


def key(*statements: dict) -> dict:
    return {
        "Type": "AWS::KMS::Key",
        "Properties": {"KeyPolicy": {"Version": "2012-10-17", "Statement": list(statements)}},
    }


def test_a_member_role_named_as_principal_is_refused_as_iam_would(tmp_path):
    trust = {
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "sts:AssumeRole",
                "Principal": {"AWS": "arn:aws:iam::444455556666:role/NotYetCreated"},
            }
        ]
    }
    (problem,) = one_stack(
        tmp_path, {"Submit": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": trust}}}
    )
    assert (
        problem.startswith("org-capacity.Submit: names a principal that must exist at deployment")
        and "NotYetCreated" in problem
    )
    trust["Statement"][0]["Principal"] = {"AWS": "arn:aws:iam::444455556666:root"}
    trust["Statement"][0]["Condition"] = {
        "ArnEquals": {"aws:PrincipalArn": "arn:aws:iam::444455556666:role/NotYetCreated"}
    }
    assert (
        one_stack(tmp_path, {"Submit": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": trust}}})
        == []
    )


def test_a_key_policy_that_locks_out_the_deploying_role_is_refused_as_kms_would(tmp_path):
    admins_only = {
        "Effect": "Allow",
        "Action": ["kms:DescribeKey", "kms:ScheduleKeyDeletion"],
        "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
        "Resource": "*",
    }
    (problem,) = one_stack(tmp_path, {"Key": key(admins_only)})
    assert problem.startswith("org-capacity.Key: key policy would lock out the deploying role")
    narrowed = {**DEPLOYER_ADMINISTERS, "Condition": {"StringEquals": {"aws:PrincipalTag/x": "y"}}}
    assert len(one_stack(tmp_path, {"Key": key(narrowed)})) == 1  # a condition the deployment may not meet
    assert one_stack(tmp_path, {"Key": key(admins_only, DEPLOYER_ADMINISTERS)}) == []
    account_administers = {
        "Effect": "Allow",
        "Action": "kms:*",
        "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
        "Resource": "*",
    }
    assert one_stack(tmp_path, {"Key": key(account_administers)}) == []
    joined = {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::111122223333:root"]]
    }  # without partition literals
    assert one_stack(tmp_path, {"Key": key({**account_administers, "Principal": {"AWS": joined}})}) == []
    other_account = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::444455556666:root"]]}
    assert len(one_stack(tmp_path, {"Key": key({**account_administers, "Principal": {"AWS": other_account}})})) == 1


def test_a_retained_resource_with_a_fixed_name_is_refused_as_a_second_create_would_be(tmp_path):
    repository = {
        "Type": "AWS::ECR::Repository",
        "DeletionPolicy": "Retain",
        "Properties": {"RepositoryName": "org/research"},
    }
    (problem,) = one_stack(tmp_path, {"Repository": repository})
    assert "retained AWS::ECR::Repository with a fixed name" in problem and "org/research" in problem
    assert one_stack(tmp_path, {"Repository": {**repository, "DeletionPolicy": "Delete"}}) == []
    assert one_stack(tmp_path, {"Repository": {**repository, "Properties": {}}}) == []  # generated name


def test_names_unique_per_account_or_region_are_refused_twice(tmp_path):
    def role(name: str) -> dict:
        return {
            "Type": "AWS::IAM::Role",
            "Properties": {"RoleName": name, "AssumeRolePolicyDocument": {"Statement": []}},
        }

    def table(name: str) -> dict:
        return {"Type": "AWS::DynamoDB::Table", "Properties": {"TableName": name}}

    # IAM names ignore case and region; a table name is per region.
    outdir = assembly(
        tmp_path,
        {
            "east": (CAPACITY, {"Resources": {"A": role("acme-reclaim"), "T": table("ledger")}}),
            "west": (("111122223333", "us-west-2"), {"Resources": {"B": role("ACME-reclaim"), "T": table("ledger")}}),
        },
    )
    assert [str(p) for p in check_deployable(outdir)] == [
        "west.B: name already used by east.A ('acme-reclaim') - a name unique where AWS requires it"
    ]


def test_an_import_across_accounts_is_refused_as_cloudformation_would(tmp_path):
    outdir = assembly(
        tmp_path,
        {
            "capacity": (
                CAPACITY,
                {"Resources": {}, "Outputs": {"Queue": {"Value": "q", "Export": {"Name": "org-queue"}}}},
            ),
            "consumer": (
                ("444455556666", "us-east-1"),
                {
                    "Resources": {
                        "P": {
                            "Type": "AWS::IAM::ManagedPolicy",
                            "Properties": {
                                "PolicyDocument": {
                                    "Statement": [
                                        {
                                            "Effect": "Allow",
                                            "Action": "batch:*",
                                            "Resource": {"Fn::ImportValue": "org-queue"},
                                        }
                                    ]
                                }
                            },
                        }
                    }
                },
            ),
        },
    )
    (problem,) = [str(p) for p in check_deployable(outdir)]
    assert problem.startswith(
        "consumer: imports a value no stack of its account and region exports (exported in 111122223333/us-east-1)"
    )


@pytest.mark.parametrize("layout", ["single", "per_team"])
def test_the_reference_organisation_passes_every_deploy_time_check(layout, tmp_path):
    data = default_data()
    data["stack_layout"] = layout
    synthesize_reference(GovernanceModel.from_dict(data), tmp_path, packs=False)
    assert check_deployable(tmp_path) == []
    manifest = json.loads((tmp_path / "manifest.json").read_text())["artifacts"]
    stacks = {name for name, a in manifest.items() if a["type"] == "aws:cloudformation:stack"}
    # The first deployment's order (docs/delivery.md): everything after the capacity stack.
    assert all("acme-ml-capacity" in manifest[name]["dependencies"] for name in stacks - {"acme-ml-capacity"})
    if layout == "per_team":  # the stack docs/architecture.md tells users to destroy when removing a team
        assert {f"acme-ml-team-{team['name']}" for team in data["teams"]} <= stacks


def test_the_app_stops_on_what_a_deployment_would_refuse(tmp_path, monkeypatch):
    """app.py exits 1 with the problem lines, after synthesis, like the limits' safety net."""
    script = (
        "import sys; from constructs_lib.deployment import app; "
        "app.check_deployable = lambda outdir: ['acme-ml-capacity.Key: key policy would lock out the deploying role']; "
        "sys.exit(app.main())"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'lambda'}",
        "CDK_OUTDIR": str(tmp_path / "out"),
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    (tmp_path / "governance.yaml").write_text(yaml.safe_dump(default_data()))
    env["CDK_CONTEXT_JSON"] = json.dumps({"config": str(tmp_path / "governance.yaml")})
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 1, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]  # no cdk.json here
    assert lines[:2] == [
        "synthesized templates would be refused at deployment:",
        "acme-ml-capacity.Key: key policy would lock out the deploying role",
    ]
