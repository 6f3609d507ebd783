"""Organisation guardrails: the SCP and its exemptions, the team tag policy, the size quota,
input errors, the opt-in switch of the reference app; clean under the packs and cfn-lint."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest
import yaml
from aws_cdk import App, CfnTag, DefaultStackSynthesizer, Stack, aws_kms as kms
from aws_cdk.assertions import Match, Template

from constructs_lib.batch import TEAM_TAG
from constructs_lib.cli.report import summarise
from constructs_lib.controllers.capacity import capacity_controller_role_name
from constructs_lib.core.errors import GovernanceError
from constructs_lib.core.vocabulary import PURCHASE_ACTIONS
from constructs_lib.deployment import OrganisationGuardrailsStack, build_reference_app
from constructs_lib.model import GovernanceModel, Guardrails
from constructs_lib.model.loader import load_model
from constructs_lib.organisation.compliance import apply_standard_packs
from constructs_lib.organisation.guardrails import (
    QUOTA_CHANGE_ACTIONS,
    SCP_MAX_CHARACTERS,
    OrganisationGuardrails,
    document_size,
    service_control_policy,
)
from tests.foundation.org import with_raisable_compute_quota

CAPACITY = "111122223333"  # the default organisation's capacity account
CONSUMER = "444455556666"
MANAGEMENT = "999988887777"
BREAK_GLASS = f"arn:aws:iam::{CAPACITY}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_BreakGlass_*"
AUDIT = (
    f"arn:aws:iam::{MANAGEMENT}:role/aws-reserved/sso.amazonaws.com/eu-west-1/AWSReservedSSO_GpuAudit_0a1b2c3d4e5f6a7b"
)
TARGETS = ["ou-ab12-abcdefgh", "222233334444"]
GUARDRAILS = {
    "management_account": {"account_id": MANAGEMENT, "region": "us-east-1"},
    "target_ids": TARGETS,
    "exempt_principals": [BREAK_GLASS, AUDIT],
    "tag_enforced_for": ["sagemaker:training-job"],
}
CAPACITY_QUEUE = f"arn:aws:batch:us-east-1:{CAPACITY}:job-queue/sagemaker-training"
CONSUMER_QUEUE = f"arn:aws:batch:us-east-1:{CONSUMER}:job-queue/their-own-cpu-queue"


REFERENCE_TEAMS = load_model(None).model_dump(mode="json", exclude_none=True)["teams"]


def model_with(guardrails=GUARDRAILS, **changes) -> GovernanceModel:
    data = load_model(None).model_dump(mode="json", exclude_none=True)
    return GovernanceModel.from_dict({**data, **changes, "guardrails": guardrails})


@pytest.fixture(scope="module")
def model() -> GovernanceModel:
    return model_with()


@pytest.fixture(scope="module")
def synthesized(model, tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(outdir=str(outdir))
    stack = OrganisationGuardrailsStack(app, "Guardrails", model=model)
    apply_standard_packs(app)
    app.synth()  # raises on any unacknowledged finding
    return stack, Template.from_stack(stack), Path(outdir)


def policy_of(template: Template, kind: str) -> dict:
    (policy,) = template.find_resources("AWS::Organizations::Policy", {"Properties": {"Type": kind}}).values()
    return policy["Properties"]


def scp_statements(template: Template) -> list[dict]:
    return policy_of(template, "SERVICE_CONTROL_POLICY")["Content"]["Statement"]


def statement(template: Template, sid: str) -> dict:
    return next(s for s in scp_statements(template) if s["Sid"] == sid)


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def denied(statement: dict, principal_arn: str, action: str, resource: str = "*") -> bool:
    """How Organizations evaluates one of our Deny statements: the action is listed, the resource
    matches (ARN wildcards), and the condition holds: ArnNotLike (case-sensitive, * and ?) on
    aws:PrincipalArn, or StringNotEquals on aws:PrincipalAccount."""
    if action not in statement["Action"]:
        return False
    if resource != "*" and not any(
        fnmatch.fnmatchcase(resource, pattern) for pattern in _listed(statement["Resource"])
    ):
        return False
    ((operator, condition),) = statement["Condition"].items()
    ((key, values),) = condition.items()
    if operator == "ArnNotLike" and key == "aws:PrincipalArn":
        return not any(fnmatch.fnmatchcase(principal_arn, pattern) for pattern in values)
    if operator == "StringNotEquals" and key == "aws:PrincipalAccount":
        return principal_arn.split(":")[4] not in values
    raise AssertionError(f"unexpected condition {statement['Condition']}")


def denied_by_scp(template: Template, principal: str, action: str, resource: str = "*") -> bool:
    return any(denied(s, principal, action, resource) for s in scp_statements(template))


def test_scp_denies_buying_and_quota_changes_on_the_given_targets(synthesized):
    _, template, _ = synthesized
    purchase = [
        "ec2:PurchaseCapacityBlock",
        "ec2:PurchaseCapacityBlockExtension",
        "sagemaker:CreateTrainingPlan",
        "sagemaker:ExtendTrainingPlan",
        "ec2:CreateCapacityReservation",
        "ec2:CreateCapacityReservationFleet",
        "ec2:PurchaseReservedInstancesOffering",
        "savingsplans:CreateSavingsPlan",
    ]
    capacity_resources = [f"arn:*:batch:*:{CAPACITY}:*", f"arn:*:sagemaker:*:{CAPACITY}:*"]
    # the capacity controller's raises, then the reclaim controller's switch of a HyperPod compute quota
    raises = ["batch:UpdateQuotaShare", "batch:UpdateServiceEnvironment", "sagemaker:UpdateComputeQuota"]
    others = [a for a in QUOTA_CHANGE_ACTIONS if a not in raises]
    template.has_resource_properties(
        "AWS::Organizations::Policy",
        {
            "Type": "SERVICE_CONTROL_POLICY",
            "TargetIds": TARGETS,
            "Name": "acme-ml-gpu-capacity-guardrails",
            "Content": {
                "Version": "2012-10-17",
                "Statement": [
                    Match.object_like(
                        {"Sid": "DenyGpuCapacityPurchase", "Effect": "Deny", "Resource": "*", "Action": purchase}
                    ),
                    Match.object_like(
                        {
                            "Sid": "DenyGpuCapacityPurchaseOutsidePlatformAccounts",
                            "Effect": "Deny",
                            "Resource": "*",
                            "Action": purchase,
                        }
                    ),
                    Match.object_like(
                        {
                            "Sid": "DenyGpuQuotaChanges",
                            "Effect": "Deny",
                            "Resource": capacity_resources,
                            "Action": others,
                        }
                    ),
                    Match.object_like(
                        {
                            "Sid": "DenyGpuQuotaChangesOutsidePlatformAccounts",
                            "Effect": "Deny",
                            "Resource": capacity_resources,
                            "Action": others,
                        }
                    ),
                    # The reference raises a quota share while a training plan is active: the capacity
                    # controller is exempt from that one action, in a statement of its own.
                    Match.object_like(
                        {
                            "Sid": "DenyGpuQuotaRaises",
                            "Effect": "Deny",
                            "Resource": capacity_resources,
                            "Action": raises,
                        }
                    ),
                    Match.object_like(
                        {
                            "Sid": "DenyGpuQuotaRaisesOutsidePlatformAccounts",
                            "Effect": "Deny",
                            "Resource": capacity_resources,
                            "Action": raises,
                        }
                    ),
                ],
            },
        },
    )
    for action in (
        "batch:UpdateSchedulingPolicy",
        "batch:UpdateJobQueue",
        "batch:UpdateServiceEnvironment",
        "batch:CreateJobQueue",
    ):
        assert action in QUOTA_CHANGE_ACTIONS
    # One SCP, not one per concern: an account or OU may hold at most five.
    assert (
        len(template.find_resources("AWS::Organizations::Policy", {"Properties": {"Type": "SERVICE_CONTROL_POLICY"}}))
        == 1
    )


def test_exemption_lists_name_exactly_the_platform_roles(synthesized):
    _, template, _ = synthesized
    admin = "arn:aws:iam::111122223333:role/GpuPlatformAdmin"
    controller = f"arn:*:iam::{CAPACITY}:role/{capacity_controller_role_name('acme-ml')}"
    deployer = f"arn:*:iam::{CAPACITY}:role/cdk-hnb659fds-cfn-exec-role-{CAPACITY}-us-east-1"  # the qualifier, pinned
    purchase = statement(template, "DenyGpuCapacityPurchase")["Condition"]
    quota = statement(template, "DenyGpuQuotaChanges")["Condition"]
    # CloudFormation buys nothing; the controller changes no quotas.
    assert purchase == {"ArnNotLike": {"aws:PrincipalArn": [admin, controller, BREAK_GLASS, AUDIT]}}
    assert quota == {"ArnNotLike": {"aws:PrincipalArn": [admin, deployer, BREAK_GLASS, AUDIT]}}


def test_every_exemption_is_paired_with_its_account(synthesized):
    _, template, _ = synthesized
    for sid in ("DenyGpuCapacityPurchase", "DenyGpuQuotaChanges"):
        by_arn, by_account = statement(template, sid), statement(template, sid + "OutsidePlatformAccounts")
        assert (by_account["Action"], by_account["Resource"]) == (by_arn["Action"], by_arn["Resource"])
        accounts = by_account["Condition"]["StringNotEquals"]["aws:PrincipalAccount"]
        assert set(accounts) == {arn.split(":")[4] for arn in by_arn["Condition"]["ArnNotLike"]["aws:PrincipalArn"]}
        assert set(accounts) <= {CAPACITY, MANAGEMENT}


def test_the_bootstrap_qualifier_comes_from_the_model():
    custom = model_with({**GUARDRAILS, "cdk_bootstrap_qualifier": "gpuplat01"})
    exempt = service_control_policy(custom, custom.guardrails)["Statement"][2]["Condition"]["ArnNotLike"][
        "aws:PrincipalArn"
    ]
    assert f"arn:*:iam::{CAPACITY}:role/cdk-gpuplat01-cfn-exec-role-{CAPACITY}-us-east-1" in exempt
    assert not any("hnb659fds" in arn or "cdk-*" in arn for arn in exempt)


SUBMIT = f"arn:aws:iam::{CAPACITY}:role/gpu-governance/research-gpu-submit"  # a tenant's role in the capacity account
CONTROLLER = f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-controller"
RECLAIM = f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-reclaimer"
CAPACITY_ENVIRONMENT = f"arn:aws:batch:us-east-1:{CAPACITY}:service-environment/sagemaker-training"
COMPUTE_QUOTA = f"arn:aws:sagemaker:us-east-1:{CAPACITY}:compute-quota/cq-0123456789ab"


@pytest.mark.parametrize(
    "organisation, principal, action, resource, is_denied",
    [
        ("synthesized", *case)
        for case in [
            (f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-controller", "ec2:PurchaseCapacityBlock", "*", False),
            # The reference's research team has a GPU-hour limit on quota-share and HyperPod EKS pools: the
            # reclaim controller switches its quota share and compute quota (and nothing else), and the
            # controllers share one exemption statement (the SCP's 5,120 characters), each role's IAM naming its quotas.
            (
                f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-controller",
                "sagemaker:UpdateComputeQuota",
                f"arn:aws:sagemaker:us-east-1:{CAPACITY}:compute-quota/q",
                False,
            ),
            (RECLAIM, "batch:UpdateQuotaShare", f"{CAPACITY_QUEUE}/quota-share/research", False),
            (RECLAIM, "sagemaker:UpdateComputeQuota", COMPUTE_QUOTA, False),
            (RECLAIM, "batch:CreateQuotaShare", f"{CAPACITY_QUEUE}/quota-share/research", True),
            (RECLAIM, "batch:UpdateSchedulingPolicy", CAPACITY_QUEUE, True),
            (RECLAIM, "sagemaker:CreateTrainingPlan", "*", True),
            (
                f"arn:aws:iam::{CONSUMER}:role/acme-ml-capacity-reclaimer",
                "batch:UpdateQuotaShare",
                f"{CAPACITY_QUEUE}/quota-share/research",
                True,
            ),
            (
                f"arn:aws:iam::{CONSUMER}:role/acme-ml-capacity-controller",
                "ec2:PurchaseCapacityBlock",
                "*",
                True,
            ),  # same name, other account
            # The controller raises and lowers quota shares (issue 14) and changes nothing else of the quotas.
            (
                f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-controller",
                "batch:UpdateQuotaShare",
                f"{CAPACITY_QUEUE}/quota-share/research",
                False,
            ),
            (
                f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-controller",
                "batch:DeleteQuotaShare",
                f"{CAPACITY_QUEUE}/quota-share/research",
                True,
            ),
            (
                f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-controller",
                "batch:UpdateSchedulingPolicy",
                CAPACITY_QUEUE,
                True,
            ),
            (
                f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-controller",
                "batch:UpdateServiceEnvironment",
                CAPACITY_ENVIRONMENT,
                False,
            ),
            (
                f"arn:aws:iam::{CAPACITY}:role/acme-ml-capacity-controller",
                "batch:DeleteServiceEnvironment",
                CAPACITY_ENVIRONMENT,
                True,
            ),
            (
                f"arn:aws:iam::{CONSUMER}:role/acme-ml-capacity-controller",
                "batch:UpdateQuotaShare",
                f"{CAPACITY_QUEUE}/quota-share/research",
                True,
            ),
            (SUBMIT, "batch:UpdateQuotaShare", f"{CAPACITY_QUEUE}/quota-share/research", True),
            (
                f"arn:aws:iam::{CAPACITY}:role/cdk-hnb659fds-cfn-exec-role-{CAPACITY}-us-east-1",
                "batch:UpdateQuotaShare",
                CAPACITY_QUEUE,
                False,
            ),
            (
                f"arn:aws:iam::{CAPACITY}:role/cdk-hnb659fds-cfn-exec-role-{CAPACITY}-us-east-1",
                "sagemaker:CreateTrainingPlan",
                "*",
                True,
            ),
            (
                f"arn:aws:iam::{CAPACITY}:role/cdk-hnb659fds-cfn-exec-role-{CAPACITY}-us-west-2",
                "batch:UpdateQuotaShare",
                CAPACITY_QUEUE,
                True,
            ),
            # A role anyone allowed to create roles in the capacity account could name: another qualifier.
            (
                f"arn:aws:iam::{CAPACITY}:role/cdk-mine-cfn-exec-role-{CAPACITY}-us-east-1",
                "batch:UpdateSchedulingPolicy",
                CAPACITY_QUEUE,
                True,
            ),
            ("arn:aws:iam::111122223333:role/GpuPlatformAdmin", "sagemaker:ExtendTrainingPlan", "*", False),
            ("arn:aws:iam::111122223333:role/GpuPlatformAdmin", "savingsplans:CreateSavingsPlan", "*", False),
            (
                "arn:aws:iam::111122223333:role/GpuPlatformAdmin",
                "sagemaker:DeleteClusterSchedulerConfig",
                f"arn:aws:sagemaker:us-east-1:{CAPACITY}:cluster-scheduler-config/c",
                False,
            ),
            (
                "arn:aws:iam::111122223333:role/gpuplatformadmin",
                "batch:DeleteQuotaShare",
                CAPACITY_QUEUE,
                True,
            ),  # ArnLike is case-sensitive
            (
                f"arn:aws:iam::{CAPACITY}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_BreakGlass_0a1b2c",
                "batch:CreateQuotaShare",
                CAPACITY_QUEUE,
                False,
            ),
            (AUDIT, "ec2:PurchaseCapacityBlock", "*", False),
            # Tenants: roles they can create in their own accounts, Identity Center roles there, and their
            # library-made roles in the capacity account.
            (
                f"arn:aws:iam::{CONSUMER}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_BreakGlass_0a1b2c",
                "ec2:PurchaseCapacityBlock",
                "*",
                True,
            ),
            (f"arn:aws:iam::{CONSUMER}:role/BreakGlass", "ec2:CreateCapacityReservation", "*", True),
            (f"arn:aws:iam::{CONSUMER}:role/MyAdminTool", "ec2:CreateCapacityReservationFleet", "*", True),
            (f"arn:aws:iam::{CONSUMER}:role/MyAdminTool", "ec2:PurchaseReservedInstancesOffering", "*", True),
            (f"arn:aws:iam::{CONSUMER}:role/MyAdminTool", "savingsplans:CreateSavingsPlan", "*", True),
            (f"arn:aws:iam::{CONSUMER}:role/research-gpu-submit", "ec2:PurchaseCapacityBlockExtension", "*", True),
            (
                SUBMIT,
                "sagemaker:CreateComputeQuota",
                f"arn:aws:sagemaker:us-east-1:{CAPACITY}:cluster/abcd1234efgh",
                True,
            ),
            (
                SUBMIT,
                "batch:UpdateSchedulingPolicy",
                f"arn:aws:batch:us-east-1:{CAPACITY}:scheduling-policy/ec2-gpu",
                True,
            ),
            (SUBMIT, "batch:UpdateJobQueue", CAPACITY_QUEUE, True),
            (SUBMIT, "batch:CreateJobQueue", f"arn:aws:batch:us-east-1:{CAPACITY}:compute-environment/gpu-g6e", True),
            (
                SUBMIT,
                "batch:UpdateServiceEnvironment",
                f"arn:aws:batch:us-east-1:{CAPACITY}:service-environment/sagemaker-training",
                True,
            ),
            # A consumer account's own queues are its own business.
            (f"arn:aws:iam::{CONSUMER}:role/MyAdminTool", "batch:UpdateJobQueue", CONSUMER_QUEUE, False),
        ]
    ]
    + [
        ("with_compute_quota_window", *case)
        for case in [
            # A window also feeds a HyperPod EKS instance group: the controller raises the owner's compute
            # quota too, and still changes nothing else of the quotas; nobody else gains anything.
            (CONTROLLER, "sagemaker:UpdateComputeQuota", COMPUTE_QUOTA, False),
            (CONTROLLER, "batch:UpdateQuotaShare", f"{CAPACITY_QUEUE}/quota-share/research", False),
            (CONTROLLER, "sagemaker:CreateComputeQuota", COMPUTE_QUOTA, True),
            (CONTROLLER, "sagemaker:DeleteComputeQuota", COMPUTE_QUOTA, True),
            (
                CONTROLLER,
                "sagemaker:UpdateClusterSchedulerConfig",
                f"arn:aws:sagemaker:us-east-1:{CAPACITY}:cluster-scheduler-config/c",
                True,
            ),
            (
                CONTROLLER,
                "batch:DeleteServiceEnvironment",
                f"arn:aws:batch:us-east-1:{CAPACITY}:service-environment/sagemaker-training",
                True,
            ),
            (
                f"arn:aws:iam::{CONSUMER}:role/acme-ml-capacity-controller",
                "sagemaker:UpdateComputeQuota",
                COMPUTE_QUOTA,
                True,
            ),
            (SUBMIT, "sagemaker:UpdateComputeQuota", COMPUTE_QUOTA, True),
            (
                f"arn:aws:iam::{CAPACITY}:role/cdk-hnb659fds-cfn-exec-role-{CAPACITY}-us-east-1",
                "sagemaker:UpdateComputeQuota",
                COMPUTE_QUOTA,
                False,
            ),
            ("arn:aws:iam::111122223333:role/GpuPlatformAdmin", "sagemaker:UpdateComputeQuota", COMPUTE_QUOTA, False),
        ]
    ],
)
def test_who_the_scp_stops(organisation, principal, action, resource, is_denied, request):
    _, template, _ = request.getfixturevalue(organisation)
    assert denied_by_scp(template, principal, action, resource) is is_denied


@pytest.fixture(scope="module")
def with_compute_quota_window(tmp_path_factory):
    reference = with_raisable_compute_quota(load_model(None).model_dump(mode="json", exclude_none=True))
    hyperpod = {
        **reference["capacity_windows"][0],
        "name": "hyperpod-validation",
        "team": "research",
        "feeds": {"kind": "hyperpod_instance_group", "pool": "hyperpod-eks", "instance_group": "workers"},
    }
    model = model_with(capacity_windows=[*reference["capacity_windows"], hyperpod], teams=reference["teams"])
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = OrganisationGuardrailsStack(app, "Guardrails", model=model)
    return stack, Template.from_stack(stack), None


def test_without_a_compute_quota_window_the_controller_changes_no_compute_quota(synthesized, with_compute_quota_window):
    # Only the actions the windows need leave the quota statement for the controller's own. The
    # reference's GPU-hour limit (research) adds the reclaim controller's compute-quota switch, so
    # the model without a window raising a compute quota is also taken without that limit.
    raises = lambda template: next(s for s in scp_statements(template) if s["Sid"] == "DenyGpuQuotaRaises")["Action"]  # noqa: E731
    assert raises(synthesized[1]) == [
        "batch:UpdateQuotaShare",
        "batch:UpdateServiceEnvironment",
        "sagemaker:UpdateComputeQuota",
    ]
    teams = [
        {k: v for k, v in t.items() if k != "gpu_hour_limit"}
        for t in load_model(None).model_dump(mode="json", exclude_none=True)["teams"]
    ]
    unlimited = model_with(teams=teams)
    switches = next(
        s
        for s in service_control_policy(unlimited, unlimited.guardrails)["Statement"]
        if s["Sid"] == "DenyGpuQuotaRaises"
    )
    assert switches["Action"] == ["batch:UpdateQuotaShare", "batch:UpdateServiceEnvironment"]
    assert raises(with_compute_quota_window[1]) == [
        "batch:UpdateQuotaShare",
        "batch:UpdateServiceEnvironment",
        "sagemaker:UpdateComputeQuota",
    ]


def test_every_quota_action_names_a_resource_the_scope_can_match():
    # The quota denial names the capacity account's resources; an action without resource-level
    # permissions is evaluated against "*" and would slip past it.
    import cfnlint

    known = json.loads((Path(cfnlint.__file__).parent / "data/AdditionalSpecs/Policies.json").read_text())
    for action in QUOTA_CHANGE_ACTIONS:
        service, name = action.split(":")
        entry = {a.lower(): v for a, v in known[service]["Actions"].items()}[name.lower()]
        assert entry.get("Resources"), action


def test_every_denied_action_is_a_real_iam_action():
    # cfn-lint ships the IAM Service Authorization Reference; a misspelt action would deny nothing.
    import cfnlint

    known = json.loads((Path(cfnlint.__file__).parent / "data/AdditionalSpecs/Policies.json").read_text())
    for action in (*PURCHASE_ACTIONS, *QUOTA_CHANGE_ACTIONS):
        service, name = action.split(":")
        assert name.lower() in {a.lower() for a in known[service]["Actions"]}, action


def test_tag_policy_allows_only_declared_team_names(synthesized, model):
    _, template, _ = synthesized
    policy = policy_of(template, "TAG_POLICY")
    assert policy["TargetIds"] == TARGETS
    assert policy["Content"] == {
        "tags": {
            TEAM_TAG: {
                "tag_key": {"@@assign": TEAM_TAG},
                "tag_value": {"@@assign": [team.name for team in model.teams]},
                "enforced_for": {"@@assign": ["sagemaker:training-job"]},
            }
        }
    }
    assert [t.name for t in model.teams] == ["research", "training", "production"]


def test_tag_policy_only_reports_unless_enforcement_is_asked_for():
    stack = Stack(App(), "ReportOnly")
    guardrails = OrganisationGuardrails(stack, "G", model=model_with({**GUARDRAILS, "tag_enforced_for": []}))
    content = stack.resolve(guardrails.tag_policy.content)
    assert "enforced_for" not in content["tags"][TEAM_TAG]


def _admins(count: int) -> list[str]:
    return [f"arn:aws:iam::{CAPACITY}:role/platform-administrator-{index:04d}" for index in range(count)]


def test_without_share_raising_windows_the_controller_changes_no_quota():
    # No capacity window feeds training jobs on a quota-share pool: UpdateQuotaShare stays in the
    # one quota statement, and the controller is exempt from none of it.
    plain = model_with(
        capacity_windows=[], teams=[{k: v for k, v in t.items() if k != "gpu_hour_limit"} for t in REFERENCE_TEAMS]
    )
    document = service_control_policy(plain, plain.guardrails)
    sids = [s["Sid"] for s in document["Statement"]]
    assert "DenyGpuQuotaRaises" not in sids
    quota = next(s for s in document["Statement"] if s["Sid"] == "DenyGpuQuotaChanges")
    assert quota["Action"] == list(QUOTA_CHANGE_ACTIONS)
    assert not any("controller" in arn for arn in quota["Condition"]["ArnNotLike"]["aws:PrincipalArn"])


def test_gpu_hour_limits_alone_exempt_the_reclaim_controller_from_the_switches_only():
    limited = model_with(capacity_windows=[])  # the reference's research team has a GPU-hour limit
    document = service_control_policy(limited, limited.guardrails)
    switches = next(s for s in document["Statement"] if s["Sid"] == "DenyGpuQuotaRaises")
    assert switches["Action"] == ["batch:UpdateQuotaShare", "sagemaker:UpdateComputeQuota"]
    exempt = switches["Condition"]["ArnNotLike"]["aws:PrincipalArn"]
    assert f"arn:*:iam::{CAPACITY}:role/acme-ml-capacity-reclaimer" in exempt
    assert not any(arn.endswith("/acme-ml-capacity-controller") for arn in exempt)


def test_scp_over_the_size_quota_is_refused_before_synth():
    # Grow the exemption list one admin at a time until the document passes the quota.
    count = 1
    while (
        document_size(service_control_policy(model_with(platform_admins=_admins(count + 1)), model_with().guardrails))
        <= SCP_MAX_CHARACTERS
    ):
        count += 1
    fits, too_big = model_with(platform_admins=_admins(count)), model_with(platform_admins=_admins(count + 1))
    OrganisationGuardrails(Stack(App(), "Fits"), "G", model=fits)  # exactly at or under the quota: accepted
    with pytest.raises(GovernanceError) as raised:
        OrganisationGuardrails(Stack(App(), "TooBig"), "G", model=too_big)
    (problem,) = raised.value.problems
    size = document_size(service_control_policy(too_big, too_big.guardrails))
    assert size > SCP_MAX_CHARACTERS
    assert problem.path == "guardrails" and problem.value == size
    assert "at most 5120 characters" in str(raised.value)


def test_tag_policy_over_the_size_quota_is_refused():
    # 250 teams with 40-character names: about 10,800 characters of allowed values.
    pool = {
        "name": "many",
        "backend": "batch_fair_share",
        "capacity": {"g6e.12xlarge": 250},
        "compute_environments": [f"arn:aws:batch:us-east-1:{CAPACITY}:compute-environment/gpu"],
    }
    teams = [
        {
            "name": f"team-{index:03d}-" + "x" * 31,
            "account": ("research", "product")[index % 2],  # every declared account has a team
            "preset": "steady",
            "members": [f"arn:aws:iam::{CONSUMER}:role/Member{index:03d}"],
            "quotas": {"many": {"g6e.12xlarge": 1}},
        }
        for index in range(250)
    ]
    many = model_with(pools=[pool], teams=teams, capacity_windows=[])
    with pytest.raises(GovernanceError) as raised:
        OrganisationGuardrails(Stack(App(), "ManyTeams"), "G", model=many)
    (problem,) = raised.value.problems
    assert problem.path == "teams" and problem.value > 10_000
    assert "tag policy document too long" in problem.wrong and "at most 10000 characters" in problem.allowed


def test_undeclared_guardrails_are_an_error_and_the_reference_app_leaves_them_out():
    default = load_model(None)
    assert default.guardrails is None
    with pytest.raises(GovernanceError, match=r"guardrails: missing \(None\) - a guardrails section"):
        OrganisationGuardrails(Stack(App(), "None"), "G", model=default)
    without = {s.stack_name for s in build_reference_app(App(), default)}
    with_guardrails = {s.stack_name: s for s in build_reference_app(App(), model_with())}
    assert "acme-ml-guardrails" not in without
    assert set(with_guardrails) - without == {"acme-ml-guardrails"}
    assert with_guardrails["acme-ml-guardrails"].account == "999988887777"


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"target_ids": ["ou-ab12-abcdefgh", "ou-ab12-abcdefgh"]},
            r"guardrails: invalid .* target_ids must be unique; repeated: \['ou-ab12-abcdefgh'\]",
        ),
        ({"target_ids": ["finance"]}, r"guardrails\.target_ids\[0\]: invalid \('finance'\) - must match"),
        ({"target_ids": []}, r"guardrails\.target_ids: invalid \(\[\]\) - at least 1 item"),
        (
            {"exempt_principals": ["arn:aws:iam::*:role/*"]},
            r"guardrails\.exempt_principals\[0\]: invalid \('arn:aws:iam::\*:role/\*'\)",
        ),
        (
            {"exempt_principals": ["arn:aws:sts::123456789012:assumed-role/Admin/me"]},
            r"guardrails\.exempt_principals\[0\]: invalid",
        ),
        # Satisfiable by a tenant: any account, name patterns, an undeclared account, any permission set.
        (
            {"exempt_principals": ["arn:aws:iam::*:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_BreakGlass_*"]},
            r"guardrails\.exempt_principals\[0\]: invalid",
        ),
        (
            {"exempt_principals": [f"arn:aws:iam::{CAPACITY}:role/*Admin*"]},
            r"guardrails\.exempt_principals\[0\]: invalid",
        ),
        (
            {"exempt_principals": [f"arn:aws:iam::{CAPACITY}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_*"]},
            r"guardrails\.exempt_principals\[0\]: invalid",
        ),
        (
            {"exempt_principals": [f"arn:aws:iam::{CONSUMER}:role/BreakGlass"]},
            r"guardrails\.exempt_principals\[0\]: account 444455556666 is not allowed here .* - a role of the capacity \(111122223333\) or management \(999988887777\) account",
        ),
        (
            {"exempt_principals": [f"arn:aws:iam::{CAPACITY}:role/gpu-governance/research-gpu-submit"]},
            r"guardrails\.exempt_principals\[0\]: a role under the library's path /gpu-governance/",
        ),
        (
            {"exempt_principals": [f"arn:aws:iam::{CAPACITY}:role/cdk-hnb659fds-deploy-role-{CAPACITY}-us-east-1"]},
            r"guardrails\.exempt_principals\[0\]: named like a CDK bootstrap role",
        ),
        ({"cdk_bootstrap_qualifier": "*"}, r"guardrails\.cdk_bootstrap_qualifier: invalid \('\*'\) - must match"),
        ({"cdk_bootstrap_qualifier": "much-too-long"}, r"guardrails\.cdk_bootstrap_qualifier: invalid"),
        (
            {"tag_enforced_for": ["training jobs"]},
            r"guardrails\.tag_enforced_for\[0\]: invalid \('training jobs'\) - must match",
        ),
        ({"management_account": None}, r"guardrails\.management_account: invalid \(None\) - a mapping"),
    ],
)
def test_bad_guardrails_are_reported_with_their_path(change, message):
    with pytest.raises(GovernanceError, match=message):
        model_with({**GUARDRAILS, **change})


def test_no_open_findings_and_cfn_lint_is_clean(synthesized):
    from cfnlint.api import lint

    _, _, outdir = synthesized
    summary = summarise(outdir)
    assert summary.open_findings == []
    assert summary.stacks["Guardrails"]["AWS::Organizations::Policy"] == 2
    template = (outdir / "Guardrails.template.json").read_text()
    assert [str(m) for m in lint(template, regions=["us-east-1"])] == []


def test_the_packs_do_check_the_guardrails_stack(model, tmp_path):
    # Control for the test above: an empty report must mean "checked and clean", not "not checked".
    app = App(outdir=str(tmp_path))
    stack = OrganisationGuardrailsStack(app, "Guardrails", model=model)
    # a team's data key (the pack checks teams' keys only) that does not rotate
    kms.CfnKey(
        stack, "UnrotatedKey", enable_key_rotation=False, tags=[CfnTag(key="gpu-governance:team", value="research")]
    )
    apply_standard_packs(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    findings = summarise(tmp_path).open_findings
    assert any("GpuGovernance-KeyRotation" in f for f in findings)
    assert findings and all("UnrotatedKey" in f for f in findings)


def test_the_documented_guardrails_section_is_valid():
    text = (Path(__file__).resolve().parents[2] / "docs" / "delivery.md").read_text()
    block = next(b for b in re.split(r"```yaml(?: \w+)?\n", text)[1:] if b.startswith("guardrails:")).split("```")[0]
    documented = yaml.safe_load(block)["guardrails"]
    assert model_with(documented).guardrails.exempt_principals == tuple(documented["exempt_principals"])


def test_guardrails_given_apart_from_the_model_are_held_to_the_same_accounts():
    tenant_made = Guardrails(**{**GUARDRAILS, "exempt_principals": [f"arn:aws:iam::{CONSUMER}:role/BreakGlass"]})
    with pytest.raises(
        GovernanceError, match=r"guardrails\.exempt_principals\[0\]: account 444455556666 is not allowed here"
    ):
        OrganisationGuardrails(Stack(App(), "Apart"), "G", model=load_model(None), guardrails=tenant_made)


def test_the_stack_refuses_a_qualifier_other_than_the_apps():
    assert Guardrails(**GUARDRAILS).cdk_bootstrap_qualifier == DefaultStackSynthesizer.DEFAULT_QUALIFIER
    app = App(context={"@aws-cdk/core:bootstrapQualifier": "gpuplat01"})
    with pytest.raises(
        GovernanceError,
        match=r"guardrails\.cdk_bootstrap_qualifier: differs from this app's CDK bootstrap qualifier 'gpuplat01'",
    ):
        OrganisationGuardrailsStack(app, "Guardrails", model=model_with())
    matching = model_with({**GUARDRAILS, "cdk_bootstrap_qualifier": "gpuplat01"})
    OrganisationGuardrailsStack(
        App(context={"@aws-cdk/core:bootstrapQualifier": "gpuplat01"}), "Guardrails", model=matching
    )
