"""Each rule on compliant, non-compliant and not-applicable resources, evaluated directly
(no synth): every case builds its resources in one shared stack."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack, aws_batch as batch, aws_iam as iam, aws_kms as kms
from cdk_nag import NagRuleCompliance

from constructs_lib.nag import RULES, declare_capacity_controller, declare_platform_admin
from constructs_lib.nag.cfn import StackIndex

from .resources import ACCOUNT, QUEUE, access_entry, compute_quota, function, job_queue, key, policy, quota_share, role

OK, NA, BAD = NagRuleCompliance.COMPLIANT, NagRuleCompliance.NOT_APPLICABLE, NagRuleCompliance.NON_COMPLIANT
RULE = {r.id: r for r in RULES}
ROOT = f"arn:aws:iam::{ACCOUNT}:root"
TENANT = f"arn:aws:iam::{ACCOUNT}:role/a-gpu-training"
SHARE = f"{QUEUE}/quota-share/a"
JOBS = f"arn:aws:batch:us-east-1:{ACCOUNT}:job/*"
SERVICE_JOBS = f"arn:aws:batch:us-east-1:{ACCOUNT}:service-job/*"
TEAM_TAG = "gpu-governance:team"
BLOCKS = f"arn:aws:ec2:us-east-1:{ACCOUNT}:capacity-reservation/*"
LIMITS = {"GPU_GOVERNANCE_BUDGET": "25000", "GPU_GOVERNANCE_PRICE_CAP": "9000.50"}


def _controller(stack: Stack, id: str) -> iam.CfnRole:
    controller = role(stack, id)
    declare_capacity_controller(controller)
    return controller


def _purchasing_function(stack: Stack, id: str, *, variables: dict | None, concurrency: int | None):
    buyer = role(stack, f"{id}Role", {"Action": "ec2:PurchaseCapacityBlock", "Resource": BLOCKS})
    return function(stack, id, buyer.attr_arn, variables=variables, concurrency=concurrency)


def _admin_entry(stack: Stack, id: str):
    entry = access_entry(stack, id, policies=[("AmazonEKSClusterAdminPolicy", "cluster")])
    declare_platform_admin(entry)
    return entry


# (rule id, case name, build(stack) -> resource, expected result)
CASES = [
    (
        "BorrowWithoutLimit",
        "batch-limited",
        lambda s, i: quota_share(s, i, {"strategy": "LEND_AND_BORROW", "borrowLimit": 100}),
        OK,
    ),
    (
        "BorrowWithoutLimit",
        "batch-unlimited",
        lambda s, i: quota_share(s, i, {"strategy": "LEND_AND_BORROW", "borrowLimit": -1}),
        BAD,
    ),
    (
        "BorrowWithoutLimit",
        "batch-no-limit-given",
        lambda s, i: quota_share(s, i, {"strategy": "LEND_AND_BORROW"}),
        BAD,
    ),
    ("BorrowWithoutLimit", "batch-lends-only", lambda s, i: quota_share(s, i, {"strategy": "LEND"}), NA),
    (
        "BorrowWithoutLimit",
        "hyperpod-default-limit",
        lambda s, i: compute_quota(s, i, {"Strategy": "LendAndBorrow"}),
        OK,
    ),
    (
        "BorrowWithoutLimit",
        "hyperpod-ceiling",
        lambda s, i: compute_quota(s, i, {"Strategy": "LendAndBorrow", "BorrowLimit": 10000}),
        BAD,
    ),
    (
        "BorrowWithoutLimit",
        "hyperpod-default-strategy-at-ceiling",
        lambda s, i: compute_quota(s, i, {"BorrowLimit": 10000, "Strategy": "LendAndBorrow"}),
        BAD,
    ),
    ("BorrowWithoutLimit", "hyperpod-dont-lend", lambda s, i: compute_quota(s, i, {"Strategy": "DontLend"}), NA),
    ("BorrowWithoutLimit", "not-a-quota", lambda s, i: key(s, i), NA),
    (
        "SharedQueueWithoutPolicy",
        "with-policy",
        lambda s, i: job_queue(s, i, f"arn:aws:batch:us-east-1:{ACCOUNT}:scheduling-policy/fs"),
        OK,
    ),
    ("SharedQueueWithoutPolicy", "fifo", lambda s, i: job_queue(s, i, None), BAD),
    ("SharedQueueWithoutPolicy", "l2-queue-with-policy", lambda s, i: _l2_queue(s, i), OK),
    ("SharedQueueWithoutPolicy", "one-team-queue", lambda s, i: _single_team_queue(s, i), NA),
    ("SharedQueueWithoutPolicy", "not-a-queue", lambda s, i: quota_share(s, i, {"strategy": "LEND"}), NA),
    (
        "CapacityPurchaseGrant",
        "controller-on-blocks",
        lambda s, i: policy(
            s, i, [_controller(s, f"{i}R").ref], {"Action": "ec2:PurchaseCapacityBlock", "Resource": BLOCKS}
        ),
        OK,
    ),
    (
        "CapacityPurchaseGrant",
        "controller-on-star",
        lambda s, i: policy(s, i, [_controller(s, f"{i}R").ref], {"Action": "ec2:Purchase*", "Resource": "*"}),
        ["Resource::*"],
    ),
    (
        "CapacityPurchaseGrant",
        "undeclared-role",
        lambda s, i: policy(
            s,
            i,
            [role(s, f"{i}R").ref],
            {
                "Action": "sagemaker:CreateTrainingPlan",
                "Resource": "arn:aws:sagemaker:us-east-1:111111111111:training-plan/*",
            },
        ),
        ["Principal::<undeclaredroleR>"],
    ),
    (
        "CapacityPurchaseGrant",
        "imported-role-and-user",
        lambda s, i: policy(s, i, ["ops"], {"Action": "ec2:*", "Resource": BLOCKS}, users=["alice"]),
        ["Principal::ops", "Principal::alice"],
    ),
    (
        "CapacityPurchaseGrant",
        "inline-not-action",
        lambda s, i: role(s, i, {"NotAction": "iam:*", "Resource": "*"}),
        ["Resource::*", "Principal::<inlinenotaction>"],
    ),
    (
        "CapacityPurchaseGrant",
        "admin-managed-policy",
        lambda s, i: _with_managed(role(s, i), "AdministratorAccess"),
        ["ManagedPolicy::AdministratorAccess"],
    ),
    (
        "CapacityPurchaseGrant",
        "power-user-l2-role",
        lambda s, i: _l2_role(s, i, "PowerUserAccess", "ReadOnlyAccess"),
        ["ManagedPolicy::PowerUserAccess"],
    ),
    (
        "CapacityPurchaseGrant",
        "ec2-and-sagemaker-full-access-user",
        lambda s, i: _with_managed(iam.CfnUser(s, i), "AmazonEC2FullAccess", "AmazonSageMakerFullAccess"),
        ["ManagedPolicy::AmazonEC2FullAccess", "ManagedPolicy::AmazonSageMakerFullAccess"],
    ),
    (
        "CapacityPurchaseGrant",
        "managed-and-inline",
        lambda s, i: _with_managed(
            role(s, i, {"Action": "ec2:PurchaseCapacityBlock", "Resource": BLOCKS}), "AdministratorAccess"
        ),
        ["ManagedPolicy::AdministratorAccess", "Principal::<managedandinline>"],
    ),
    ("CapacityPurchaseGrant", "read-only-managed-policy", lambda s, i: _l2_role(s, i, "ReadOnlyAccess"), NA),
    (
        "CapacityPurchaseGrant",
        "describe-only",
        lambda s, i: policy(s, i, ["ops"], {"Action": "ec2:DescribeCapacityBlockOfferings", "Resource": "*"}),
        NA,
    ),
    (
        "JobControlWithoutShare",
        "team-scoped",
        lambda s, i: policy(
            s,
            i,
            ["t"],
            {
                "Action": "batch:SubmitServiceJob",
                "Resource": [QUEUE, SHARE, f"arn:aws:batch:us-east-1:{ACCOUNT}:service-job/*"],
            },
            {
                "Action": "batch:SubmitJob",
                "Resource": [QUEUE, JOBS],
                "Condition": {"StringEquals": {"batch:ShareIdentifier": "a"}},
            },
            {
                "Action": ["batch:TerminateJob", "batch:CancelJob"],
                "Resource": JOBS,
                "Condition": {"StringEquals": {"aws:ResourceTag/gpu-governance:team": "a"}},
            },
        ),
        OK,
    ),
    (
        "JobControlWithoutShare",
        "definitions-by-tag",
        lambda s, i: policy(
            s,
            i,
            ["t"],
            {
                "Action": "batch:SubmitJob",
                "Resource": [QUEUE, JOBS],
                "Condition": {"StringEquals": {"batch:ShareIdentifier": "a"}},
            },
            {
                "Action": "batch:SubmitJob",
                "Resource": f"arn:aws:batch:us-east-1:{ACCOUNT}:job-definition/a-*:*",
                "Condition": {"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": "a"}},
            },
        ),
        OK,
    ),
    (
        "JobControlWithoutShare",
        "definitions-and-jobs-without-share",
        lambda s, i: policy(
            s,
            i,
            ["t"],
            {
                "Action": "batch:SubmitJob",
                "Resource": [f"arn:aws:batch:us-east-1:{ACCOUNT}:job-definition/a-*:*", JOBS],
            },
        ),
        ["Action::batch:SubmitJob"],
    ),
    (
        "JobControlWithoutShare",
        "queue-without-share",
        lambda s, i: policy(s, i, ["t"], {"Action": "batch:SubmitServiceJob", "Resource": QUEUE}),
        ["Action::batch:SubmitServiceJob"],
    ),
    (
        "JobControlWithoutShare",
        "any-share",
        lambda s, i: policy(
            s, i, ["t"], {"Action": "batch:SubmitServiceJob", "Resource": [QUEUE, f"{QUEUE}/quota-share/*"]}
        ),
        ["Action::batch:SubmitServiceJob"],
    ),
    (
        "JobControlWithoutShare",
        "batch-star",
        lambda s, i: policy(s, i, ["t"], {"Action": "batch:*", "Resource": "*"}),
        [
            "Action::batch:SubmitServiceJob",
            "Action::batch:SubmitJob",
            "Action::batch:TerminateServiceJob",
            "Action::batch:UpdateServiceJob",
            "Action::batch:TerminateJob",
            "Action::batch:CancelJob",
        ],
    ),
    (
        "JobControlWithoutShare",
        "terminate-any",
        lambda s, i: policy(s, i, ["t"], {"Action": "batch:TerminateJob", "Resource": JOBS}),
        ["Action::batch:TerminateJob"],
    ),
    (
        "JobControlWithoutShare",
        "observe-only",
        lambda s, i: policy(s, i, ["t"], {"Action": ["batch:ListJobs", "batch:DescribeJobs"], "Resource": "*"}),
        NA,
    ),
    # Re-tag, then terminate: a team-tag grant that also works on another team's job defeats aws:ResourceTag.
    # Pinned: the team's own value on a job whose tag is absent or already its own, with documented keys only.
    (
        "JobControlWithoutShare",
        "tag-with-the-own-value-where-absent-or-own",
        lambda s, i: policy(
            s, i, ["t"], *_team_tagging({"StringEqualsIfExists": {f"aws:ResourceTag/{TEAM_TAG}": "a"}})
        ),
        OK,
    ),
    (
        "JobControlWithoutShare",
        "tag-where-absent-or-another-value",
        lambda s, i: policy(
            s, i, ["t"], *_team_tagging({"StringEqualsIfExists": {f"aws:ResourceTag/{TEAM_TAG}": "b"}})
        ),
        ["Action::batch:TagResource"],
    ),
    # Issue 37: no page says which batch:* keys the tagging inside a submission carries, nor that the
    # new job's aws:ResourceTag is absent there (IAM: present "in requests that create a resource with
    # an attached tag"). Grants that need either are no pin: they may refuse every tagged submission.
    (
        "JobControlWithoutShare",
        "tag-any-untagged-job",
        lambda s, i: policy(s, i, ["t"], *_team_tagging({"Null": {f"aws:ResourceTag/{TEAM_TAG}": "true"}})),
        ["Action::batch:TagResource"],
    ),
    (
        "JobControlWithoutShare",
        "tag-only-with-an-undocumented-submission-key",
        lambda s, i: policy(
            s,
            i,
            ["t"],
            *_team_tagging({"Null": {f"aws:ResourceTag/{TEAM_TAG}": "true", "batch:SchedulingPriority": "false"}}),
        ),
        ["Action::batch:TagResource"],
    ),
    (
        "JobControlWithoutShare",
        "tag-with-a-share-identifier-alone",
        lambda s, i: policy(s, i, ["t"], *_team_tagging({"StringEquals": {"batch:ShareIdentifier": "a"}})),
        ["Action::batch:TagResource"],
    ),
    (
        "JobControlWithoutShare",
        "tag-with-two-values",
        lambda s, i: policy(
            s,
            i,
            ["t"],
            {
                "Action": "batch:TagResource",
                "Resource": JOBS,
                "Condition": {
                    "StringEquals": {f"aws:RequestTag/{TEAM_TAG}": ["a", "b"]},
                    "StringEqualsIfExists": {f"aws:ResourceTag/{TEAM_TAG}": ["a", "b"]},
                },
            },
        ),
        ["Action::batch:TagResource"],
    ),
    (
        "JobControlWithoutShare",
        "retag-by-request-tag",
        lambda s, i: policy(s, i, ["t"], *_team_tagging({})),
        ["Action::batch:TagResource"],
    ),
    (
        "JobControlWithoutShare",
        "retag-any-job-beside-tag-scoped-control",
        lambda s, i: policy(
            s,
            i,
            ["t"],
            {"Action": "batch:Tag*", "Resource": "*"},
            {
                "Action": "batch:TerminateJob",
                "Resource": JOBS,
                "Condition": {"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": "a"}},
            },
        ),
        ["Action::batch:TagResource"],
    ),
    (
        "JobControlWithoutShare",
        "tag-a-queue-only",
        lambda s, i: policy(
            s,
            i,
            ["t"],
            {
                "Action": "batch:TagResource",
                "Resource": QUEUE,
                "Condition": {"StringEquals": {f"aws:RequestTag/{TEAM_TAG}": "a"}},
            },
        ),
        OK,
    ),
    ("PassAnyRole", "named-role", lambda s, i: policy(s, i, ["t"], {"Action": "iam:PassRole", "Resource": TENANT}), OK),
    (
        "PassAnyRole",
        "star",
        lambda s, i: policy(s, i, ["t"], {"Action": "iam:Pass*", "Resource": "*"}),
        ["Resource::*"],
    ),
    (
        "PassAnyRole",
        "every-role",
        lambda s, i: policy(s, i, ["t"], {"Action": "iam:PassRole", "Resource": f"arn:aws:iam::{ACCOUNT}:role/*"}),
        [f"Resource::arn:aws:iam::{ACCOUNT}:role/*"],
    ),
    ("PassAnyRole", "no-pass", lambda s, i: policy(s, i, ["t"], {"Action": "s3:GetObject", "Resource": "*"}), NA),
    ("KeyRotation", "rotated", lambda s, i: key(s, i), OK),
    ("KeyRotation", "not-rotated", lambda s, i: key(s, i, rotation=None), BAD),
    ("KeyRotation", "asymmetric", lambda s, i: key(s, i, rotation=None, key_spec="RSA_2048"), NA),
    ("KeyRotation", "not-a-teams-unrotated-key", lambda s, i: key(s, i, rotation=None, team=None), NA),
    ("KeyRotation", "l2-default-key-of-team-a", lambda s, i: _l2_key(s, i, team="a"), BAD),
    ("KeyRotation", "l2-default-plain-key", lambda s, i: _l2_key(s, i, team=None), NA),
    (
        "KeyAdmitsAccount",
        "tenant-roles",
        lambda s, i: key(
            s,
            i,
            {"Principal": {"AWS": ROOT}, "Action": "kms:Create*"},
            {"Principal": {"AWS": TENANT}, "Action": "kms:Decrypt"},
        ),
        OK,
    ),
    (
        "KeyAdmitsAccount",
        "account-root",
        lambda s, i: key(s, i, {"Principal": {"AWS": ROOT}, "Action": "kms:*"}),
        [f"Principal::{ROOT}"],
    ),
    (
        "KeyAdmitsAccount",
        "bare-account-id",
        lambda s, i: key(s, i, {"Principal": {"AWS": ACCOUNT}, "Action": ["kms:Decrypt"]}),
        [f"Principal::{ACCOUNT}"],
    ),
    (
        "KeyAdmitsAccount",
        "root-narrowed-to-role",
        lambda s, i: key(
            s,
            i,
            {
                "Principal": {"AWS": ROOT},
                "Action": "kms:Decrypt",
                "Condition": {"ArnEquals": {"aws:PrincipalArn": TENANT}},
            },
        ),
        OK,
    ),
    ("KeyAdmitsAccount", "not-a-key", lambda s, i: job_queue(s, i, None), NA),
    (
        "KeyAdmitsAccount",
        "not-a-teams-key",
        lambda s, i: key(s, i, {"Principal": {"AWS": ROOT}, "Action": "kms:*"}, team=None),
        NA,
    ),
    (
        "KeyAdmitsAccount",
        "l2-default-key-of-a-team",
        lambda s, i: _l2_key(s, i, team="a"),
        ["Principal::arn:<AWS::Partition>:iam::<AWS::AccountId>:root"],
    ),
    ("KeyAdmitsAccount", "l2-default-key", lambda s, i: _l2_key(s, i, team=None), NA),
    (
        "EksAccessScope",
        "namespace-edit",
        lambda s, i: access_entry(s, i, policies=[("AmazonEKSEditPolicy", "namespace")]),
        OK,
    ),
    (
        "EksAccessScope",
        "cluster-admin",
        lambda s, i: access_entry(s, i, policies=[("AmazonEKSClusterAdminPolicy", "cluster")]),
        ["Policy::AmazonEKSClusterAdminPolicy", "Scope::cluster:AmazonEKSClusterAdminPolicy"],
    ),
    (
        "EksAccessScope",
        "cluster-view",
        lambda s, i: access_entry(s, i, policies=[("AmazonEKSViewPolicy", "cluster")]),
        ["Scope::cluster:AmazonEKSViewPolicy"],
    ),
    (
        "EksAccessScope",
        "masters-group",
        lambda s, i: access_entry(s, i, groups=["system:masters"]),
        ["Group::system:masters"],
    ),
    ("EksAccessScope", "declared-admin", _admin_entry, NA),
    ("EksAccessScope", "node-role", lambda s, i: access_entry(s, i, type="EC2_LINUX"), NA),
    (
        "PresetContradiction",
        "critical-reserves",
        lambda s, i: quota_share(s, i, {"strategy": "RESERVE"}, "critical"),
        OK,
    ),
    (
        "PresetContradiction",
        "critical-lends",
        lambda s, i: quota_share(s, i, {"strategy": "LEND"}, "critical"),
        ["Preset::critical"],
    ),
    (
        "PresetContradiction",
        "steady-borrows-hyperpod",
        lambda s, i: compute_quota(s, i, {"Strategy": "LendAndBorrow", "BorrowLimit": 50}, "steady"),
        ["Preset::steady"],
    ),
    (
        "PresetContradiction",
        "steady-default-hyperpod",
        lambda s, i: compute_quota(s, i, None, "steady"),
        ["Preset::steady"],
    ),
    (
        "PresetContradiction",
        "background-hyperpod",
        lambda s, i: compute_quota(s, i, {"Strategy": "LendAndBorrow", "BorrowLimit": 100}, "background"),
        OK,
    ),
    (
        "PresetContradiction",
        "unknown-preset",
        lambda s, i: quota_share(s, i, {"strategy": "LEND"}, "vip"),
        ["Preset::vip"],
    ),
    ("PresetContradiction", "no-preset", lambda s, i: quota_share(s, i, {"strategy": "LEND"}), NA),
    ("PurchaserLimits", "limited", lambda s, i: _purchasing_function(s, i, variables=LIMITS, concurrency=1), OK),
    (
        "PurchaserLimits",
        "no-limits-concurrent",
        lambda s, i: _purchasing_function(s, i, variables=None, concurrency=None),
        ["Missing::GPU_GOVERNANCE_BUDGET", "Missing::GPU_GOVERNANCE_PRICE_CAP", "Concurrency::unreserved"],
    ),
    (
        "PurchaserLimits",
        "bad-amounts",
        lambda s, i: _purchasing_function(
            s, i, variables={"GPU_GOVERNANCE_BUDGET": "0", "GPU_GOVERNANCE_PRICE_CAP": "lots"}, concurrency=1
        ),
        ["Missing::GPU_GOVERNANCE_BUDGET", "Missing::GPU_GOVERNANCE_PRICE_CAP"],
    ),
    (
        "PurchaserLimits",
        "declared-controller-via-policy",
        lambda s, i: _function_of_declared_controller(s, i),
        ["Concurrency::unreserved"],
    ),
    (
        "PurchaserLimits",
        "ordinary-function",
        lambda s, i: function(
            s,
            i,
            role(s, f"{i}Role", {"Action": "s3:GetObject", "Resource": "*"}).attr_arn,
            variables=None,
            concurrency=None,
        ),
        NA,
    ),
]


def _with_managed(owner, *names: str):
    owner.managed_policy_arns = [f"arn:aws:iam::aws:policy/{name}" for name in names]
    return owner


def _l2_role(stack, id, *names: str):
    """An L2 role with AWS-managed policies, as CDK renders their ARNs (Fn::Join with the partition)."""
    l2 = iam.Role(
        stack,
        id,
        assumed_by=iam.AccountRootPrincipal(),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(n) for n in names],
    )
    return l2.node.default_child


def _l2_key(stack, id, *, team: str | None):
    """A kms.Key with CDK's defaults (account root may use it, no rotation), of a team or not."""
    l2 = kms.Key(stack, id)
    if team:
        l2.node.default_child.tags.set_tag(TEAM_TAG, team)  # what Tags.of(...).add does at synthesis
    return l2.node.default_child


