"""`gpu-governance usage report` against recorded CloudWatch GetMetricData pages and a recorded
purchase-ledger scan, through botocore's Stubber (which checks every request against the
service model)."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber

from constructs_lib.cli import EXIT_BAD_INPUT, EXIT_OK, main
from constructs_lib.cli.usage import MAX_QUERIES_PER_CALL, queries
from constructs_lib.model.loader import load_model
from gpu_governance_runtime.contract import (
    BORROWED_HOURS,
    GUARANTEE_ASKED_HOURS,
    GUARANTEE_BREACHED_HOURS,
    GUARANTEED_HOURS,
    LENT_HOURS,
    USED_HOURS,
)

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

ROOT = Path(__file__).resolve().parents[2]
NOV1, NOV2 = (datetime(2026, 11, d, tzinfo=UTC) for d in (1, 2))
START, END = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)


def ids_of(model, team: str) -> dict[tuple[str, str], str]:
    return {(pool, metric): query_id for query_id, (pool, _, metric) in queries(model, [team]).items()}


def recorded_pages(model) -> list[dict]:
    """Two pages, as GetMetricData returns them: the second continues the first's series."""
    ids = ids_of(model, "research")

    def result(pool, metric, stamps, values):
        return {
            "Id": ids[pool, metric],
            "Label": metric,
            "Timestamps": stamps,
            "Values": values,
            "StatusCode": "Complete",
        }

    first = {
        "MetricDataResults": [
            result("ec2-gpu", USED_HOURS, [NOV1], [30.0]),
            result("ec2-gpu", GUARANTEED_HOURS, [NOV1], [96.0]),
            result("ec2-gpu", BORROWED_HOURS, [NOV1], [10.0]),
            result("ec2-gpu", LENT_HOURS, [NOV1], [20.0]),
            # research asked for its guarantee 10 hours over two days and waited below it for 2 of them
            result("ec2-gpu", GUARANTEE_ASKED_HOURS, [NOV1, NOV2], [6.0, 4.0]),
            result("ec2-gpu", GUARANTEE_BREACHED_HOURS, [NOV1, NOV2], [2.0, 0.0]),
        ],
        "NextToken": "page-2",
        "Messages": [],
    }
    second = {
        "MetricDataResults": [
            result("ec2-gpu", USED_HOURS, [NOV2], [12.5]),
            result("ec2-gpu", GUARANTEED_HOURS, [NOV2], [96.0]),
            result("sagemaker-training", USED_HOURS, [NOV2], [4.0]),
        ],
        "Messages": [],
    }
    return [first, second]


def ledger_item(intent_id: str, start: str, end: str, fee: str, status: str = "purchased") -> dict:
    offering = {
        "id": f"tp-{intent_id}",
        "kind": "training_plan",  # an ml.* type: a SageMaker training plan
        "instance_type": "ml.p5.48xlarge",
        "count": 2,
        "availability_zone": "us-east-1a",
        "start": start,
        "end": end,
        "duration_hours": 8,
        "upfront_fee": fee,
        "currency": "USD",
        "reservation_id": None,
    }
    return {
        "pk": {"S": f"intent#{intent_id}"},
        "id": {"S": intent_id},
        "window": {"S": "weekly-validation"},
        "occurrence": {"S": "weekly-validation@2026-11-09"},
        "period": {"S": "2026-11"},
        "status": {"S": status},
        "created_at": {"S": "2026-10-30T10:00:00+00:00"},
        "updated_at": {"S": "2026-10-30T10:05:00+00:00"},
        "fee": {"N": fee},
        "offering": {"S": json.dumps(offering, sort_keys=True)},
        "reservation_id": {"S": "cr-0abc"},
    }


ANY_SCAN = {
    "TableName": "acme-ledger",
    "FilterExpression": ANY,
    "ExpressionAttributeNames": ANY,
    "ExpressionAttributeValues": ANY,
    "ConsistentRead": True,
}


def stubbed_clients(monkeypatch) -> tuple[Stubber, Stubber]:
    """The report's CloudWatch and DynamoDB clients (what boto3.client gives it) behind Stubbers, the usage metrics'
    two GetMetricData pages queued first."""
    cloudwatch, dynamodb = (
        boto3.client("cloudwatch", region_name="us-east-1"),
        boto3.client("dynamodb", region_name="us-east-1"),
    )
    cw_stub, db_stub = Stubber(cloudwatch), Stubber(dynamodb)
    first, second = recorded_pages(load_model(None))
    expected = {"MetricDataQueries": ANY, "StartTime": START, "EndTime": END, "ScanBy": "TimestampAscending"}
    cw_stub.add_response("get_metric_data", first, expected)
    cw_stub.add_response("get_metric_data", second, {**expected, "NextToken": "page-2"})
    clients = {"cloudwatch": cloudwatch, "dynamodb": dynamodb}
    monkeypatch.setattr(boto3, "client", lambda service, region_name=None: clients[service])
    return cw_stub, db_stub


