"""The runtime's common package: one JSON logger, one EMF writer, the retry configurations by
purpose, and that nothing in the runtime writes its own copy of them again."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import boto3
import jsonschema
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from hypothesis import given, settings, strategies as st

import gpu_governance_runtime
from gpu_governance_runtime import api_check, contract
from gpu_governance_runtime.capacity.aws import PURCHASE_CALL_SECONDS
from gpu_governance_runtime.common import clients, log, metrics

RUNTIME = Path(gpu_governance_runtime.__file__).parent

# The CloudWatch embedded metric format specification, as a JSON Schema: the root object, the
# _aws metadata, metric directives, dimension sets and metric definitions with their limits.
EMF_SCHEMA = {
    "type": "object",
    "required": ["_aws"],
    "properties": {
        "_aws": {
            "type": "object",
            "required": ["Timestamp", "CloudWatchMetrics"],
            "properties": {
                "Timestamp": {"type": "integer", "minimum": 0},
                "CloudWatchMetrics": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["Namespace", "Dimensions", "Metrics"],
                        "properties": {
                            "Namespace": {"type": "string", "minLength": 1, "maxLength": 1024},
                            "Dimensions": {
                                "type": "array",
                                "items": {
                                    "type": "array",
                                    "maxItems": 30,
                                    "items": {"type": "string", "minLength": 1, "maxLength": 250},
                                },
                            },
                            "Metrics": {
                                "type": "array",
                                "maxItems": 100,
                                "items": {
                                    "type": "object",
                                    "required": ["Name"],
                                    "properties": {
                                        "Name": {"type": "string", "minLength": 1, "maxLength": 1024},
                                        "Unit": {"enum": sorted(metrics.UNITS)},
                                        "StorageResolution": {"enum": [1, 60]},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        }
    },
}


def assert_emf(document: dict) -> None:
    """Valid EMF: the schema, and what it cannot say: every dimension named in a set has a string
    value at the top level, every metric a number (or a list of at most 100 numbers) there."""
    jsonschema.validate(document, EMF_SCHEMA)
    for directive in document["_aws"]["CloudWatchMetrics"]:
        for dimension_set in directive["Dimensions"]:
            for key in dimension_set:
                assert isinstance(document.get(key), str) and 0 < len(document[key]) <= 1024, key
        for metric in directive["Metrics"]:
            value = document.get(metric["Name"])
            values = value if isinstance(value, list) else [value]
            assert 0 < len(values) <= 100 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
            ), metric


def lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines()]


# --- log ------------------------------------------------------------------------------------------


def test_each_log_call_is_one_json_line_with_level_message_and_fields(capsys):
    log.info("capacity controller run", bought=["i-1"], spent=Decimal("12.50"), at=datetime(2026, 12, 1, tzinfo=UTC))
    log.error("step failed", what="window w", error="AccessDenied")
    info, error = lines(capsys.readouterr().out)
    assert info == {
        "level": "INFO",
        "message": "capacity controller run",
        "bought": ["i-1"],
        "spent": "12.50",
        "at": "2026-12-01 00:00:00+00:00",
    }
    assert error == {"level": "ERROR", "message": "step failed", "what": "window w", "error": "AccessDenied"}


def test_a_message_with_newlines_stays_one_log_event(capsys):
    log.info("two\nlines", detail="a\nb")
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["detail"] == "a\nb"


# --- metrics --------------------------------------------------------------------------------------

names = st.sampled_from(sorted(contract.METRIC_NAMES))
dimension_values = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@settings(
    deadline=None
)  # a shared, loaded machine made single examples take over 200 ms: speed is not what this checks
@given(
    dimensions=st.dictionaries(
        st.sampled_from(["Pool", "Share", "Window", "Cluster", "Team"]), dimension_values, max_size=5
    ),
    values=st.dictionaries(
        names,
        st.tuples(st.one_of(st.integers(0, 10**9), st.floats(0, 1e9)), st.sampled_from(sorted(metrics.UNITS))),
        min_size=1,
        max_size=10,
    ),
)
def test_every_document_is_valid_emf(dimensions, values):
    document = metrics.document("GpuGovernance/Test", dimensions, values, timestamp=1_764_547_200.5)
    assert_emf(document)
    assert next(iter(document)) == "_aws"  # readers find the metric lines by their start
    assert document["_aws"]["Timestamp"] == 1_764_547_200_500
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [list(dimensions)]
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {name: unit for name, (_, unit) in values.items()}
    assert {name: document[name] for name in values} == {name: value for name, (value, _) in values.items()}
    json.loads(json.dumps(document))  # one log line, no lossy value


def test_a_document_without_dimensions_is_one_empty_dimension_set(capsys):
    metrics.publish(contract.CAPACITY_NAMESPACE, {}, {"ConsumerErrors": (0, "Count")})
    (document,) = lines(capsys.readouterr().out)
    assert_emf(document)
    assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[]]


@pytest.mark.parametrize(
    "dimensions, values, problem",
    [
        ({}, {"Unwatched": (1, "Count")}, "'Unwatched' is not in the contract"),
        ({}, {"Purchases": (1, "Things")}, "unit 'Things' is not a CloudWatch unit"),
        ({}, {"Spend": (float("nan"), "None")}, "not a finite number"),
        ({}, {"Spend": (Decimal("1.5"), "None")}, "not a finite number"),  # json would fail, or lose it as text
        ({}, {"Purchases": (True, "Count")}, "not a finite number"),
        ({"Window": ""}, {"Spend": (1, "None")}, "dimension Window: value '' is not a non-empty string"),
        ({"Pool": 3}, {"PoolErrors": (1, "Count")}, "dimension Pool: value 3"),
        ({"Spend": "x"}, {"Spend": (1, "None")}, "dimension Spend has the name of a metric"),
        ({f"D{i}": "x" for i in range(31)}, {"Spend": (1, "None")}, "31 dimensions (at most 30)"),
        ({}, {}, "0 metrics (1-100)"),
    ],
)
def test_what_cloudwatch_would_drop_is_refused(dimensions, values, problem):
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        metrics.document("GpuGovernance/Test", dimensions, values)


def test_the_handlers_documents_are_valid_emf(capsys, monkeypatch):
    """What the functions write: the reclaim tick's share documents, a capacity window's, and
    the one of a runtime that lacks an operation at cold start."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import
    from gpu_governance_runtime.capacity import handler as capacity
    from gpu_governance_runtime.planners.reclaim import PendingJob, PoolState, RunningJob, Settings, Share, plan_tick
    from gpu_governance_runtime.reclaim.reports import share_metrics

    shares = (
        Share(name="training", quota={"p5": 4}, strategy=contract.SharingStrategy.LEND),
        Share(name="research", quota={"p5": 0}, strategy=contract.SharingStrategy.LEND_AND_BORROW),
    )
    state = PoolState(
        capacity={"p5": 4},
        shares=shares,
        now=10_000.0,
        running=(RunningJob(job_id="r", share="research", instance_type="p5", count=4, priority=1, started_at=0.0),),
        pending=(
            PendingJob(job_id="t", share="training", instance_type="p5", count=4, priority=1, submitted_at=9_000.0),
        ),
    )
    plan = plan_tick(state, Settings())
    assert plan.preemptions  # the documents carry a preemption and lost capacity, not only zeros
    documents = share_metrics("pool", state, plan, namespace=contract.RECLAIM_NAMESPACE, now=state.now)
    capacity._metric({"Window": "w"}, Spend=(12.5, "None"), BudgetUsedPercent=(1.25, "Percent"))
    old = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with pytest.raises(RuntimeError):
        api_check.require(
            {"sagemaker": old}, {"sagemaker": ("NoSuchOperation",)}, namespace=contract.HYPERPOD_NAMESPACE
        )
    documents += [d for d in lines(capsys.readouterr().out) if "_aws" in d]
    assert len(documents) == len(shares) + 2
    for document in documents:
        assert_emf(document)


