import json

import pytest
from aws_cdk import App, CfnResource, Stack, aws_batch as batch, aws_iam as iam
from aws_cdk.assertions import Match, Template
from constructs import Construct

from constructs_lib.backends.batch_queue import l1_logical_id
from constructs_lib.batch import TEAM_TAG, FairShareJobQueue, QuotaManagedTrainingQueue, fair_share_weight_factor
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import BatchFairSharePool, BatchQuotaSharePool, Team
from constructs_lib.organisation.compliance import apply_standard_packs
from gpu_governance_runtime.contract import PLATFORM_TAG_KEYS, TAG_COST_CENTRE

QUOTA_POOL = BatchQuotaSharePool(
    name="training", capacity={"ml.p5.48xlarge": 8, "ml.g6e.12xlarge": 4}, runnable_timeout_minutes=60
)
FAIR_POOL = BatchFairSharePool(
    name="ec2",
    capacity={"p5.48xlarge": 5},
    compute_environments=["arn:aws:batch:us-east-1:111122223333:compute-environment/gpu"],
    share_decay_seconds=7200,
    compute_reservation=25,
)
TEAMS = [
    Team(
        name="vision",
        preset="background",
        sharing={"borrow_limit": 50},
        fair_share_weight=50,
        quotas={"training": {"ml.p5.48xlarge": 4}, "ec2": {"p5.48xlarge": 2}},
    ),
    Team(
        name="nlp",
        preset="steady",
        fair_share_weight=25,
        paused=True,
        quotas={"training": {"ml.p5.48xlarge": 2, "ml.g6e.12xlarge": 4}, "ec2": {"p5.48xlarge": 1}},
    ),
    Team(name="prod", preset="critical", quotas={"training": {"ml.p5.48xlarge": 2}, "ec2": {"p5.48xlarge": 1}}),
    Team(
        name="lab",
        sharing={"strategy": "lend_and_borrow", "borrow_limit": "unlimited"},
        quotas={"ec2": {"p5.48xlarge": 1}},
    ),
]


@pytest.fixture(scope="module")
def synthesized():
    app = App()
    stack = Stack(app, "Queues", env={"account": "111122223333", "region": "us-east-1"})
    quota_teams = [t for t in TEAMS if "training" in t.quotas]
    fair_teams = [t for t in TEAMS if "ec2" in t.quotas]
    quota_queue = QuotaManagedTrainingQueue(stack, "Training", pool=QUOTA_POOL, teams=quota_teams)
    fair_queue = FairShareJobQueue(stack, "Fair", pool=FAIR_POOL, teams=fair_teams)
    role = iam.Role(stack, "Submitter", assumed_by=iam.AccountRootPrincipal())
    quota_queue.grant_submit(role, "vision")
    fair_queue.grant_submit(role, "lab")
    observer = iam.Role(stack, "Observer", assumed_by=iam.AccountRootPrincipal())
    quota_queue.grant_observe(observer)
    return quota_queue, fair_queue, Template.from_stack(stack)


def test_service_environment_and_quota_share_queue(synthesized):
    _, _, template = synthesized
    template.has_resource_properties(
        "AWS::Batch::ServiceEnvironment",
        {
            "ServiceEnvironmentName": "training",
            "ServiceEnvironmentType": "SAGEMAKER_TRAINING",
            "CapacityLimits": [
                {"CapacityUnit": "ml.g6e.12xlarge", "MaxCapacity": 4},
                {"CapacityUnit": "ml.p5.48xlarge", "MaxCapacity": 8},
            ],
        },
    )
    template.has_resource_properties(
        "AWS::Batch::SchedulingPolicy",
        {
            "Name": "training-quota-share",
            "QuotaSharePolicy": {"IdleResourceAssignmentStrategy": "FIFO"},
        },
    )
    template.has_resource_properties(
        "AWS::Batch::JobQueue",
        {
            "JobQueueName": "training",
            "JobQueueType": "SAGEMAKER_TRAINING",
            "ServiceEnvironmentOrder": [{"Order": 1, "ServiceEnvironment": Match.any_value()}],
            "JobStateTimeLimitActions": [
                {
                    "Action": "TERMINATE",
                    "MaxTimeSeconds": 600,
                    "Reason": "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
                    "State": "RUNNABLE",
                },
                {
                    "Action": "TERMINATE",
                    "MaxTimeSeconds": 600,
                    "Reason": "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
                    "State": "RUNNABLE",
                },
                {
                    "Action": "TERMINATE",
                    "MaxTimeSeconds": 3600,
                    "Reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
                    "State": "RUNNABLE",
                },
            ],
        },
    )


