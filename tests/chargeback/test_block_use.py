"""Capacity Blocks measured by the jobs on them, from real data (issue 40, item 1): each scheduled run of the capacity
controller publishes what ``fill.fill`` read of each active Batch block (instances with a job, idle while the
consumer's work waited or ran on demand, idle with no work), the requeue records the work it cut, and
`gpu-governance usage report` sums them per window beside the hours paid (the ledger). The report's AWS calls go through
botocore's Stubber (request shapes checked against the service models), with GetMetricData and Scan answers of the
real shapes."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

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


def intent_item() -> dict:
    offering = {
        "id": "cbo-1",
        "kind": "block",
        "instance_type": "p5.48xlarge",
        "count": 4,
        "availability_zone": "us-east-1a",
        "start": "2026-11-09T11:30:00+00:00",
        "end": "2026-11-11T11:30:00+00:00",
        "duration_hours": 48,
        "upfront_fee": "6038.40",
        "currency": "USD",
        "reservation_id": None,
    }
    return {
        "pk": {"S": "intent#launch-test-202611091400-1"},
        "id": {"S": "launch-test-202611091400-1"},
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
    cw_stub, db_stub = stubbed_clients(monkeypatch)
    db_stub.add_response("scan", {"Items": [intent_item()], "Count": 1, "ScannedCount": 3}, ANY_SCAN)
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


REPORT = ["usage", "report", "--example", "--from", "2026-11-01", "--to", "2026-12-01", "--ledger-table", "acme-ledger"]


REPORT = ["usage", "report", "--example", "--from", "2026-11-01", "--to", "2026-12-01"]
REPORT += ["--ledger-table", "acme-ledger"]


def test_the_usage_report_gives_each_windows_blocks_by_the_jobs_on_them(aws, capsys):
    """Paid: 4 instances for the 48 hours; with a job, waited, no work: the controller's samples; cut: the requeue's
    records; not measured: what no scheduled run sampled (the 30 minutes before the end, when the instances are gone,
    and any run missed)."""
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
