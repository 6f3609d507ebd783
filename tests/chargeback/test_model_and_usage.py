"""Owners, cost centres, budgets and alert targets in the model; the usage figures a tick turns
into instance-hours (pure, no synthesis)."""

from __future__ import annotations

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime.contract import BORROWED_HOURS, GUARANTEED_HOURS, LENT_HOURS, USED_HOURS
from gpu_governance_runtime.planners.reclaim import ShareUsage
from gpu_governance_runtime.usage import idle_guaranteed_hours, instance_hours, usage_records
from tests.foundation.org import default_data


def problems_of(data: dict) -> list[str]:
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    return [p.path for p in raised.value.problems]


def test_the_reference_organisation_declares_owners_cost_centres_budgets_and_alerts():
    model = GovernanceModel.from_dict(default_data())
    assert all(t.owner and t.cost_centre and t.monthly_budget_usd for t in model.teams)
    assert model.alerts


@pytest.mark.parametrize(
    "field, value",
    [
        ("owner", "not-an-address"),
        ("owner", "lead@example"),
        ("owner", "lead@example.com\nBcc: x@y.com"),
        ("cost_centre", "CC<1>"),
        ("cost_centre", ""),
        ("monthly_budget_usd", 0),
        ("monthly_budget_usd", "12.345"),
    ],
)
def test_bad_team_contacts_and_budgets_are_refused_with_their_path(field, value):
    data = default_data()
    data["teams"][1][field] = value
    assert problems_of(data) == [f"teams[1].{field}"]


@pytest.mark.parametrize(
    "target", ["ops", "arn:aws:sqs:us-east-1:111122223333:queue", "arn:aws:sns:us-east-1:1111:short"]
)
def test_an_alert_target_must_be_an_email_or_a_topic_arn(target):
    data = default_data()
    data["alerts"] = ["ok@example.com", target]
    assert problems_of(data) == ["alerts[1]"]


def test_an_alert_topic_in_another_region_is_refused():
    """CloudWatch alarms publish only to topics of their own region."""
    data = default_data()
    data["alerts"] = ["arn:aws:sns:eu-west-1:111122223333:chatbot"]
    with pytest.raises(GovernanceError, match=r"alerts\[0\]: SNS topic in another region .* a topic in us-east-1"):
        GovernanceModel.from_dict(data)
    data["alerts"] = ["arn:aws:sns:us-east-1:111122223333:chatbot"]
    assert GovernanceModel.from_dict(data).alerts == ("arn:aws:sns:us-east-1:111122223333:chatbot",)


def test_owner_cost_centre_and_budget_stay_optional():
    data = default_data()
    for team in data["teams"]:
        for field in ("owner", "cost_centre", "monthly_budget_usd"):
            team.pop(field)
    data.pop("alerts")
    assert GovernanceModel.from_dict(data).teams[0].owner is None


ROWS = (
    ShareUsage(share="research", instance_type="a", guaranteed=2, in_use=5, borrowed=3, lent=0, pending=0),
    ShareUsage(share="research", instance_type="b", guaranteed=1, in_use=0, borrowed=0, lent=0, pending=0),
    ShareUsage(share="training", instance_type="a", guaranteed=4, in_use=1, borrowed=0, lent=3, pending=0),
)


def test_one_tick_becomes_instance_hours_summed_over_instance_types():
    hours = instance_hours(ROWS, tick_seconds=60)
    assert hours["research"] == {USED_HOURS: 5 / 60, GUARANTEED_HOURS: 3 / 60, BORROWED_HOURS: 3 / 60, LENT_HOURS: 0}
    assert hours["training"][LENT_HOURS] == pytest.approx(3 / 60)
    # a month of one-minute ticks of the same state is the month's instance-hours
    month = [instance_hours(ROWS, tick_seconds=60)["training"][GUARANTEED_HOURS] for _ in range(30 * 24 * 60)]
    assert sum(month) == pytest.approx(4 * 30 * 24)


def test_idle_guarantee_is_what_neither_the_team_nor_its_borrowers_used():
    training = instance_hours(ROWS, tick_seconds=3600)["training"]
    assert idle_guaranteed_hours(training) == 0  # 4 guaranteed: 1 used itself, 3 lent
    research = instance_hours(ROWS, tick_seconds=3600)["research"]
    assert idle_guaranteed_hours(research) == 1  # type b's guarantee sat idle; borrowing is not own use
    assert idle_guaranteed_hours({}) == 0


def test_usage_records_are_embedded_metric_format_per_share():
    records = usage_records("pool", ROWS, tick_seconds=60, namespace="NS", now=1_000)
    assert [r["Share"] for r in records] == ["research", "training"]
    definition = records[0]["_aws"]["CloudWatchMetrics"][0]
    assert definition["Namespace"] == "NS" and definition["Dimensions"] == [["Pool", "Share"]]
    assert {m["Name"] for m in definition["Metrics"]} == {USED_HOURS, GUARANTEED_HOURS, BORROWED_HOURS, LENT_HOURS}
    assert (
        all(m["Name"] in r for r in records for m in definition["Metrics"])
        and records[0]["_aws"]["Timestamp"] == 1_000_000
    )