# --- clients --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, sent",
    [
        (clients.PURCHASE, 1),  # exactly-once buying: never resent, whatever the error
        (clients.SUBMIT_ONCE, 1),  # a stopped job's copy: a resend after an accepted SubmitJob runs the job twice
        (clients.WITHIN_A_TICK, 5),
        (clients.DESIRED_STATE, 8),
    ],
)
def test_how_often_each_purpose_sends_a_request_that_keeps_failing(config, sent, monkeypatch):
    monkeypatch.setattr("botocore.endpoint.time.sleep", lambda seconds: None)  # the backoff, not what is sent
    ec2 = boto3.client("ec2", region_name="us-east-1", config=config, aws_access_key_id="x", aws_secret_access_key="x")
    requests = []

    class Body:
        def stream(self, **_):
            yield b"<Response><Errors><Error><Code>InternalError</Code><Message>x</Message></Error></Errors></Response>"

    def answer_500(request, **_):
        requests.append(request)
        return AWSResponse(request.url, 500, {}, Body())

    ec2.meta.events.register("before-send.ec2", answer_500)
    with pytest.raises(ClientError, match="InternalError"):
        ec2.describe_capacity_reservations()
    assert len(requests) == sent


def test_a_purchase_call_fits_the_time_the_capacity_controller_allows_it():
    assert clients.PURCHASE.connect_timeout + clients.PURCHASE.read_timeout <= PURCHASE_CALL_SECONDS


def test_the_capacity_reads_keep_botocores_defaults():
    ec2 = boto3.client(
        "ec2", region_name="us-east-1", config=clients.CAPACITY_READS, aws_access_key_id="x", aws_secret_access_key="x"
    )
    default = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    assert (ec2.meta.config.retries, ec2.meta.config.connect_timeout, ec2.meta.config.read_timeout) == (
        default.meta.config.retries,
        default.meta.config.connect_timeout,
        default.meta.config.read_timeout,
    )


# --- written once ---------------------------------------------------------------------------------


def test_no_runtime_module_writes_its_own_logger_metric_writer_or_retry_configuration():
    """print, Config(...) and the EMF "_aws" key appear only in common/: a copy elsewhere would
    drift from the one the tests above check."""
    owners = {"print": "common/log.py", "Config": "common/clients.py", "_aws": "common/metrics.py"}
    found = []
    for path in sorted(RUNTIME.rglob("*.py")):
        relative = path.relative_to(RUNTIME).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            name = (
                (getattr(node.func, "id", None) or getattr(node.func, "attr", None))
                if isinstance(node, ast.Call)
                else None
            )
            if isinstance(node, ast.Constant) and node.value == "_aws":
                name = "_aws"
            if name in owners and owners[name] != relative:
                found.append(f"{relative}:{node.lineno} {name}")
    assert found == []