def _team_tagging(extra_conditions: dict) -> list[dict]:
    """The library's shape of a team's tag grant plus tag-scoped terminate, with ``extra_conditions``
    on the tag grant."""
    request_tag = {f"aws:RequestTag/{TEAM_TAG}": "a"}
    equals = {**request_tag, **extra_conditions.get("StringEquals", {})}
    return [
        {
            "Action": "batch:TagResource",
            "Resource": [JOBS, SERVICE_JOBS],
            "Condition": {**extra_conditions, "StringEquals": equals},
        },
        {
            "Action": ["batch:TerminateJob", "batch:TerminateServiceJob"],
            "Resource": [JOBS, SERVICE_JOBS],
            "Condition": {"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": "a"}},
        },
    ]


def _l2_queue(stack, id):
    """aws_batch.JobQueue holds its compute environments as a lazy value: the rules must read it."""
    environment = batch.UnmanagedComputeEnvironment.from_unmanaged_compute_environment_arn(
        stack, f"{id}Environment", f"arn:aws:batch:us-east-1:{ACCOUNT}:compute-environment/ce"
    )
    queue = batch.JobQueue(
        stack,
        id,
        scheduling_policy=batch.FairshareSchedulingPolicy(stack, f"{id}Policy"),
        compute_environments=[batch.OrderedComputeEnvironment(compute_environment=environment, order=1)],
    )
    return queue.node.default_child


