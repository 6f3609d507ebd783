"""The reference organisation synthesized once with the five standard packs."""

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Match, Template

from constructs_lib.cli.report import summarise
from constructs_lib.model.loader import load_model
from constructs_lib.tenancy import submission_role_arn

from .org import synthesize_reference

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def assembly(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    model = load_model()
    stacks = synthesize_reference(model, outdir)
    return model, {s.stack_name: Template.from_stack(s) for s in stacks}, outdir


def test_no_open_findings_and_every_acknowledgement_has_a_reason(assembly):
    _, _, outdir = assembly
    summary = summarise(outdir)
    assert summary.open_findings == []
    assert summary.acknowledged
    assert all(len(reason) > 30 for reason in summary.acknowledged.values())


def test_docs_list_every_acknowledgement_reason(assembly):
    _, _, outdir = assembly
    docs = "\n".join(path.read_text() for path in sorted((ROOT / "docs").glob("*.md")))
    missing = {reason for reason in summarise(outdir).acknowledged.values() if reason not in docs}
    assert not missing, f"docs/ lacks: {missing}"


def test_cfn_lint_reports_no_errors(assembly):
    from cfnlint.api import lint

    _, _, outdir = assembly
    manifest = json.loads((Path(outdir) / "manifest.json").read_text())
    stacks = {name: a for name, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}
    assert len(stacks) == 3
    for name, artifact in stacks.items():
        region = artifact["environment"].rsplit("/", 1)[1]  # each template in its own stack's region
        template = (Path(outdir) / artifact["properties"]["templateFile"]).read_text()
        errors = [str(m) for m in lint(template, regions=[region]) if m.rule.id.startswith("E")]
        assert errors == [], f"{name}: {errors}"


def test_stacks_are_placed_in_their_accounts(assembly):
    model, templates, outdir = assembly
    manifest = json.loads((Path(outdir) / "manifest.json").read_text())
    environments = {
        name: a["environment"] for name, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"
    }
    assert environments == {
        "acme-ml-capacity": "aws://111122223333/us-east-1",
        "acme-ml-consumer-research": "aws://444455556666/us-east-1",
        "acme-ml-consumer-product": "aws://777788889999/us-west-2",
    }


def test_tenant_key_admits_only_admins_deployer_and_team_roles(assembly):
    _, templates, _ = assembly
    capacity = templates["acme-ml-capacity"]
    keys = capacity.find_resources(
        "AWS::KMS::Key", {"Properties": {"Description": Match.string_like_regexp("^Data key of GPU tenant ")}}
    )
    assert len(keys) == 3
    for key in keys.values():
        assert key["Properties"]["EnableKeyRotation"] is True
        assert key["DeletionPolicy"] == "Retain"
        statements = key["Properties"]["KeyPolicy"]["Statement"]
        for statement in statements:  # the account only with the admins' ARNs as a condition, never the whole account
            if ":root" in json.dumps(statement["Principal"]):
                assert statement["Condition"] == {
                    "ArnEquals": {"aws:PrincipalArn": ["arn:aws:iam::111122223333:role/GpuPlatformAdmin"]}
                }
        assert "cfn-exec-role" in json.dumps([s["Principal"] for s in statements])
        admin = statements[0]
        assert (
            admin["Sid"] == "PlatformAdministration" and "kms:Decrypt" not in admin["Action"]
        )  # admins manage, tenants use


def test_tenant_bucket_is_encrypted_private_versioned_logged(assembly):
    _, templates, _ = assembly
    capacity = templates["acme-ml-capacity"]
    capacity.has_resource(
        "AWS::S3::Bucket",
        {
            "DeletionPolicy": "Retain",
            "Properties": Match.object_like(
                {
                    "BucketEncryption": {
                        "ServerSideEncryptionConfiguration": [
                            Match.object_like(
                                {
                                    "ServerSideEncryptionByDefault": {
                                        "SSEAlgorithm": "aws:kms",
                                        "KMSMasterKeyID": Match.any_value(),
                                    }
                                }
                            )
                        ]
                    },
                    "PublicAccessBlockConfiguration": {
                        "BlockPublicAcls": True,
                        "BlockPublicPolicy": True,
                        "IgnorePublicAcls": True,
                        "RestrictPublicBuckets": True,
                    },
                    "VersioningConfiguration": {"Status": "Enabled"},
                    "LoggingConfiguration": {"DestinationBucketName": Match.any_value(), "LogFilePrefix": "research/"},
                }
            ),
        },
    )
    capacity.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            }
        },
    )