@pytest.mark.parametrize(
    "team, limits, sharing, preemption, preset, state",
    [
        (
            "vision",
            [{"CapacityUnit": "ml.p5.48xlarge", "MaxCapacity": 4}],
            {"Strategy": "LEND_AND_BORROW", "BorrowLimit": 50},
            "ENABLED",
            "background",
            "ENABLED",
        ),
        # nlp is paused: its share accepts no new job
        (
            "nlp",
            [
                {"CapacityUnit": "ml.g6e.12xlarge", "MaxCapacity": 4},
                {"CapacityUnit": "ml.p5.48xlarge", "MaxCapacity": 2},
            ],
            {"Strategy": "LEND"},
            "DISABLED",
            "steady",
            "DISABLED",
        ),
        (
            "prod",
            [{"CapacityUnit": "ml.p5.48xlarge", "MaxCapacity": 2}],
            {"Strategy": "RESERVE"},
            "ENABLED",
            "critical",
            "ENABLED",
        ),
    ],
)
def test_one_quota_share_per_team(synthesized, team, limits, sharing, preemption, preset, state):
    _, _, template = synthesized
    shares = template.find_resources("AWS::Batch::QuotaShare", {"Properties": {"QuotaShareName": team}})
    assert len(shares) == 1
    share = next(iter(shares.values()))
    assert share["Properties"]["CapacityLimits"] == limits
    assert share["Properties"]["ResourceSharingConfiguration"] == sharing
    assert share["Properties"]["PreemptionConfiguration"] == {"InSharePreemption": preemption}
    assert share["Properties"]["State"] == state
    assert share["Metadata"]["GpuGovernance"] == {"team": team, "preset": preset}
    assert "GetAtt" in json.dumps(share["Properties"]["JobQueue"])


def test_unlimited_borrow_limit_is_minus_one():
    app = App()
    stack = Stack(app, "S")
    pool = BatchQuotaSharePool(name="q", capacity={"ml.p5.48xlarge": 2})
    QuotaManagedTrainingQueue(
        stack,
        "Q",
        pool=pool,
        teams=[
            Team(
                name="a",
                sharing={"strategy": "lend_and_borrow", "borrow_limit": "unlimited"},
                quotas={"q": {"ml.p5.48xlarge": 1}},
            )
        ],
    )
    Template.from_stack(stack).has_resource_properties(
        "AWS::Batch::QuotaShare", {"ResourceSharingConfiguration": {"Strategy": "LEND_AND_BORROW", "BorrowLimit": -1}}
    )


def test_no_capacity_wait_timeout_unless_declared():
    app = App()
    stack = Stack(app, "S")
    pool = BatchQuotaSharePool(name="q", capacity={"ml.p5.48xlarge": 2})
    QuotaManagedTrainingQueue(
        stack, "Q", pool=pool, teams=[Team(name="a", preset="steady", quotas={"q": {"ml.p5.48xlarge": 1}})]
    )
    queue = next(iter(Template.from_stack(stack).find_resources("AWS::Batch::JobQueue").values()))
    reasons = [a["Reason"] for a in queue["Properties"]["JobStateTimeLimitActions"]]
    assert "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" not in reasons


def test_fair_share_queue(synthesized):
    _, _, template = synthesized
    template.has_resource_properties(
        "AWS::Batch::SchedulingPolicy",
        {
            "Name": "ec2-fair-share",
            "FairsharePolicy": {
                "ShareDecaySeconds": 7200,
                "ComputeReservation": 25,
                "ShareDistribution": [
                    {"ShareIdentifier": "vision", "WeightFactor": fair_share_weight_factor(50)},
                    {"ShareIdentifier": "nlp", "WeightFactor": fair_share_weight_factor(25)},
                    {"ShareIdentifier": "prod", "WeightFactor": fair_share_weight_factor(10)},
                    {"ShareIdentifier": "lab", "WeightFactor": fair_share_weight_factor(10)},
                ],
            },
        },
    )
    template.has_resource_properties(
        "AWS::Batch::JobQueue",
        {
            "JobQueueName": "ec2",
            "ComputeEnvironmentOrder": [
                {"ComputeEnvironment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu", "Order": 1}
            ],
        },
    )


