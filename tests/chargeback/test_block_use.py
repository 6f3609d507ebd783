"""Capacity Blocks measured by the jobs on them, from real data (issue 40, item 1): each scheduled run of the capacity
controller publishes what ``fill.fill`` read of each active Batch block (instances with a job, idle while the
consumer's work waited or ran on demand, idle with no work), the requeue records the work it cut, and
`gpu-governance usage report` sums them per window beside the hours paid (the ledger). The report's AWS calls go through
botocore's Stubber (request shapes checked against the service models), with GetMetricData and Scan answers of the
real shapes."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from constructs_lib.cli import EXIT_OK, main
from gpu_governance_runtime.capacity import chargeback
from gpu_governance_runtime.contract import BLOCK_USE_DIMENSIONS, BLOCK_USE_METRICS, CAPACITY_NAMESPACE

from .test_usage_report import ANY_SCAN, END, START, stubbed_clients

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

BLOCK = "cr-0a1b2c3d4e5f60001"
FOUND = {  # what fill.fill returned for the block on one scheduled run
    "window": "launch-test",
    "capacity_reservation_id": BLOCK,
    "block_window": "launch-test",
    "instances": 4,
    "on_block": 2,
    "waiting": 1,
    "on_demand": 0,
    "closing": False,
}


def test_a_scheduled_run_publishes_each_blocks_hours_by_the_jobs_on_it():
    written = []
    published = chargeback.publish_block_use(
        [FOUND, {"window": "other", "error": "ThrottlingException", "retry": "next run"}],
        tick_seconds=300,
        now=datetime(2026, 11, 9, 12, 0, tzinfo=UTC),
        write=written.append,
    )
    (record,) = written  # the read that failed publishes nothing: nothing is known of its interval
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == CAPACITY_NAMESPACE and directive["Dimensions"] == [list(BLOCK_USE_DIMENSIONS)]
    hours = {m["Name"]: record[m["Name"]] for m in directive["Metrics"]}
    # 5 minutes: 2 instances with a job, 1 idle while a job waited, 1 idle with no work
    assert hours == dict(zip(BLOCK_USE_METRICS, (2 / 12, 1 / 12, 1 / 12), strict=True))
    assert published == [{"block_use": BLOCK, "window": "launch-test", **hours}]


def test_a_requests_block_is_published_under_the_request_that_bought_it():
    """A request's block feeds its declared window's consumer (fill reads it for that window): its hours go under the
    request's window, the one its ledger intent names and the usage report asks for."""
    written = []
    request_block = {**FOUND, "block_window": "launch-test-r0eb236"}
    chargeback.publish_block_use(
        [request_block], tick_seconds=300, now=datetime(2026, 11, 9, 12, 0, tzinfo=UTC), write=written.append
    )
    (record,) = written
    assert (record["Window"], record["Reservation"]) == ("launch-test-r0eb236", BLOCK)


def intent_item(kind: str = "block", start: str = "2026-11-09T11:30:00", days: int = 2) -> dict:
    """The ledger's record of a purchased block (or an extension of it, which keeps the block's id)."""
    begins = datetime.fromisoformat(start).replace(tzinfo=UTC)
    offering = {
        "id": f"cbo-{kind}",
        "kind": kind,
        "instance_type": "p5.48xlarge",
        "count": 4,
        "availability_zone": "us-east-1a",
        "start": begins.isoformat(),
        "end": (begins + timedelta(days=days)).isoformat(),
        "duration_hours": 24 * days,
        "upfront_fee": "6038.40",
        "currency": "USD",
        "reservation_id": BLOCK if kind == "extension" else None,
    }
    return {
        "pk": {"S": f"intent#launch-test-{kind}"},
        "id": {"S": f"launch-test-{kind}"},
        "window": {"S": "launch-test"},
        "occurrence": {"S": "launch-test@20261109T1400Z"},
        "period": {"S": "2026-11"},
        "status": {"S": "purchased"},
        "created_at": {"S": "2026-11-01T10:00:00+00:00"},
        "updated_at": {"S": "2026-11-01T10:05:00+00:00"},
        "fee": {"N": "6038.4"},
        "offering": {"S": json.dumps(offering, sort_keys=True)},
        "reservation_id": {"S": BLOCK},
    }


def requeue_item(job: str, status: str, cut: float | None) -> dict:
    details = {
        "window": "launch-test",
        "reservation": BLOCK,
        "job": job,
        "reason": "gpu-governance: Capacity Block ends",
        "stop_at": "2026-11-11T10:50:00+00:00",
        **({"cut_hours": cut} if cut is not None else {}),
    }
    return {
        "pk": {"S": f"action#requeue#{job}"},
        "status": {"S": status},
        "updated_at": {"S": "2026-11-11T10:50:10+00:00"},
        "details": {"S": json.dumps(details)},
    }