def test_submission_role_trusts_exactly_the_team_members(assembly):
    _, templates, _ = assembly
    capacity = templates["acme-ml-capacity"]
    capacity.has_resource_properties(
        "AWS::IAM::Role",
        {
            "RoleName": "research-gpu-submit",
            "Path": "/gpu-governance/",
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": "sts:AssumeRole",
                        "Effect": "Allow",
                        "Principal": {"AWS": "arn:aws:iam::444455556666:root"},
                        "Condition": {
                            "ArnEquals": {"aws:PrincipalArn": ["arn:aws:iam::444455556666:role/ResearchScientists"]}
                        },
                    },
                    {
                        "Action": "sts:AssumeRole",
                        "Effect": "Allow",
                        "Principal": {"AWS": "arn:aws:iam::444455556666:root"},
                        "Condition": {
                            "ArnLike": {
                                "aws:PrincipalArn": [
                                    "arn:aws:iam::444455556666:role/aws-reserved/sso.amazonaws.com/*/AWSReservedSSO_DataScientists_*",
                                    "arn:aws:iam::444455556666:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_DataScientists_*",
                                ]
                            }
                        },
                    },
                ]
            },
        },
    )
    statements = [
        s
        for p in capacity.find_resources("AWS::IAM::ManagedPolicy").values()
        if p["Properties"].get("Description", "").endswith("team research")
        or p["Properties"].get("Description", "").startswith("Pass the training role of team research")
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    pass_role = next(s for s in statements if s["Action"] == "iam:PassRole")
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    assert "TeamresearchExecutionRole" in json.dumps(pass_role["Resource"])
    # submission for both pools the team is in, each only as its own share
    shares = json.dumps(statements)
    assert "quota-share/research" in shares and "quota-share/training" not in shares
    assert '"batch:ShareIdentifier": "research"' in shares


def test_consumer_accounts_can_only_assume_their_teams_submission_roles(assembly):
    model, templates, _ = assembly
    research = templates["acme-ml-consumer-research"]
    policies = research.find_resources("AWS::IAM::ManagedPolicy")
    resources = sorted(p["Properties"]["PolicyDocument"]["Statement"][0]["Resource"] for p in policies.values())
    assert resources == sorted(submission_role_arn("111122223333", t) for t in ("research", "training"))
    for policy in policies.values():
        assert policy["Properties"]["PolicyDocument"]["Statement"][0]["Action"] == "sts:AssumeRole"
    product = templates["acme-ml-consumer-product"]
    product.has_resource_properties("AWS::IAM::ManagedPolicy", {"Roles": ["ProductionML"]})


def test_submission_role_arn_matches_the_role_the_capacity_stack_creates(assembly):
    _, templates, _ = assembly
    roles = templates["acme-ml-capacity"].find_resources(
        "AWS::IAM::Role", {"Properties": {"RoleName": "training-gpu-submit"}}
    )
    role = next(iter(roles.values()))["Properties"]
    assert (
        submission_role_arn("111122223333", "training")
        == f"arn:aws:iam::111122223333:role{role['Path']}{role['RoleName']}"
    )


def test_the_submission_guard_watches_every_quota_share_queue_in_dry_run(assembly):
    """Deployed by the reference capacity stack: the function (dry run unless guard_mode: act), the
    rule on Batch service-job state changes of each quota-share queue, and a role that may stop only
    governed teams' service jobs."""
    model, templates, _ = assembly
    capacity = templates[f"{model.organisation}-capacity"]
    (function,) = capacity.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "gpu_governance_runtime.guard.handler.handler"}}
    ).values()
    variables = function["Properties"]["Environment"]["Variables"]
    assert variables["DRY_RUN"] == "true" and model.guard_mode == "dry_run"
    quota_pools = sorted(p.name for p in model.pools if p.backend == "batch_quota_share")
    assert [
        q["pool"]
        for q in json.loads(
            "".join(p if isinstance(p, str) else "<token>" for p in variables["GUARD_QUEUES"]["Fn::Join"][1])
        )
    ] == quota_pools
    (rule,) = [
        r
        for lid, r in capacity.find_resources("AWS::Events::Rule").items()
        if lid.startswith("SubmissionGuard") and "EventPattern" in r["Properties"]
    ]
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.batch"] and pattern["detail-type"] == ["Batch Service Job State Change"]
    assert len(pattern["detail"]["jobQueue"]) == len(quota_pools) and "RUNNABLE" in pattern["detail"]["status"]
    (role,) = [
        r for lid, r in capacity.find_resources("AWS::IAM::Role").items() if lid.startswith("SubmissionGuardRole")
    ]
    assert [s["Principal"] for s in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]] == [
        {"Service": "lambda.amazonaws.com"}
    ]
    (policy,) = [
        p
        for lid, p in capacity.find_resources("AWS::IAM::Policy").items()
        if lid.startswith("SubmissionGuardRoleDefaultPolicy")
    ]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    terminate = next(s for s in statements if s["Action"] == "batch:TerminateServiceJob")
    assert terminate["Condition"] == {"Null": {"aws:ResourceTag/gpu-governance:team": "false"}}
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert not {
        a
        for a in actions
        if a.startswith(("batch:Submit", "batch:Update", "iam:", "sts:", "s3:", "sagemaker:Create", "sagemaker:Stop"))
    }
