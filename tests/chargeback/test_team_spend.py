"""Each team's month-to-date spend from Cost Explorer (lambda/gpu_governance_runtime/capacity/spend.py):
read once a day whatever the number of runs, every page, published per team, and never a broken
capacity run when Cost Explorer refuses. Cost Explorer through botocore's Stubber, which checks
every request and every canned response (full shapes) against the installed service model; the
ledger in moto."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from moto import mock_aws

from gpu_governance_runtime import contract
from gpu_governance_runtime.capacity import chargeback, spend
from gpu_governance_runtime.capacity.handler import process
from gpu_governance_runtime.common.clients import COST_EXPLORER
from gpu_governance_runtime.policy import parse_policy
from tests.capacity.stubbed_aws import create_ledger_table
from tests.capacity.test_handler import WINDOW, emf_records, env, read_utilisation  # noqa: F401  (the handler's fixture)

NOW = datetime(2026, 12, 10, 0, 5, tzinfo=UTC)
SCHEDULED = {"source": "aws.events", "detail-type": "Scheduled Event"}
POLICY = parse_policy(
    {
        "version": 1,
        "organisation": "acme-ml",
        "priority_classes": [],
        "capacity_windows": [WINDOW],
        "pools": [
            {
                "name": "ec2-gpu",
                "backend": "batch_fair_share",
                "capacity": {"p5.48xlarge": 4},
                "shares": [
                    {"name": name, "quota": {"p5.48xlarge": 2}, "strategy": "lend"}
                    for name in ("research", "training", "production")
                ],
            }
        ],
    }
)
ENOUGH_TIME = lambda: 300.0  # noqa: E731


def cost_page(
    groups: dict[str, str],
    *,
    start: str = "2026-12-01",
    end: str = "2026-12-11",
    estimated: bool = True,
    token: str | None = None,
) -> dict:
    """A GetCostAndUsage answer grouped by the team tag, every member the model has: ``groups``
    maps the tag value ("" for costs without the tag) to the UnblendedCost amount."""
    return {
        **({"NextPageToken": token} if token else {}),
        "GroupDefinitions": [{"Type": "TAG", "Key": contract.TAG_TEAM}],
        "ResultsByTime": [
            {
                "TimePeriod": {"Start": start, "End": end},
                "Total": {},
                "Estimated": estimated,
                "Groups": [
                    {
                        "Keys": [f"{contract.TAG_TEAM}${value}"],
                        "Metrics": {"UnblendedCost": {"Amount": amount, "Unit": "USD"}},
                    }
                    for value, amount in groups.items()
                ],
            }
        ],
        "DimensionValueAttributes": [],
    }


def cost_request(*, start: str = "2026-12-01", end: str = "2026-12-11", token: str | None = None) -> dict:
    return {
        "TimePeriod": {"Start": start, "End": end},
        "Granularity": "MONTHLY",
        "Metrics": ["UnblendedCost"],
        "GroupBy": [{"Type": "TAG", "Key": contract.TAG_TEAM}],
        **({"NextPageToken": token} if token else {}),
    }


def expect_spend(stub: Stubber, *pages: dict, start: str = "2026-12-01", end: str = "2026-12-11") -> None:
    """The pages of one read, each asked for with the token of the one before."""
    token = None
    for page in pages:
        stub.add_response("get_cost_and_usage", page, cost_request(start=start, end=end, token=token))
        token = page.get("NextPageToken")


@pytest.fixture
def aws():
    with mock_aws():
        ledger = create_ledger_table()
        ce = boto3.client("ce", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
        with Stubber(ce) as stub:
            yield ledger, ce, stub
            stub.assert_no_pending_responses()


def figures(records) -> dict[str, float]:
    found = {}
    for record in records:
        [directive] = record["_aws"]["CloudWatchMetrics"]
        assert (directive["Namespace"], directive["Dimensions"], directive["Metrics"]) == (
            contract.CAPACITY_NAMESPACE,
            [list(contract.TEAM_SPEND_DIMENSIONS)],
            [{"Name": contract.TEAM_SPEND, "Unit": "None"}],
        )
        found[record["Team"]] = record[contract.TEAM_SPEND]
    return found


def test_every_page_is_read_and_each_team_published_with_the_untagged_and_the_silent(aws):
    """Two pages (Cost Explorer may split one period's groups over pages, a team on both), the
    empty tag value as untagged, a team no longer declared under its own name, and a declared
    team without any cost as 0."""
    ledger, ce, stub = aws
    expect_spend(
        stub,
        cost_page({"research": "1200.125", "": "53000.5"}, token="page-2"),
        cost_page({"research": "0.005", "retired-team": "42", "training": "-10.25"}),
    )
    written = []
    result = spend.publish_daily(
        ce=ce, ledger=ledger, policy=POLICY, now=NOW, time_left=ENOUGH_TIME, write=written.append
    )
    assert figures(written) == {
        "research": 1200.13,
        contract.UNTAGGED_TEAM: 53000.5,
        "retired-team": 42.0,
        "training": -10.25,
        "production": 0.0,
    }
    assert all(r["_aws"]["Timestamp"] == int(NOW.timestamp() * 1000) for r in written)
    assert result == [
        {
            "spend": "2026-12-10",
            "estimated": True,
            "teams": {
                contract.UNTAGGED_TEAM: "53000.5",
                "production": "0",
                "research": "1200.130",
                "retired-team": "42",
                "training": "-10.25",
            },
        }
    ]
    assert ledger.actions("team-spend#", ("published",)) == [("team-spend#2026-12-10", "published", {})]


def test_repeated_and_overlapping_runs_of_a_day_read_and_publish_once(aws):
    """A second run the same day, and a run starting while the first is still reading, call
    Cost Explorer not at all (the Stubber would refuse a call it was not told of)."""
    ledger, ce, stub = aws
    overlapping = []

    def read_while_another_run_starts(**_):
        overlapping.append(
            spend.publish_daily(
                ce=ce, ledger=ledger, policy=POLICY, now=NOW + timedelta(minutes=1), time_left=ENOUGH_TIME
            )
        )

    ce.meta.events.register_first("before-parameter-build.ce.GetCostAndUsage", read_while_another_run_starts)
    expect_spend(stub, cost_page({"research": "10"}))
    written = []
    spend.publish_daily(ce=ce, ledger=ledger, policy=POLICY, now=NOW, time_left=ENOUGH_TIME, write=written.append)
    assert overlapping == [[]]
    ce.meta.events.unregister("before-parameter-build.ce.GetCostAndUsage", read_while_another_run_starts)
    for later in (timedelta(minutes=15), timedelta(hours=23, minutes=54)):
        assert (
            spend.publish_daily(
                ce=ce, ledger=ledger, policy=POLICY, now=NOW + later, time_left=ENOUGH_TIME, write=written.append
            )
            == []
        )
    assert len(written) == 3  # research, training, production once, nothing after
    expect_spend(
        stub, cost_page({"research": "25"}, end="2026-12-12"), end="2026-12-12"
    )  # the next UTC day reads again
    spend.publish_daily(
        ce=ce, ledger=ledger, policy=POLICY, now=NOW + timedelta(days=1), time_left=ENOUGH_TIME, write=written.append
    )
    assert figures(written[3:])["research"] == 25.0


@pytest.mark.parametrize(
    "code, why",
    [
        ("AccessDeniedException", "Cost Explorer not enabled, or the management account denies this member account"),
        ("DataUnavailableException", "no cost data yet"),
        ("LimitExceededException", "throttled"),
        ("BillExpirationException", "the bill expired"),
    ],
)
def test_a_refused_read_is_an_error_publishes_nothing_and_waits_for_the_next_day(aws, code, why):
    ledger, ce, stub = aws
    stub.add_client_error(
        "get_cost_and_usage",
        service_error_code=code,
        service_message=why,
        http_status_code=400,
        expected_params=cost_request(),
    )
    written = []
    [result] = spend.publish_daily(
        ce=ce, ledger=ledger, policy=POLICY, now=NOW, time_left=ENOUGH_TIME, write=written.append
    )
    assert result["spend"] == "2026-12-10" and result["error"].startswith(f"{code}: ") and why in result["error"]
    assert written == []
    [(_, status, details)] = ledger.actions("team-spend#", ("failed",))
    assert status == "failed" and code in details["error"]
    # Not again today: each request costs money, and a denied one would be denied every run.
    assert (
        spend.publish_daily(ce=ce, ledger=ledger, policy=POLICY, now=NOW + timedelta(hours=6), time_left=ENOUGH_TIME)
        == []
    )
    expect_spend(stub, cost_page({"research": "1"}, end="2026-12-12"), end="2026-12-12")
    assert (
        "teams"
        in spend.publish_daily(
            ce=ce,
            ledger=ledger,
            policy=POLICY,
            now=NOW + timedelta(days=1),
            time_left=ENOUGH_TIME,
            write=written.append,
        )[0]
    )


@pytest.mark.parametrize(
    "metric, problem",
    [
        ({"Amount": "12.5", "Unit": "EUR"}, "not an amount in USD"),
        ({"Amount": "twelve", "Unit": "USD"}, "amount 'twelve' is not a number"),
        ({"Amount": "NaN", "Unit": "USD"}, "amount 'NaN' is not a number"),
    ],
)
def test_an_answer_that_is_not_a_usd_amount_publishes_nothing(aws, metric, problem):
    """One team's figure wrong makes the whole day's unreadable: publishing the others would
    draw a total that is not the total."""
    ledger, ce, stub = aws
    page = cost_page({"research": "10", "training": "1"})
    page["ResultsByTime"][0]["Groups"][1]["Metrics"]["UnblendedCost"] = metric
    expect_spend(stub, page)
    written = []
    [result] = spend.publish_daily(
        ce=ce, ledger=ledger, policy=POLICY, now=NOW, time_left=ENOUGH_TIME, write=written.append
    )
    assert (
        result["error"].startswith("SpendUnreadable: ")
        and problem in result["error"]
        and "'training'" in result["error"]
    )
    assert written == []


def test_too_little_time_defers_before_claiming_and_fails_between_pages(aws):
    ledger, ce, stub = aws
    short = lambda: spend.CALL_SECONDS - 1  # noqa: E731
    assert spend.publish_daily(ce=ce, ledger=ledger, policy=POLICY, now=NOW, time_left=short)[0]["deferred"]
    assert ledger.actions("team-spend#", ("reading", "failed", "published")) == []  # a later run today still reads
    left = iter([300.0, spend.CALL_SECONDS - 1])
    expect_spend(stub, cost_page({"research": "10"}, token="page-2"))
    written = []
    [result] = spend.publish_daily(
        ce=ce, ledger=ledger, policy=POLICY, now=NOW, time_left=lambda: next(left), write=written.append
    )
    assert "too little of the invocation left for the next page" in result["error"] and written == []


@pytest.mark.parametrize(
    "now, start, end",
    [
        (datetime(2026, 12, 1, 0, 5, tzinfo=UTC), "2026-12-01", "2026-12-02"),  # Start == End would be refused
        (datetime(2026, 12, 31, 23, 50, tzinfo=UTC), "2026-12-01", "2027-01-01"),  # not past the first of next month
        (datetime(2027, 2, 28, 12, 0, tzinfo=UTC), "2027-02-01", "2027-03-01"),
    ],
)
def test_the_period_is_the_utc_month_so_far_today_included(aws, now, start, end):
    ledger, ce, stub = aws
    expect_spend(stub, cost_page({}, start=start, end=end, estimated=False), start=start, end=end)
    [result] = spend.publish_daily(
        ce=ce, ledger=ledger, policy=POLICY, now=now, time_left=ENOUGH_TIME, write=lambda _: None
    )
    assert result["estimated"] is False and set(result["teams"]) == {"research", "training", "production"}


@pytest.mark.parametrize(
    "keys, team",
    [
        ([f"{contract.TAG_TEAM}$research"], "research"),
        ([f"{contract.TAG_TEAM}$"], contract.UNTAGGED_TEAM),
        ([f"{contract.TAG_TEAM}$recherche-équipe"], chargeback.UNKNOWN),  # CloudWatch takes ASCII dimension values only
        ([f"{contract.TAG_TEAM}$   "], chargeback.UNKNOWN),
        (
            [f"{contract.TAG_TEAM}${contract.UNTAGGED_TEAM}"],
            chargeback.UNKNOWN,
        ),  # a tag value cannot pose as the costs without one
        ([f"{contract.TAG_TEAM}${chargeback.UNKNOWN}"], chargeback.UNKNOWN),
        ([f"{contract.TAG_TEAM}$a$b"], "a$b"),
        (["Project$research"], chargeback.UNKNOWN),
        ([f"{contract.TAG_TEAM}$research", "SERVICE$Amazon EC2"], chargeback.UNKNOWN),
    ],
)
def test_group_keys_name_the_team_tag_value(keys, team):
    assert spend.team_of(keys) == team


def test_values_no_team_can_take_are_summed_under_unknown(aws):
    ledger, ce, stub = aws
    expect_spend(stub, cost_page({"recherche-équipe": "3", "   ": "4", "research": "5"}))
    written = []
    spend.publish_daily(ce=ce, ledger=ledger, policy=POLICY, now=NOW, time_left=ENOUGH_TIME, write=written.append)
    assert figures(written)[chargeback.UNKNOWN] == 7.0


# --- the client the function builds ---------------------------------------------------------------


def _answering(client, status: int, body: dict, seen: list):
    def send(request, **_):
        seen.append(request.url)
        return AWSResponse(
            request.url,
            status,
            {"x-amzn-requestid": "r"},
            type("Raw", (), {"stream": lambda self, **kw: iter([json.dumps(body).encode()])})(),
        )

    client.meta.events.register("before-send.ce.GetCostAndUsage", send)


@pytest.mark.parametrize(
    "region, endpoint",
    [
        ("eu-west-1", "https://ce.us-east-1.amazonaws.com/"),
        ("us-east-1", "https://ce.us-east-1.amazonaws.com/"),
        ("cn-north-1", "https://ce.cn-northwest-1.amazonaws.com.cn/"),
    ],
)
def test_the_function_reaches_its_partitions_cost_explorer_from_any_region(region, endpoint):
    """The capacity function builds its client in its own region; botocore's endpoint rules send
    it to the partition's one Cost Explorer endpoint (us-east-1 in the aws partition)."""
    client = boto3.client(
        "ce", region_name=region, config=COST_EXPLORER, aws_access_key_id="x", aws_secret_access_key="x"
    )
    seen: list = []
    _answering(client, 200, cost_page({"research": "1"}), seen)
    client.get_cost_and_usage(**cost_request())
    assert seen == [endpoint]


def test_throttling_is_retried_twice_then_given_up():
    """Cost Explorer throttles with LimitExceededException, which only botocore's standard retry
    mode retries; three attempts at most, so a throttled day costs at most three requests."""
    client = boto3.client(
        "ce", region_name="eu-west-1", config=COST_EXPLORER, aws_access_key_id="x", aws_secret_access_key="x"
    )
    client.meta.events.register("before-sleep.ce.GetCostAndUsage", lambda **_: None)
    seen: list = []
    _answering(client, 400, {"__type": "LimitExceededException", "message": "Rate exceeded"}, seen)
    with pytest.raises(client.exceptions.LimitExceededException):
        client.get_cost_and_usage(**cost_request())
    assert len(seen) == 3


# --- inside a capacity run -------------------------------------------------------------------------


def _run(env, *, event=SCHEDULED, spend_setting: str | None = "daily", ce=None, now=None):  # noqa: F811
    stubbed, clients, settings, _ = env
    stubbed.owned()
    stubbed.offerings()
    if event == SCHEDULED:
        read_utilisation(stubbed)
    settings = {**settings, **({contract.ENV_TEAM_SPEND: spend_setting} if spend_setting else {})}
    result = process(event, clients=replace(clients, ce=ce), settings=settings, now=now or NOW)
    stubbed.done()
    return result


def test_a_scheduled_run_publishes_the_spend_and_the_next_one_does_not(env, capsys):  # noqa: F811
    ce = boto3.client("ce", region_name="us-east-1")
    with Stubber(ce) as stub:
        expect_spend(stub, cost_page({"research": "80000.01", "": "12"}))
        result = _run(env, ce=ce)
        assert result["spend"][0]["teams"] == {"research": "80000.01", contract.UNTAGGED_TEAM: "12"}
        published = {
            r["Team"]: r[contract.TEAM_SPEND] for r in emf_records(capsys.readouterr().out) if contract.TEAM_SPEND in r
        }
        assert published == {"research": 80000.01, contract.UNTAGGED_TEAM: 12.0}
        assert _run(env, ce=ce, now=NOW + timedelta(minutes=15))["spend"] == []
        stub.assert_no_pending_responses()


def test_a_refusing_cost_explorer_is_a_consumer_error_and_the_run_completes(env, capsys):  # noqa: F811
    ce = boto3.client("ce", region_name="us-east-1")
    with Stubber(ce) as stub:
        stub.add_client_error("get_cost_and_usage", service_error_code="AccessDeniedException", http_status_code=400)
        result = _run(env, ce=ce)
    assert result["spend"][0]["error"].startswith("AccessDeniedException") and "run" in result
    records = emf_records(capsys.readouterr().out)
    assert next(r for r in records if "ConsumerErrors" in r)["ConsumerErrors"] == 1
    assert not any(contract.TEAM_SPEND in r for r in records)


@pytest.mark.parametrize(
    "event, spend_setting",
    [
        (
            {"source": "gpu-governance.capacity", "detail-type": "Capacity Request", "detail": {}},
            "daily",
        ),  # only scheduled runs
        (SCHEDULED, None),  # no team declares a budget: not switched on
    ],
)
def test_only_scheduled_runs_of_a_controller_told_to_read_spend_call_cost_explorer(env, event, spend_setting):  # noqa: F811
    """The function has no Cost Explorer client here: a call would fail the run."""
    result = _run(env, event=event, spend_setting=spend_setting)
    assert "spend" not in result


def test_declared_teams_are_the_policys_shares_and_window_owners():
    assert spend.declared_teams(POLICY) == {"research", "training", "production"}


def test_a_day_whose_claim_was_answered_too_late_is_still_read_and_published():
    """The day's claim (PutItem) carried out, its answer lost, and the capacity handler's client
    (CAPACITY_READS: botocore's default retries) sends it again: the old ledger took the resend's refusal
    for another run's claim, and nobody read or published that day's spend."""
    from gpu_governance_runtime.capacity.ledger import Ledger
    from gpu_governance_runtime.common.clients import CAPACITY_READS
    from tests.aws_model import sdk
    from tests.aws_model.batch import Faults, LoseAnswer
    from tests.aws_model.dynamodb import FakeDynamoDB

    plan = LoseAnswer("PutItem")
    dynamodb = FakeDynamoDB(faults=Faults(plan))
    dynamodb.create_table("ledger", key="pk")
    ledger = Ledger(client=dynamodb.client(config=CAPACITY_READS), table_name="ledger")
    ce = boto3.client("ce", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    written = []
    with Stubber(ce) as stub, sdk.no_backoff():
        expect_spend(stub, cost_page({"research": "1200"}))
        spend.publish_daily(ce=ce, ledger=ledger, policy=POLICY, now=NOW, time_left=ENOUGH_TIME, write=written.append)
        stub.assert_no_pending_responses()
    assert plan.lost == 1 and figures(written)["research"] == 1200.0
    assert ledger.actions("team-spend#", ("published",)) == [("team-spend#2026-12-10", "published", {})]
