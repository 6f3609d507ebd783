"""What the reference app deploys for chargeback: cost allocation tags, alert routing to the
platform and to each team's owner, budgets, and the usage dashboards readable by their team.
Synthesized once per layout, with the compliance packs (synthesis fails on any open finding)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from constructs_lib.core.chargeback import organisation_dashboard_name, team_dashboard_name
from constructs_lib.model import GovernanceModel
from constructs_lib.organisation.chargeback import purchases_monthly_amount
from gpu_governance_runtime.contract import TAG_COST_CENTRE, TAG_MANAGED_BY, TAG_POOL, TAG_TEAM
from tests.foundation.org import default_data, synthesize_reference

CHATBOT = "arn:aws:sns:us-east-1:111122223333:gpu-platform-chatbot"


def _templates(outdir) -> dict[str, dict]:
    return {p.name.removesuffix(".template.json"): json.loads(p.read_text()) for p in outdir.glob("*.template.json")}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    data = default_data()
    data["alerts"].append(CHATBOT)
    data["teams"][2].pop("owner")  # production: no owner, so no owner topic
    data["teams"][2].pop("cost_centre")
    data["teams"][1].pop("monthly_budget_usd")  # training: no budget
    model = GovernanceModel.from_dict(data)
    outdir = tmp_path_factory.mktemp("single")
    synthesize_reference(model, outdir)
    return model, _templates(outdir)["acme-ml-capacity"]["Resources"]


@pytest.fixture(scope="module")
def per_team(tmp_path_factory):
    data = default_data()
    data["stack_layout"] = "per_team"
    model = GovernanceModel.from_dict(data)
    outdir = tmp_path_factory.mktemp("per_team")
    synthesize_reference(model, outdir)
    return model, _templates(outdir)


def of_type(resources: dict, kind: str) -> dict[str, dict]:
    return {k: r for k, r in resources.items() if r["Type"] == kind}


def tags(resource: dict) -> dict[str, str]:
    found = resource["Properties"].get("Tags", [])
    return found if isinstance(found, dict) else {t["Key"]: t["Value"] for t in found}


def test_team_resources_carry_the_team_and_cost_centre_tags(single):
    model, resources = single
    research = next(t for t in model.teams if t.name == "research")
    for logical_id, resource in resources.items():
        if logical_id.startswith("Teamresearch") and resource["Type"] in (
            "AWS::KMS::Key",
            "AWS::S3::Bucket",
            "AWS::IAM::Role",
        ):
            assert tags(resource)[TAG_TEAM] == "research" and tags(resource)[TAG_COST_CENTRE] == research.cost_centre, (
                logical_id
            )
    production_key = next(r for k, r in of_type(resources, "AWS::KMS::Key").items() if k.startswith("Teamproduction"))
    assert tags(production_key)[TAG_TEAM] == "production" and TAG_COST_CENTRE not in tags(production_key)


def test_a_starvation_alarm_is_tagged_with_its_team_and_pool(single):
    _, resources = single
    alarm = next(
        r
        for k, r in of_type(resources, "AWS::CloudWatch::Alarm").items()
        if k.startswith("ReclaimControllerStarvedEc2GpuResearch")
    )
    assert {k: tags(alarm)[k] for k in (TAG_TEAM, TAG_POOL)} == {TAG_TEAM: "research", TAG_POOL: "ec2-gpu"}


def test_team_alarms_go_to_the_platform_the_owner_and_the_chat_topic(single):
    model, resources = single
    topics = of_type(resources, "AWS::SNS::Topic")
    platform = next(k for k in topics if k.startswith("ReclaimControllerTopic"))
    owner_topics = {k: t for k, t in topics.items() if k.startswith("ReclaimControllerTeamAlerts")}
    assert sorted(owner_topics) and all(
        "KmsMasterKeyId" in t["Properties"] for t in topics.values()
    )  # encrypted, every one
    assert not any("production" in k for k in owner_topics)  # no owner declared: no topic
    subscriptions = {
        (s["Properties"]["TopicArn"]["Ref"], s["Properties"]["Endpoint"])
        for s in of_type(resources, "AWS::SNS::Subscription").values()
    }
    research_topic = next(k for k in owner_topics if "research" in k)
    assert (research_topic, "research-lead@example.com") in subscriptions
    assert (platform, "gpu-platform@example.com") in subscriptions
    assert all(s["Properties"]["Protocol"] == "email" for s in of_type(resources, "AWS::SNS::Subscription").values())
    capacity_topic = next(k for k in topics if k.startswith("CapacityControllerTopic"))
    guard_topic = next(k for k in topics if k.startswith("SubmissionGuardTopic"))
    assert (guard_topic, "gpu-platform@example.com") in subscriptions
    for logical_id, alarm in of_type(resources, "AWS::CloudWatch::Alarm").items():
        actions = alarm["Properties"]["AlarmActions"]
        own = (
            capacity_topic
            if logical_id.startswith("CapacityController")
            else guard_topic
            if logical_id.startswith("SubmissionGuard")
            else platform
        )
        assert actions[0] == {"Ref": own} and CHATBOT in actions, logical_id
        if logical_id.startswith("ReclaimControllerStarved") and "Production" not in logical_id:
            assert any(a == {"Ref": k} for k in owner_topics for a in actions), logical_id
        elif logical_id.startswith("ReclaimControllerStarved"):
            assert len(actions) == 2  # platform and chat only
    assert (capacity_topic, "gpu-platform@example.com") in subscriptions


def test_budgets_only_where_declared_filtered_by_the_team_tag_and_told_to_the_owner(single):
    model, resources = single
    budgets = {
        r["Properties"]["Budget"]["BudgetName"]: r["Properties"]
        for r in of_type(resources, "AWS::Budgets::Budget").values()
    }
    assert set(budgets) == {"acme-ml-gpu-team-research", "acme-ml-gpu-team-production", "acme-ml-gpu-purchases"}
    research = budgets["acme-ml-gpu-team-research"]
    assert research["Budget"]["CostFilters"] == {"TagKeyValue": [f"user:{TAG_TEAM}$research"]}
    assert (research["Budget"]["BudgetType"], research["Budget"]["TimeUnit"], research["Budget"]["BudgetLimit"]) == (
        "COST",
        "MONTHLY",
        {"Amount": 60000, "Unit": "USD"},
    )
    for notification in research["NotificationsWithSubscribers"]:
        assert {s["Address"] for s in notification["Subscribers"]} == {
            "research-lead@example.com",
            "gpu-platform@example.com",
        }
    assert {n["Notification"]["NotificationType"] for n in research["NotificationsWithSubscribers"]} == {
        "ACTUAL",
        "FORECASTED",
    }
    assert {t["Key"]: t["Value"] for t in research["ResourceTags"]}[TAG_TEAM] == "research"
    production = budgets["acme-ml-gpu-team-production"]  # no owner: the platform only
    assert {s["Address"] for n in production["NotificationsWithSubscribers"] for s in n["Subscribers"]} == {
        "gpu-platform@example.com"
    }
    purchases = budgets["acme-ml-gpu-purchases"]
    assert purchases["Budget"]["CostFilters"] == {"TagKeyValue": [f"user:{TAG_MANAGED_BY}$acme-ml-capacity"]}
    assert (
        Decimal(str(purchases["Budget"]["BudgetLimit"]["Amount"]))
        == purchases_monthly_amount(model)
        == Decimal("20000.00")
    )


def test_a_weekly_window_budget_counts_52_weeks_a_year():
    data = default_data()
    data["capacity_windows"][0]["budget"] = {"amount": 1200, "period": "week"}
    assert purchases_monthly_amount(GovernanceModel.from_dict(data)) == Decimal("5200.00")


def test_an_organisation_dashboard_and_one_per_observed_team(single):
    model, resources = single
    names = {r["Properties"]["DashboardName"] for r in of_type(resources, "AWS::CloudWatch::Dashboard").values()}
    assert {
        organisation_dashboard_name("acme-ml"),
        *(team_dashboard_name("acme-ml", t.name) for t in model.teams),
    } <= names


def test_each_team_reads_its_own_dashboard_only(single):
    model, resources = single
    readers = {}
    for policy in of_type(resources, "AWS::IAM::ManagedPolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "cloudwatch:GetDashboard" in json.dumps(statement["Action"]):
                [role] = policy["Properties"]["Roles"]
                assert statement["Action"] == "cloudwatch:GetDashboard"  # and nothing else
                readers[role["Ref"]] = json.dumps(statement["Resource"])
    for team in model.teams:
        role = next(
            k for k, r in of_type(resources, "AWS::IAM::Role").items() if k.startswith(f"Team{team.name}SubmissionRole")
        )
        assert readers[role].endswith(f':dashboard/{team_dashboard_name("acme-ml", team.name)}"]]}}'), readers[role]
    assert len(readers) == len(model.teams)


def test_per_team_layout_puts_each_teams_topic_budget_and_dashboard_in_its_stack(per_team):
    model, templates = per_team
    for team in model.teams:
        resources = templates[f"acme-ml-team-{team.name}"]["Resources"]
        assert len(of_type(resources, "AWS::Budgets::Budget")) == 1
        # The reclaim alarms' owner topic, and the submission guard's (named: the capacity stack publishes to it by ARN)
        # for a team with an owner on a quota-share pool.
        guarded = team.owner is not None and any(model.pool(p).backend == "batch_quota_share" for p in team.quotas)
        topics = of_type(resources, "AWS::SNS::Topic")
        assert len(topics) == 1 + guarded and len(of_type(resources, "AWS::SNS::Subscription")) == 1 + guarded
        assert guarded == any(
            t["Properties"].get("TopicName") == f"acme-ml-gpu-guard-{team.name}" for t in topics.values()
        )
        assert [
            d["Properties"]["DashboardName"] for d in of_type(resources, "AWS::CloudWatch::Dashboard").values()
        ] == [team_dashboard_name("acme-ml", team.name)]
    capacity = templates["acme-ml-capacity"]["Resources"]
    assert [b["Properties"]["Budget"]["BudgetName"] for b in of_type(capacity, "AWS::Budgets::Budget").values()] == [
        "acme-ml-gpu-purchases"
    ]


def test_repeated_alert_targets_are_routed_once_and_same_named_topics_both():
    from aws_cdk import App, Stack, aws_cloudwatch as cloudwatch, aws_sns as sns
    from aws_cdk.assertions import Template

    from constructs_lib.core.chargeback import route_alarm, subscribe_alerts

    data = default_data()
    other = "arn:aws:sns:us-east-1:444455556666:gpu-platform-chatbot"  # same name, another account
    data["alerts"] = ["ops@example.com", "ops@example.com", CHATBOT, other, CHATBOT]
    model = GovernanceModel.from_dict(data)
    stack = Stack(App(), "s")
    alarm = cloudwatch.Alarm(
        stack, "A", metric=cloudwatch.Metric(namespace="n", metric_name="m"), threshold=1, evaluation_periods=1
    )
    route_alarm(alarm, model)
    subscribe_alerts(sns.Topic(stack, "T"), model)
    template = Template.from_stack(stack).to_json()["Resources"]
    [routed] = of_type(template, "AWS::CloudWatch::Alarm").values()
    assert routed["Properties"]["AlarmActions"] == [CHATBOT, other]
    assert len(of_type(template, "AWS::SNS::Subscription")) == 1


def _body(resources: dict, name: str) -> str:
    [dashboard] = [
        d for d in of_type(resources, "AWS::CloudWatch::Dashboard").values() if d["Properties"]["DashboardName"] == name
    ]
    return "".join(p for p in dashboard["Properties"]["DashboardBody"]["Fn::Join"][1] if isinstance(p, str))


def _widget(body: str, title_start: str) -> dict:
    return next(
        w["properties"] for w in json.loads(body)["widgets"] if w["properties"].get("title", "").startswith(title_start)
    )


def test_fees_are_drawn_against_the_purchases_budget_and_each_buying_teams_own(single):
    """production owns the capacity window: its dashboard draws its fees against its monthly
    budget; the organisation's draws every team's fees and their total against the purchases budget."""
    model, resources = single
    production = next(t for t in model.teams if t.name == "production")
    organisation = _widget(_body(resources, organisation_dashboard_name("acme-ml")), "purchase fees per team")
    assert organisation["annotations"]["horizontal"] == [
        {"value": float(purchases_monthly_amount(model)), "label": "purchases budget per month", "yAxis": "left"}
    ]
    searched = [m[0]["expression"] for m in organisation["metrics"]]
    assert (
        searched[1] == f"SUM({searched[0]})"
        and '{GpuGovernance/Capacity,Team} MetricName="PurchaseFees"' in searched[0]
    )
    team = _widget(_body(resources, team_dashboard_name("acme-ml", "production")), "purchase fees of team production")
    assert team["annotations"]["horizontal"] == [
        {"value": float(production.monthly_budget_usd), "label": "monthly budget of team production", "yAxis": "left"}
    ]
    assert team["metrics"] == [
        [
            "GpuGovernance/Capacity",
            "PurchaseFees",
            "Team",
            "production",
            {"label": "fees of team production", "period": 2592000, "stat": "Sum"},
        ]
    ]
    assert organisation["start"] == team["start"] == "-P90D"  # three 30-day periods


def test_a_teams_utilisation_widgets_search_only_its_own_blocks_and_plans(single):
    _, resources = single
    body = _body(resources, team_dashboard_name("acme-ml", "production"))
    for title in ("utilisation of each purchased block and plan", "purchased vs used instance-hours"):
        for [query] in _widget(body, title)["metrics"]:
            assert 'Team="production"' in query["expression"], query
    # Teams that buy nothing draw no purchases (research has no capacity window).
    assert "PurchaseFees" not in _body(resources, team_dashboard_name("acme-ml", "research"))


def test_a_team_that_only_buys_capacity_gets_a_dashboard_too():
    from aws_cdk import App, Stack

    from constructs_lib.organisation.chargeback import Chargeback

    model = GovernanceModel.from_dict(default_data())
    stack = Stack(App(), "Only")
    chargeback = Chargeback(stack, "Chargeback", model=model)  # no reclaim controller: no observed pool
    assert sorted(chargeback.team_dashboards) == sorted({w.team for w in model.capacity_windows})


@pytest.mark.parametrize(
    "kind, name_of",
    [
        ("AWS::Batch::QuotaShare", lambda p: p["QuotaShareName"]),
        ("AWS::SageMaker::ComputeQuota", lambda p: p["ComputeQuotaTarget"]["TeamName"]),
    ],
)
def test_quota_shares_and_compute_quotas_carry_the_team_pool_and_cost_centre_tags(single, kind, name_of):
    """Both types update their tags in place (the CloudFormation schemas cfn-lint ships: Tags is
    not createOnly, tagUpdatable true), so tagging them replaces nothing."""
    model, resources = single
    teams = {t.name: t for t in model.teams}
    pools = {p.name for p in model.pools}
    quotas = of_type(resources, kind).values()
    assert {name_of(q["Properties"]) for q in quotas} >= {"research", "production"}
    for quota in quotas:
        team = teams[name_of(quota["Properties"])]
        found = tags(quota)
        assert found[TAG_TEAM] == team.name and found[TAG_POOL] in pools and team.quotas[found[TAG_POOL]]
        assert found.get(TAG_COST_CENTRE) == team.cost_centre  # production declares none in this organisation


def test_tags_of_quota_shares_and_compute_quotas_update_in_place():
    """The schema evidence docs/chargeback.md cites: a tag change is an update, not a replacement."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    for kind in ("AWS::Batch::QuotaShare", "AWS::SageMaker::ComputeQuota"):
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", kind).schema
        assert "/properties/Tags" not in schema.get("createOnlyProperties", []), kind
        assert schema["tagging"]["tagUpdatable"] is True and schema["tagging"]["tagProperty"] == "/properties/Tags", (
            kind
        )


