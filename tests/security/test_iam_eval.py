"""The evaluator itself, on cases whose AWS decision is documented (IAM policy evaluation logic,
condition operators, KMS key policies, role trust, SCPs)."""

from __future__ import annotations

import pytest

from .iam_eval import (
    Principal,
    Request,
    Template,
    UnresolvedIntrinsic,
    World,
    conditions_hold,
    evaluate,
    link_exports,
    unreadable_policy,
)

A = "111111111111"
B = "222222222222"
ALICE = Principal(arn=f"arn:aws:iam::{A}:role/alice")
BOB = Principal(arn=f"arn:aws:iam::{B}:role/bob")
KEY = f"arn:aws:kms:us-east-1:{A}:key/k1"
ROLE = f"arn:aws:iam::{A}:role/target"


def doc(*statements):
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(action, resource="*", **extra):
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def deny(action, resource="*", **extra):
    return {"Effect": "Deny", "Action": action, "Resource": resource, **extra}


def ask(document, action, resource="*", **context):
    """``aws_PrincipalTag__team=["a"]`` is the context key ``aws:principaltag/team``."""
    keys = {k.replace("__", "/").replace("_", ":", 1).lower(): v for k, v in context.items()}
    verdict = evaluate([document], Request(ALICE, action, resource, keys))
    return verdict.allowed and not verdict.denied


def test_allow_deny_and_default_deny():
    assert ask(doc(allow("s3:GetObject")), "s3:GetObject")
    assert not ask(doc(allow("s3:GetObject")), "s3:PutObject")  # implicit deny
    assert not ask(doc(allow("s3:*"), deny("s3:PutObject")), "s3:PutObject")  # explicit deny wins
    assert ask(doc(allow("S3:get*")), "s3:GetObject")  # actions are case-insensitive


def test_wildcards_in_actions_and_resources():
    bucket = doc(allow("s3:GetObject", "arn:aws:s3:::data/team-?/*"))
    assert ask(bucket, "s3:GetObject", "arn:aws:s3:::data/team-a/x.bin")
    assert not ask(bucket, "s3:GetObject", "arn:aws:s3:::data/team-ab/x.bin")
    assert not ask(bucket, "s3:GetObject", "arn:aws:s3:::DATA/team-a/x.bin")  # resources are case-sensitive


def test_not_action_and_not_resource():
    assert ask(doc({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}), "s3:GetObject")
    assert not ask(doc({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}), "iam:PassRole")
    everything_but = doc({"Effect": "Allow", "Action": "s3:*", "NotResource": "arn:aws:s3:::secret/*"})
    assert ask(everything_but, "s3:GetObject", "arn:aws:s3:::open/x")
    assert not ask(everything_but, "s3:GetObject", "arn:aws:s3:::secret/x")