def test_fair_share_queue_keeps_the_logical_ids_of_its_former_l1s(synthesized):
    # The queue and policy are L2s now; new logical ids would replace the deployed, named ones.
    _, _, template = synthesized
    stack = Stack(App(), "Queues")
    former = Construct(stack, "Fair")
    expected = {
        "AWS::Batch::SchedulingPolicy": stack.resolve(batch.CfnSchedulingPolicy(former, "SchedulingPolicy").logical_id),
        "AWS::Batch::JobQueue": stack.resolve(
            batch.CfnJobQueue(former, "JobQueue", priority=1, compute_environment_order=[]).logical_id
        ),
    }
    for kind, logical_id in expected.items():
        assert logical_id in template.find_resources(kind)


@pytest.mark.parametrize(
    "path",
    [
        ["Queue"],
        ["Pool", "Queue"],
        ["Poolec2-gpu", "JobQueue"],
        ["Pool", "Default", "Queue"],
        ["Queue", "Queue"],
        ["MyQueue", "Queue"],
        ["Pool", "Resource", "Queue"],
        ["x" * 250, "Queue"],
        ["y" * 260],
        ["é-1", "Queue"],
    ],
)
def test_l1_logical_id_is_cdks(path):
    stack = Stack(App(), "Ids")
    scope: Construct = stack
    for name in path[:-1]:
        scope = Construct(scope, name)
    resource = CfnResource(scope, path[-1], type="Test::Resource")
    assert l1_logical_id(resource) == stack.resolve(resource.logical_id)


def test_weight_factor_keeps_ratios_inverted():
    # Batch gives more to a LOWER factor; the model gives more to a HIGHER weight.
    assert fair_share_weight_factor(50) < fair_share_weight_factor(25)
    assert fair_share_weight_factor(50) * 2 == pytest.approx(fair_share_weight_factor(25))


def _statements(template, role_logical_prefix, kind="AWS::IAM::Policy"):
    policies = template.find_resources(kind)
    return [
        s
        for p in policies.values()
        if any(r["Ref"].startswith(role_logical_prefix) for r in p["Properties"].get("Roles", []))
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_grant_submit_scopes_to_the_share_and_team_tag(synthesized):
    _, _, template = synthesized
    statements = _statements(template, "Submitter")
    submit = next(s for s in statements if s["Action"] == "batch:SubmitServiceJob")
    assert submit["Condition"]["StringEquals"] == {f"aws:RequestTag/{TEAM_TAG}": "vision"}
    resources = json.dumps(submit["Resource"])
    assert "job-queue/training/quota-share/vision" in resources
    assert "quota-share/nlp" not in resources
    terminate = next(s for s in statements if s["Action"] == ["batch:TerminateServiceJob", "batch:UpdateServiceJob"])
    assert terminate["Condition"] == {"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": "vision"}}
    fair_submit = [s for s in statements if s["Action"] == "batch:SubmitJob"]
    assert fair_submit[0]["Condition"]["StringEquals"]["batch:ShareIdentifier"] == "lab"
    # Job definitions by name prefix AND team tag: "lab-*" alone also matches team "lab-x"'s.
    assert "job-definition/lab-*:*" in json.dumps(fair_submit[1]["Resource"])
    assert fair_submit[1]["Condition"] == {"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": "lab"}}


def test_team_tag_is_set_only_to_the_teams_own_and_never_removed(synthesized):
    """Documented condition keys only (issue 37, row 1): the tags of a submission are authorised as
    batch:TagResource, whose context no page describes beyond aws:RequestTag, aws:ResourceTag and
    aws:TagKeys. The security proof of these statements under every reading: tests/security/test_prover.py."""
    _, _, template = synthesized
    statements = _statements(template, "Submitter")
    tagging = [s for s in statements if "tagresource" in json.dumps(s["Action"]).lower()]
    assert not any("batch:" in key for s in tagging for block in s.get("Condition", {}).values() for key in block)
    allows = {json.dumps(s["Resource"]): s for s in tagging if s["Effect"] == "Allow"}
    assert len(allows) == 2  # service jobs (quota share) and jobs (fair share)
    for kind, team in ((":service-job/", "vision"), (":job/", "lab")):
        grant = next(s for r, s in allows.items() if kind in r)
        assert grant["Action"] == "batch:TagResource"
        # the team's own tags, on a job whose team tag is absent (new) or already the team's
        assert grant["Condition"]["StringEquals"] == {f"aws:RequestTag/{TEAM_TAG}": team}
        assert grant["Condition"]["StringEqualsIfExists"] == {f"aws:ResourceTag/{TEAM_TAG}": team}
    denies = [s for s in tagging if s["Effect"] == "Deny" and ":job/" in json.dumps(s["Resource"])]
    assert [(s["Action"], s["Condition"]) for s in denies] == [
        (  # another team's job
            ["batch:TagResource", "batch:UntagResource"],
            {
                "Null": {f"aws:ResourceTag/{TEAM_TAG}": "false"},
                "StringNotEquals": {f"aws:ResourceTag/{TEAM_TAG}": "lab"},
            },
        ),
        (  # another team's name
            "batch:TagResource",
            {"Null": {f"aws:RequestTag/{TEAM_TAG}": "false"}, "StringNotEquals": {f"aws:RequestTag/{TEAM_TAG}": "lab"}},
        ),
        (  # who owns it, who pays, what the platform wrote
            "batch:UntagResource",
            {"ForAnyValue:StringEquals": {"aws:TagKeys": [TEAM_TAG, TAG_COST_CENTRE, *PLATFORM_TAG_KEYS]}},
        ),
        ("batch:TagResource", {"ForAnyValue:StringEquals": {"aws:TagKeys": list(PLATFORM_TAG_KEYS)}}),
    ]