# --- spend from Cost Explorer (capacity/spend.py) --------------------------------------------------

SPEND_TITLE = "spend this month (USD, Cost Explorer, a day or two behind)"


def test_the_capacity_controller_reads_spend_with_the_one_permission_it_needs(single):
    """Teams declare budgets: the function is told to read spend, and may call GetCostAndUsage,
    which has no resource-level permission (acknowledged on the policy, packs clean)."""
    from gpu_governance_runtime.contract import ENV_TEAM_SPEND

    _, resources = single
    [function] = [
        r
        for r in of_type(resources, "AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == "gpu_governance_runtime.capacity.handler.handle"
    ]
    assert function["Properties"]["Environment"]["Variables"][ENV_TEAM_SPEND] == "daily"
    statements = [
        s
        for p in of_type(resources, "AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "ce:" in json.dumps(s["Action"])
    ]
    assert statements == [{"Action": "ce:GetCostAndUsage", "Effect": "Allow", "Resource": "*"}]


def test_spend_is_drawn_against_every_budget_and_the_untagged_apart(single):
    model, resources = single
    body = _body(resources, organisation_dashboard_name("acme-ml"))
    per_team = _widget(body, f"{SPEND_TITLE} per team")
    [[search]] = per_team["metrics"]
    assert search["expression"] == (
        "SEARCH('{GpuGovernance/Capacity,Team} MetricName=\"TeamSpendUsd\" NOT Team=\"(untagged)\"', 'Maximum', 86400)"
    )
    budgeted = sorted((t.monthly_budget_usd, t.name) for t in model.teams if t.monthly_budget_usd is not None)
    assert per_team["annotations"]["horizontal"] == [
        {"value": float(amount), "label": f"monthly budget of team {name}", "yAxis": "left"}
        for amount, name in budgeted
    ]
    untagged = _widget(body, f"{SPEND_TITLE} without a team tag")
    assert untagged["metrics"] == [
        [
            "GpuGovernance/Capacity",
            "TeamSpendUsd",
            "Team",
            "(untagged)",
            {"label": "without a team tag", "period": 86400, "stat": "Maximum"},
        ]
    ]
    research = _widget(_body(resources, team_dashboard_name("acme-ml", "research")), SPEND_TITLE)
    assert research["metrics"] == [
        [
            "GpuGovernance/Capacity",
            "TeamSpendUsd",
            "Team",
            "research",
            {"label": "spend of team research", "period": 86400, "stat": "Maximum"},
        ]
    ]
    assert research["annotations"]["horizontal"] == [
        {"value": 60000.0, "label": "monthly budget of team research", "yAxis": "left"}
    ]
    training = _widget(
        _body(resources, team_dashboard_name("acme-ml", "training")), SPEND_TITLE
    )  # no budget: its spend alone
    assert "annotations" not in training and training["metrics"][0][3] == "training"
    assert per_team["start"] == untagged["start"] == research["start"] == "-P90D"


def _light(data: dict, **chargeback) -> tuple:
    """The capacity controller and the chargeback construct alone, without the packs (quick)."""
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from constructs_lib.controllers.capacity import CapacityController
    from constructs_lib.organisation.chargeback import Chargeback

    model = GovernanceModel.from_dict(data)
    stack = Stack(App(), "Light")
    controller = CapacityController(stack, "CapacityController", model=model)
    built = Chargeback(stack, "Chargeback", model=model, purchases_controller_id=controller.controller_id, **chargeback)
    return built, Template.from_stack(stack).to_json()["Resources"]


def test_without_a_team_budget_nothing_reads_or_draws_spend():
    data = default_data()
    for team in data["teams"]:
        team.pop("monthly_budget_usd", None)
    chargeback, resources = _light(data)
    assert "TEAM_SPEND" not in json.dumps(of_type(resources, "AWS::Lambda::Function"))
    assert "ce:GetCostAndUsage" not in json.dumps(of_type(resources, "AWS::IAM::Policy"))
    assert "TeamSpendUsd" not in json.dumps(of_type(resources, "AWS::CloudWatch::Dashboard"))
    assert sorted(chargeback.team_dashboards) == ["production"]  # the window's owner only, as before


def test_every_budgeted_team_gets_a_dashboard_and_budget_lines_are_shared_and_capped(monkeypatch):
    """No reclaim controller here, so no observed pool: the teams with a budget get a dashboard
    for their spend. Teams with the same amount share a line; beyond the cap, the lowest amounts."""
    from constructs_lib.organisation import chargeback as module

    monkeypatch.setattr(module, "MAX_BUDGET_LINES", 1)
    data = default_data()
    for team in data["teams"]:
        team["monthly_budget_usd"] = 50000
    chargeback, resources = _light(data)
    assert sorted(chargeback.team_dashboards) == sorted(t["name"] for t in data["teams"])
    [line] = _widget(_body(resources, organisation_dashboard_name("acme-ml")), f"{SPEND_TITLE} per team")[
        "annotations"
    ]["horizontal"]
    assert (line["value"], line["label"]) == (50000, "monthly budget of teams research, training, production")
    data["teams"][0]["monthly_budget_usd"] = 90000
    _, resources = _light(data)
    [line] = _widget(_body(resources, organisation_dashboard_name("acme-ml")), f"{SPEND_TITLE} per team")[
        "annotations"
    ]["horizontal"]
    assert (line["value"], line["label"]) == (50000, "monthly budget of teams training, production")


def test_a_budget_line_names_three_teams_and_counts_the_rest():
    from constructs_lib.organisation.chargeback import _budget_label

    assert _budget_label(["a"]) == "monthly budget of team a"
    assert _budget_label(["a", "b", "c", "d", "e"]) == "monthly budget of teams a, b, c and 2 more"


def test_the_dashboards_draw_each_teams_kept_guarantee_from_the_controllers_metric(single):
    """Issue 43 item 6: the Average of the controller's per-tick GuaranteeKeptPercent (100 kept,
    0 breached, no data point when the team did not ask) per 30 days is the share kept."""
    _, resources = single
    body = _body(resources, team_dashboard_name("acme-ml", "research"))
    widgets = [w["properties"] for w in json.loads(body)["widgets"]]
    kept = [w for w in widgets if w.get("title", "").startswith("guarantee kept")]
    # one per pool whose tick sees each waiting job: not hyperpod-eks (Kueue counts workloads only),
    # which the dashboard draws otherwise
    assert sorted(w["metrics"][0][3] for w in kept) == ["ec2-gpu", "sagemaker-training"]
    assert "## Team research in pool hyperpod-eks" in body
    for widget in kept:
        [[namespace, metric, _, pool, _, share, options]] = widget["metrics"]
        assert (namespace, metric, share) == ("GpuGovernance/Reclaim", "GuaranteeKeptPercent", "research")
        # Average is the dashboard's default statistic: the CDK leaves it out
        assert (options.get("stat", "Average"), options["period"], widget["yAxis"]["left"]) == (
            "Average",
            2592000,
            {"min": 0, "max": 100},
        )
    organisation = _widget(_body(resources, organisation_dashboard_name("acme-ml")), "guarantee kept")
    [[query]] = organisation["metrics"]
    assert query["expression"] == (
        "SEARCH('{GpuGovernance/Reclaim,Pool,Share} MetricName=\"GuaranteeKeptPercent\"', 'Average', 2592000)"
    )