@pytest.fixture
def aws(monkeypatch):
    cw_stub, db_stub = stubbed_clients(monkeypatch)
    db_stub.add_response(
        "scan",
        {
            "Items": [ledger_item("in-nov", "2026-11-09T09:00:00+00:00", "2026-11-09T17:00:00+00:00", "1720.50")],
            "LastEvaluatedKey": {"pk": {"S": "intent#in-nov"}},
        },
        ANY_SCAN,
    )
    # the second scan page continues from the first's LastEvaluatedKey
    db_stub.add_response(
        "scan",
        {"Items": [ledger_item("in-dec", "2026-12-07T09:00:00+00:00", "2026-12-07T17:00:00+00:00", "1800.00")]},
        {**ANY_SCAN, "ExclusiveStartKey": {"pk": {"S": "intent#in-nov"}}},
    )
    with cw_stub, db_stub:
        yield cw_stub, db_stub
    cw_stub.assert_no_pending_responses()
    db_stub.assert_no_pending_responses()


def report(capsys, *extra: str) -> tuple[int, str]:
    code = main(
        [
            "usage",
            "report",
            "--example",
            "--from",
            "2026-11-01",
            "--to",
            "2026-12-01",
            "--team",
            "research",
            "--ledger-table",
            "acme-ledger",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    return code, out + err


def test_json_report_sums_every_page_and_lists_the_periods_purchases(aws, capsys):
    code, out = report(capsys, "--format", "json")
    assert code == EXIT_OK, out
    document = json.loads(out)
    rows = {r["pool"]: r for r in document["teams"]}
    assert set(rows) == set(load_model(None).teams[0].quotas)  # every pool of the team, zero when unobserved
    assert rows["ec2-gpu"] == {
        "team": "research",
        "pool": "ec2-gpu",
        "used": 42.5,
        "guaranteed": 192.0,
        "borrowed": 10.0,
        "lent": 20.0,
        "idle_guaranteed": 192.0 - (42.5 - 10.0) - 20.0,
    }
    assert rows["sagemaker-training"]["used"] == 4.0 and rows["hyperpod-eks"]["used"] == 0
    assert [p["intent"] for p in document["purchases"]] == ["in-nov"]  # December's block is outside the period
    assert document["guarantees_kept"] == [
        {
            "team": "research",
            "pool": "ec2-gpu",
            "month": "2026-11",
            "asked_hours": 10.0,
            "breached_hours": 2.0,
            "kept_percent": 80.0,
        }
    ]
    assert document["guarantees_not_recorded_in_pools"] == ["hyperpod-eks"]
    assert document["purchase_fees"] == {"USD": "1720.50"}


def test_markdown(aws, capsys):
    code, out = report(capsys)
    assert code == EXIT_OK
    assert "| research | ec2-gpu | 42.50 | 192.00 | 10.00 | 20.00 | 139.50 |" in out
    assert "Total fees: 1720.50 USD" in out and "in-dec" not in out
    assert "| research | ec2-gpu | 2026-11 | 10.00 | 2.00 | 80.0 % |" in out
    assert "Not recorded in pools hyperpod-eks" in out


def test_csv(aws, capsys):
    code, out = report(capsys, "--format", "csv")
    lines = out.splitlines()
    assert code == EXIT_OK and lines[0].startswith(
        "record,team,pool,used,guaranteed,borrowed,lent,idle_guaranteed,intent"
    )
    assert any(line.startswith("usage,research,ec2-gpu,42.5,192.0,10.0,20.0,139.5,") for line in lines)
    assert any(line.startswith("purchase,") and ",in-nov,weekly-validation," in line for line in lines)
    assert lines[0].endswith(",month,asked_hours,breached_hours,kept_percent")
    [kept] = [row for row in csv.DictReader(io.StringIO(out)) if row["record"] == "guarantee"]
    assert {k: v for k, v in kept.items() if v} == {
        "record": "guarantee",
        "team": "research",
        "pool": "ec2-gpu",
        "month": "2026-11",
        "asked_hours": "10.0",
        "breached_hours": "2.0",
        "kept_percent": "80.0",
    }


def test_the_plot_is_a_real_png_with_one_panel_per_team(aws, capsys, tmp_path):
    from PIL import Image

    path = tmp_path / "usage.png"
    code, _ = report(capsys, "--plot", str(path))
    assert code == EXIT_OK
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
        assert image.format == "PNG" and image.size[0] >= 800 and image.size[1] >= 200


def test_queries_are_batched_within_the_get_metric_data_limit():
    from constructs_lib.cli.usage import read_usage

    model = load_model(str(ROOT / "examples" / "org-200-teams.yaml"))
    calls: list[int] = []

    class Counting:
        def get_metric_data(self, **request):
            calls.append(len(request["MetricDataQueries"]))
            return {"MetricDataResults": []}

    teams = [t.name for t in model.teams]
    read_usage(Counting(), model, teams, START, END)
    assert (
        len(calls) > 1
        and max(calls) == MAX_QUERIES_PER_CALL
        and sum(calls)
        == len(queries(model, teams))
        == 200 * 4 * (4 + 2)  # usage, and the guarantee's hours asked and breached
    )


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--from", "2026-11-31", "--to", "2026-12-01"], "--from: not a date ('2026-11-31') - a UTC day as YYYY-MM-DD"),
        (["--from", "2026-12-01", "--to", "2026-11-01"], "--to: must be 1 to 455 days after --from 2026-12-01"),
        (
            ["--from", "2026-11-01", "--to", "2026-12-01", "--team", "nobody"],
            "--team: not a team of the governance file ('nobody')",
        ),
        (["--from", "2026-11-01", "--to", "2026-12-01", "--format", "xml"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line(arguments, message, capsys):
    try:
        code = main(["usage", "report", "--example", *arguments])
    except SystemExit as exit:  # argparse's own refusal (choices)
        code = exit.code
    assert code == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