@pytest.fixture
def aws(monkeypatch):
    with report_aws(monkeypatch, [intent_item()]):
        yield


@contextmanager
def report_aws(monkeypatch, intents: list[dict]):
    """The report's calls: the ledger's intents and requeue records, then one GetMetricData for the block's samples."""
    cw_stub, db_stub = stubbed_clients(monkeypatch)
    db_stub.add_response("scan", {"Items": intents, "Count": len(intents), "ScannedCount": 3}, ANY_SCAN)
    db_stub.add_response(
        "scan",
        {
            "Items": [requeue_item("job-1", "requeued", 1.5), requeue_item("job-2", "requeued", 0.0)],
            "Count": 2,
            "ScannedCount": 3,
        },
        ANY_SCAN,
    )
    block_query = {
        "MetricDataQueries": [
            {
                "Id": f"b0m{m}",
                "ReturnData": True,
                "MetricStat": {
                    "Metric": {
                        "Namespace": CAPACITY_NAMESPACE,
                        "MetricName": metric,
                        "Dimensions": [
                            {"Name": "Window", "Value": "launch-test"},
                            {"Name": "Reservation", "Value": BLOCK},
                        ],
                    },
                    "Period": 86400,
                    "Stat": "Sum",
                },
            }
            for m, metric in enumerate(BLOCK_USE_METRICS)
        ],
        "StartTime": START,
        "EndTime": END,
        "ScanBy": "TimestampAscending",
    }
    days = [datetime(2026, 11, d, tzinfo=UTC) for d in (9, 10, 11)]
    cw_stub.add_response(
        "get_metric_data",
        {
            "MetricDataResults": [
                {
                    "Id": "b0m0",
                    "Label": "job",
                    "Timestamps": days,
                    "Values": [40.0, 80.0, 30.0],
                    "StatusCode": "Complete",
                },
                {
                    "Id": "b0m1",
                    "Label": "waited",
                    "Timestamps": days[:2],
                    "Values": [6.0, 4.0],
                    "StatusCode": "Complete",
                },
                {
                    "Id": "b0m2",
                    "Label": "idle",
                    "Timestamps": days,
                    "Values": [2.0, 12.0, 6.0],
                    "StatusCode": "Complete",
                },
            ],
            "Messages": [],
        },
        block_query,
    )
    with cw_stub, db_stub:
        yield
    cw_stub.assert_no_pending_responses()
    db_stub.assert_no_pending_responses()


REPORT = ["usage", "report", "--example", "--from", "2026-11-01", "--to", "2026-12-01"]
REPORT += ["--ledger-table", "acme-ledger"]


def test_the_usage_report_gives_each_windows_blocks_by_the_jobs_on_them(aws, capsys):
    """Paid: 4 instances for the 48 hours; with a job, waited, no work: the controller's samples; cut: the requeue's
    records; not measured: what no scheduled run sampled (the block's last 45 minutes, from the drain on, and any run
    missed)."""
    assert main([*REPORT, "--format", "json"]) == EXIT_OK
    (line,) = json.loads(capsys.readouterr().out)["blocks"]
    assert line == {
        "window": "launch-test",
        "blocks": 1,
        "paid": 192.0,
        "with_job": 150.0,
        "cut": 1.5,
        "idle_waited": 10.0,
        "idle_no_work": 20.0,
        "not_measured": 12.0,
    }


def test_the_markdown_report_has_a_blocks_table(aws, capsys):
    assert main(REPORT) == EXIT_OK
    out = capsys.readouterr().out
    assert "## Capacity Blocks, by the jobs on them" in out
    assert "| launch-test | 1 | 192.00 | 150.00 | 1.50 | 10.00 | 20.00 | 12.00 |" in out


def test_an_extension_adds_its_hours_to_its_blocks(monkeypatch, capsys):
    """An extension keeps its block's id: its day is paid on the same block, whose samples are read once."""
    with report_aws(monkeypatch, [intent_item(), intent_item("extension", start="2026-11-11T11:30:00", days=1)]):
        assert main([*REPORT, "--format", "json"]) == EXIT_OK
    (line,) = json.loads(capsys.readouterr().out)["blocks"]
    assert (line["blocks"], line["paid"], line["with_job"], line["not_measured"]) == (1, 288.0, 150.0, 108.0)


def test_the_csv_report_gives_the_blocks_a_section_with_its_own_header(aws, capsys):
    assert main([*REPORT, "--format", "csv"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    header = lines.index("record,window,blocks,paid,with_job,cut,idle_waited,idle_no_work,not_measured")
    assert lines[header + 1 :] == ["block,launch-test,1,192.0,150.0,1.5,10.0,20.0,12.0"]