def _single_team_queue(stack, id):
    queue = job_queue(stack, id, None)
    queue.cfn_options.metadata = {"GpuGovernance": {"team": "a"}}
    return queue


def _function_of_declared_controller(stack, id):
    controller = _controller(stack, f"{id}Role")
    return function(stack, id, controller.attr_arn, variables=LIMITS, concurrency=None)


@pytest.fixture(scope="module")
def built():
    stack = Stack(App(), "Rules")
    return {(rule, name): build(stack, name.replace("-", "")) for rule, name, build, _ in CASES}


@pytest.mark.parametrize(
    "rule_id,name,expected", [(r, n, e) for r, n, _, e in CASES], ids=[f"{r}:{n}" for r, n, _, _ in CASES]
)
def test_rule(built, rule_id, name, expected):
    result = RULE[rule_id].evaluate(built[(rule_id, name)], StackIndex())
    if isinstance(expected, list):
        assert sorted(result) == sorted(expected)
    else:
        assert result == expected


def test_every_rule_has_compliant_non_compliant_and_not_applicable_cases():
    kinds = {rule.id: set() for rule in RULES}
    for rule_id, _, _, expected in CASES:
        kinds[rule_id].add("non-compliant" if isinstance(expected, list) or expected is BAD else expected.name)
    assert all(k == {"COMPLIANT", "NOT_APPLICABLE", "non-compliant"} for k in kinds.values()), kinds


def test_rule_ids_are_unique_and_documented():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "governance-checks.md").read_text()
    ids = [rule.id for rule in RULES]
    assert len(ids) == len(set(ids))
    for rule in RULES:
        assert f"GpuGovernance-{rule.id}" in docs
        assert len(rule.info) < 120 and "\n" not in rule.info