def test_a_submission_sets_no_platform_tag_key(synthesized):
    _, _, template = synthesized
    creating = [
        s
        for s in _statements(template, "Submitter")
        if s["Effect"] == "Allow"
        and (
            s["Action"] in ("batch:SubmitServiceJob", "batch:TagResource")
            or (s["Action"] == "batch:SubmitJob" and "ShareIdentifier" in json.dumps(s))
        )
    ]
    assert len(creating) == 4
    for statement in creating:
        assert statement["Condition"]["ForAllValues:StringNotEquals"] == {"aws:TagKeys": list(PLATFORM_TAG_KEYS)}


def test_grant_observe_is_read_only(synthesized):
    _, _, template = synthesized
    assert _statements(template, "Observer") == []  # no inline policy: a managed one, attached to the role
    actions = {
        a
        for s in _statements(template, "Observer", "AWS::IAM::ManagedPolicy")
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert actions == {
        "batch:GetJobQueueSnapshot",
        "batch:DescribeServiceJob",
        "batch:ListServiceJobs",
        "batch:ListQuotaShares",
    }


def test_grant_for_unknown_team_is_refused(synthesized):
    quota_queue, _, _ = synthesized
    with pytest.raises(GovernanceError, match=r"team_name: not a team of this queue \('ghost'\)"):
        quota_queue.submit_statements("ghost")


def test_bad_props_are_refused_before_any_resource():
    app = App()
    stack = Stack(app, "S")
    pool = BatchQuotaSharePool(name="q", capacity={"ml.p5.48xlarge": 2})
    with pytest.raises(GovernanceError) as raised:
        QuotaManagedTrainingQueue(
            stack,
            "Q",
            pool=pool,
            teams=[
                Team(name="a", preset="steady", quotas={"q": {"ml.p5.48xlarge": 2, "ml.g5.xlarge": 1}}),
                Team(name="b", preset="steady", quotas={"q": {"ml.p5.48xlarge": 1}}),
            ],
        )
    message = str(raised.value)
    assert "teams[0].quotas.q.ml.g5.xlarge: pool has no capacity of this instance type" in message
    assert "pool.capacity.ml.p5.48xlarge: teams are guaranteed 3 instances but the pool has fewer (2)" in message
    assert stack.node.try_find_child("Q") is None


def test_grant_observe_passes_the_librarys_own_standard_packs():
    """Issue 41 item 10: the README's grant_observe gave the role an inline policy on `*`, which
    NIST (IAMNoInlinePolicy) and AwsSolutions-IAM5 refused under apply_standard_packs."""
    app = App()
    stack = Stack(app, "Observed", env={"account": "111122223333", "region": "us-east-1"})
    queue = QuotaManagedTrainingQueue(
        stack, "Training", pool=QUOTA_POOL, teams=[t for t in TEAMS if "training" in t.quotas]
    )
    role = iam.Role(stack, "Dashboards", assumed_by=iam.AccountRootPrincipal())
    grant = queue.grant_observe(role)
    assert grant.success
    apply_standard_packs(app)
    app.synth()  # raises ValidationFailed on any open finding
    fair_app = App()
    fair_stack = Stack(fair_app, "FairObserved", env={"account": "111122223333", "region": "us-east-1"})
    fair = FairShareJobQueue(fair_stack, "Fair", pool=FAIR_POOL, teams=[t for t in TEAMS if "ec2" in t.quotas])
    fair.grant_observe(iam.Role(fair_stack, "Auditor", assumed_by=iam.AccountRootPrincipal()))
    apply_standard_packs(fair_app)
    fair_app.synth()