@pytest.mark.parametrize(
    "block,context,expected",
    [
        ({"StringEquals": {"aws:RequestTag/team": "a"}}, {"aws:requesttag/team": ["a"]}, True),
        ({"StringEquals": {"aws:RequestTag/team": "a"}}, {"aws:requesttag/team": ["b"]}, False),
        ({"StringEquals": {"aws:RequestTag/team": "a"}}, {}, False),  # absent key matches nothing
        ({"StringNotEquals": {"aws:RequestTag/team": "a"}}, {}, True),  # ... so the negation holds
        ({"StringEqualsIfExists": {"aws:RequestTag/team": "a"}}, {}, True),
        (
            {"StringLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/team-*"}},
            {"aws:principalarn": ["arn:aws:iam::1:role/team-x"]},
            True,
        ),
        (
            {"StringNotLike": {"aws:PrincipalArn": "*admin*"}},
            {"aws:principalarn": ["arn:aws:iam::1:role/myadmin"]},
            False,
        ),
        (
            {"ArnLike": {"aws:SourceArn": "arn:aws:sagemaker:*:1:training-job/a-*"}},
            {"aws:sourcearn": ["arn:aws:sagemaker:us-east-1:1:training-job/a-x"]},
            True,
        ),
        (
            {"ArnLike": {"aws:SourceArn": "arn:aws:sagemaker:*:1:training-job/a-*"}},
            {"aws:sourcearn": ["arn:aws:sagemaker:us-east-1:1:training-job/b-a-x"]},
            False,
        ),
        (
            {"ArnLike": {"aws:SourceArn": "arn:aws:*:*:1:x"}},
            {"aws:sourcearn": ["arn:aws:s3:us:east:1:x"]},
            False,
        ),  # wildcard stays in its field
        (
            {"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:1:t"}},
            {"aws:sourcearn": ["arn:aws:sns:us-east-1:1:t"]},
            True,
        ),
        (
            {"ArnNotEquals": {"aws:SourceArn": "arn:aws:sns:us-east-1:1:t"}},
            {"aws:sourcearn": ["arn:aws:sns:us-east-1:1:t"]},
            False,
        ),
        ({"Null": {"aws:ResourceTag/team": "true"}}, {}, True),
        ({"Null": {"aws:ResourceTag/team": "true"}}, {"aws:resourcetag/team": ["b"]}, False),
        ({"Null": {"aws:ResourceTag/team": "false"}}, {"aws:resourcetag/team": ["b"]}, True),
        ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:securetransport": ["false"]}, True),
        ({"Bool": {"aws:SecureTransport": "false"}}, {}, False),
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": ["team"]}}, {"aws:tagkeys": ["x", "team"]}, True),
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": ["team"]}}, {"aws:tagkeys": ["x"]}, False),
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": ["team"]}}, {}, False),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["team", "cost"]}}, {"aws:tagkeys": ["team"]}, True),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["team", "cost"]}}, {"aws:tagkeys": ["team", "x"]}, False),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["team"]}}, {}, True),  # vacuously true
        ({"ForAnyValue:StringNotEquals": {"aws:TagKeys": ["team"]}}, {"aws:tagkeys": ["team"]}, False),
        ({"NumericLessThanEquals": {"batch:SchedulingPriority": "50"}}, {"batch:schedulingpriority": ["40"]}, True),
        (
            {"StringEquals": {"aws:RequestTag/team": "a", "batch:ShareIdentifier": "a"}},
            {"aws:requesttag/team": ["a"]},
            False,
        ),  # keys AND
        ({"StringEquals": {"aws:RequestTag/team": ["a", "b"]}}, {"aws:requesttag/team": ["b"]}, True),  # values OR
    ],
)
def test_condition_operators(block, context, expected):
    assert conditions_hold(block, context) is expected


def test_policy_variables():
    own_prefix = doc(allow("s3:GetObject", "arn:aws:s3:::data/${aws:PrincipalTag/team}/*"))
    assert ask(own_prefix, "s3:GetObject", "arn:aws:s3:::data/a/x", aws_PrincipalTag__team=["a"])
    assert not ask(own_prefix, "s3:GetObject", "arn:aws:s3:::data/b/x", aws_PrincipalTag__team=["a"])
    assert not ask(own_prefix, "s3:GetObject", "arn:aws:s3:::data//x")  # absent variable matches nothing
    literal_star = doc(allow("s3:GetObject", "arn:aws:s3:::data/${*}"))
    assert ask(literal_star, "s3:GetObject", "arn:aws:s3:::data/*")
    assert not ask(literal_star, "s3:GetObject", "arn:aws:s3:::data/x")
    tagged = doc(
        allow("batch:TerminateJob", Condition={"StringEquals": {"aws:ResourceTag/team": "${aws:PrincipalTag/team}"}})
    )
    assert ask(tagged, "batch:TerminateJob", aws_ResourceTag__team=["a"], aws_PrincipalTag__team=["a"])
    assert not ask(tagged, "batch:TerminateJob", aws_ResourceTag__team=["b"], aws_PrincipalTag__team=["a"])


def _world() -> World:
    world = World()
    world.key_policies[KEY] = doc(
        {"Effect": "Allow", "Principal": {"AWS": ALICE.arn}, "Action": "kms:Decrypt", "Resource": "*"},
        {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{A}:root"}, "Action": "kms:Encrypt", "Resource": "*"},
        {"Effect": "Allow", "Principal": {"AWS": BOB.arn}, "Action": "kms:GenerateDataKey", "Resource": "*"},
    )
    world.trust[ROLE] = doc(
        {"Effect": "Allow", "Principal": {"AWS": ALICE.arn}, "Action": "sts:AssumeRole"},
        {"Effect": "Allow", "Principal": {"AWS": BOB.arn}, "Action": "sts:AssumeRole"},
        {
            "Effect": "Allow",
            "Principal": {"Service": "sagemaker.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {"ArnLike": {"aws:SourceArn": f"arn:aws:sagemaker:*:{A}:training-job/a-*"}},
        },
    )
    world.bucket_accounts["data"] = A
    world.bucket_policies["data"] = [
        doc(
            {
                "Effect": "Allow",
                "Principal": {"AWS": BOB.arn},
                "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::data/*",
            },
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": "arn:aws:s3:::data/*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        )
    ]
    return world


def test_kms_key_policy_is_required_and_root_only_delegates():
    world = _world()
    assert world.is_allowed(Request(ALICE, "kms:Decrypt", KEY))  # named in the key policy
    assert not world.is_allowed(Request(ALICE, "kms:Encrypt", KEY))  # root: needs IAM too
    world.add_identity(ALICE.arn, doc(allow("kms:Encrypt"), allow("kms:ReEncrypt*")))
    assert world.is_allowed(Request(ALICE, "kms:Encrypt", KEY))
    assert not world.is_allowed(Request(ALICE, "kms:ReEncryptFrom", KEY))  # IAM alone never suffices
    assert not world.is_allowed(Request(BOB, "kms:GenerateDataKey", KEY))  # cross-account: needs both
    world.add_identity(BOB.arn, doc(allow("kms:GenerateDataKey", KEY)))
    assert world.is_allowed(Request(BOB, "kms:GenerateDataKey", KEY))


def test_role_trust_same_and_cross_account():
    world = _world()
    assert world.is_allowed(Request(ALICE, "sts:AssumeRole", ROLE))  # same account, trust names her
    assert not world.is_allowed(Request(BOB, "sts:AssumeRole", ROLE))  # cross-account: needs IAM too
    world.add_identity(BOB.arn, doc(allow("sts:AssumeRole", ROLE)))
    assert world.is_allowed(Request(BOB, "sts:AssumeRole", ROLE))
    carol = Principal(arn=f"arn:aws:iam::{A}:role/carol")
    world.add_identity(carol.arn, doc(allow("sts:AssumeRole")))
    assert not world.is_allowed(Request(carol, "sts:AssumeRole", ROLE))  # trust must name her
    sagemaker = Principal(service="sagemaker.amazonaws.com")
    job = lambda name: {"aws:SourceArn": [f"arn:aws:sagemaker:us-east-1:{A}:training-job/{name}"]}  # noqa: E731
    assert world.is_allowed(Request(sagemaker, "sts:AssumeRole", ROLE, job("a-train")))
    assert not world.is_allowed(Request(sagemaker, "sts:AssumeRole", ROLE, job("b-train")))


def test_bucket_policy_same_and_cross_account():
    world = _world()
    obj = "arn:aws:s3:::data/x"
    assert not world.is_allowed(Request(ALICE, "s3:GetObject", obj, {"aws:SecureTransport": ["true"]}))
    world.add_identity(ALICE.arn, doc(allow("s3:GetObject")))
    assert world.is_allowed(
        Request(ALICE, "s3:GetObject", obj, {"aws:SecureTransport": ["true"]})
    )  # same account: IAM suffices
    assert not world.is_allowed(
        Request(ALICE, "s3:GetObject", obj, {"aws:SecureTransport": ["false"]})
    )  # bucket Deny wins
    assert not world.is_allowed(
        Request(BOB, "s3:GetObject", obj, {"aws:SecureTransport": ["true"]})
    )  # cross: needs IAM too
    world.add_identity(BOB.arn, doc(allow("s3:GetObject")))
    assert world.is_allowed(Request(BOB, "s3:GetObject", obj, {"aws:SecureTransport": ["true"]}))


def test_pass_role_is_identity_only_and_scps_intersect():
    world = _world()
    world.add_identity(
        ALICE.arn,
        doc(
            allow("iam:PassRole", ROLE, Condition={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}),
            allow("ec2:*"),
        ),
    )
    assert world.is_allowed(Request(ALICE, "iam:PassRole", ROLE, {"iam:PassedToService": ["sagemaker.amazonaws.com"]}))
    assert not world.is_allowed(Request(ALICE, "iam:PassRole", ROLE, {"iam:PassedToService": ["ec2.amazonaws.com"]}))
    assert world.is_allowed(Request(ALICE, "ec2:PurchaseCapacityBlock", "*"))
    world.scps[A] = [doc(allow("*")), doc(deny("ec2:Purchase*"))]
    assert not world.is_allowed(Request(ALICE, "ec2:PurchaseCapacityBlock", "*"))  # SCP deny
    assert world.is_allowed(Request(ALICE, "ec2:RunInstances", "*"))
    world.scps[A] = [doc(allow("s3:*"))]
    assert not world.is_allowed(Request(ALICE, "ec2:RunInstances", "*"))  # SCP allows only s3
    assert not world.is_allowed(
        Request(ALICE, "iam:PassRole", ROLE, {"iam:PassedToService": ["sagemaker.amazonaws.com"]})
    )


def test_template_resolves_intrinsics_to_arns():
    template = Template(
        "s",
        {
            "Conditions": {
                "Aws": {"Fn::Equals": [{"Ref": "AWS::Partition"}, "aws"]},
                "NotAws": {"Fn::Not": [{"Condition": "Aws"}]},
            },
            "Resources": {
                "Role": {"Type": "AWS::IAM::Role", "Properties": {"RoleName": "r", "Path": "/p/"}},
                "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
                "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "b"}},
            },
        },
        A,
        "eu-west-1",
    )
    assert template.resolve({"Fn::GetAtt": ["Role", "Arn"]}) == f"arn:aws:iam::{A}:role/p/r"
    assert template.resolve({"Fn::Join": ["", [{"Fn::GetAtt": ["Bucket", "Arn"]}, "/*"]]}) == "arn:aws:s3:::b/*"
    assert (
        template.resolve({"Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:x/${Role}"})
        == f"arn:aws:logs:eu-west-1:{A}:x/r"
    )
    assert (
        template.resolve({"Fn::Sub": ["${Arn}/x-${!Literal}", {"Arn": {"Fn::GetAtt": ["Key", "Arn"]}}]})
        == f"arn:aws:kms:eu-west-1:{A}:key/s-key/x-${{Literal}}"
    )
    assert template.resolve({"Fn::Select": [1, {"Fn::Split": [",", "a,b"]}]}) == "b"
    assert template.resolve({"Fn::If": ["Aws", "a", "b"]}) == "a"
    assert template.resolve({"Fn::If": ["NotAws", "a", "b"]}) == "b"
    with pytest.raises(UnresolvedIntrinsic, match="Fn::ImportValue x: no stack"):
        template.resolve({"Fn::ImportValue": "x"})


def stack(name, resources, account=A, region="us-east-1", outputs=None):
    return Template(
        name,
        {"Resources": resources, "Outputs": outputs or {}, "Parameters": {"Version": {"Type": "String"}}},
        account,
        region,
    )


def test_import_value_resolves_against_the_exports_of_the_same_account_and_region():
    exported = {"Queue": {"Value": {"Fn::GetAtt": ["Queue", "JobQueueArn"]}, "Export": {"Name": "cap:Queue"}}}
    capacity = stack(
        "cap", {"Queue": {"Type": "AWS::Batch::JobQueue", "Properties": {"JobQueueName": "q"}}}, outputs=exported
    )
    team, elsewhere = stack("team", {}), stack("team", {}, region="eu-west-1")
    link_exports([capacity, team, elsewhere])
    # Resolved in the exporting stack: its account, region and resources, not the importer's.
    assert (
        team.resolve({"Fn::Join": ["", [{"Fn::ImportValue": "cap:Queue"}, "/quota-share/a"]]})
        == f"arn:aws:batch:us-east-1:{A}:job-queue/q/quota-share/a"
    )
    with pytest.raises(UnresolvedIntrinsic, match="no stack in .*/eu-west-1 exports it"):
        elsewhere.resolve({"Fn::ImportValue": "cap:Queue"})
    with pytest.raises(UnresolvedIntrinsic, match="also exported by cap"):
        link_exports([capacity, stack("other", capacity.resources, outputs=exported)])


def test_a_value_the_evaluator_cannot_compute_fails_every_request_that_depends_on_it():
    """Never 'matches nothing': an Allow on an unmodelled ARN could be the very hole looked for."""
    template = stack("s", {"Fn": {"Type": "AWS::Lambda::Function", "Properties": {}}})
    with pytest.raises(UnresolvedIntrinsic, match="does not define"):
        template.resolve({"Ref": "Missing"})
    with pytest.raises(UnresolvedIntrinsic, match="does not define"):
        template.resolve({"Fn::GetAtt": ["Missing", "Arn"]})
    with pytest.raises(UnresolvedIntrinsic, match="Fn::Split"):
        template.resolve({"Fn::Split": [":", {"Fn::GetAtt": ["Fn", "Arn"]}]})
    policy = template.resolve(
        doc(
            allow("lambda:InvokeFunction", {"Fn::GetAtt": ["Fn", "Arn"]}),
            allow("s3:GetObject", {"Fn::Sub": "${Version}/*"}),
        )
    )
    world = World(identity={ALICE.arn: [policy]})
    for action in ("lambda:InvokeFunction", "s3:GetObject"):
        with pytest.raises(UnresolvedIntrinsic, match="s:(Fn.Arn|Version.Ref)"):
            world.is_allowed(Request(ALICE, action, "arn:aws:lambda:us-east-1:1:function:f"))
    assert not world.is_allowed(Request(ALICE, "sqs:SendMessage", "*"))  # no statement depends on it
    world.add_identity(BOB.arn, unreadable_policy("arn:aws:iam::aws:policy/AdministratorAccess"))
    with pytest.raises(UnresolvedIntrinsic, match="AdministratorAccess"):
        world.is_allowed(Request(BOB, "sqs:SendMessage", "*"))


def test_an_ecr_repository_policy_deny_outweighs_an_identity_allow_and_its_absence_delegates_to_iam():
    """ECR repository policies are resource policies: in the owner's account an identity Allow
    suffices unless the repository policy denies; across accounts both must allow."""
    repository = f"arn:aws:ecr:us-east-1:{A}:repository/org/team"
    world = World()
    world.add_identity(ALICE.arn, doc(allow("ecr:BatchGetImage")))
    world.add_identity(BOB.arn, doc(allow("ecr:BatchGetImage")))
    pull = lambda who: world.is_allowed(Request(who, "ecr:BatchGetImage", repository))  # noqa: E731
    assert pull(ALICE) and not pull(BOB)  # no repository policy: IAM in the account, nothing across
    world.repository_policies[repository] = doc(
        deny(
            "ecr:BatchGetImage",
            Principal={"AWS": "*"},
            Condition={"ArnNotEquals": {"aws:PrincipalArn": [f"arn:aws:iam::{A}:role/owner"]}},
        )
    )
    assert not pull(ALICE)
    assert (
        world.is_allowed(Request(Principal(arn=f"arn:aws:iam::{A}:role/owner"), "ecr:BatchGetImage", repository))
        is False
    )  # no identity allow
    world.add_identity(f"arn:aws:iam::{A}:role/owner", doc(allow("ecr:*")))
    assert world.is_allowed(Request(Principal(arn=f"arn:aws:iam::{A}:role/owner"), "ecr:BatchGetImage", repository))
