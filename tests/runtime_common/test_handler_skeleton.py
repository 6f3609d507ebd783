"""The handler skeleton (gpu_governance_runtime/common/handler.py) and the three controllers on it:
settings read once into a typed, frozen object, a bad one refused with one error naming the
variable, events recognised by one table, the dry-run switch read in one place."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the handlers build their clients on import

from gpu_governance_runtime import contract  # noqa: E402
from gpu_governance_runtime.capacity import handler as capacity  # noqa: E402
from gpu_governance_runtime.common.handler import Environment, EventKind, SettingError, recognise  # noqa: E402
from gpu_governance_runtime.guard import handler as guard  # noqa: E402
from gpu_governance_runtime.reclaim import handler as reclaim  # noqa: E402

RUNTIME = Path(contract.__file__).parent
CAPACITY = {
    contract.ENV_CONTROLLER_ID: "acme-ml-capacity",
    contract.ENV_LEDGER_TABLE: "ledger",
    contract.ENV_TOPIC_ARN: "arn:aws:sns:us-east-1:1:t",
    contract.ENV_BUDGET: "1000",
    contract.ENV_PRICE_CAP: "40.5",
    contract.ENV_TICK_SECONDS: "900",
}
RECLAIM = {
    contract.ENV_LEDGER_TABLE: "ledger",
    contract.ENV_RECLAIM_TARGETS: json.dumps([{"pool": "p", "job_queue": "q"}]),
}
GUARD = {
    contract.ENV_GUARD_QUEUES: json.dumps([{"job_queue": "q", "pool": "p"}]),
    contract.ENV_GUARD_NAMES: json.dumps({"registry": "r"}),
    contract.ENV_LEDGER_TABLE: "ledger",
    contract.ENV_TOPIC_ARN: "arn:aws:sns:us-east-1:1:t",
    contract.ENV_DEAD_LETTERS_URL: "https://sqs.us-east-1.amazonaws.com/1/dead-letters",
}


def test_each_controller_reads_its_environment_into_one_frozen_typed_object():
    settings = capacity.CapacitySettings.from_environ({**CAPACITY, contract.ENV_SLURM_HEAD_NODES: '{"slurm": "i-1"}'})
    assert (settings.limits.budget, settings.limits.price_cap, settings.tick_seconds) == (
        Decimal("1000"),
        Decimal("40.5"),
        900.0,
    )
    assert (settings.slurm_head_nodes, settings.raised_guarantees, settings.team_spend) == (
        {"slurm": "i-1"},
        None,
        False,
    )
    tick = reclaim.ReclaimSettings.from_environ(
        {**RECLAIM, contract.ENV_MIN_RUN_TIME_S: "30", contract.ENV_IN_VPC: "true"}
    )
    assert (tick.planner.min_run_time_s, tick.planner.max_preemptions_per_tick, tick.tick_seconds) == (30.0, 20, 60.0)
    assert (tick.dry_run, tick.in_vpc, tick.namespace, tick.reclaim_targets) == (
        True,
        True,
        contract.RECLAIM_NAMESPACE,
        ({"pool": "p", "job_queue": "q"},),
    )
    guarded = guard.GuardSettings.from_environ(GUARD)
    assert (guarded.queues, guarded.names, guarded.dry_run) == (
        ({"job_queue": "q", "pool": "p"},),
        {"registry": "r"},
        True,
    )
    for frozen in (settings, tick, guarded):
        with pytest.raises(dataclasses.FrozenInstanceError):
            frozen.ledger_table = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("read", "environment", "error"),
    [
        (
            capacity.CapacitySettings.from_environ,
            {k: v for k, v in CAPACITY.items() if k != contract.ENV_LEDGER_TABLE},
            "LEDGER_TABLE: not set - the DynamoDB table of purchases",
        ),
        (
            capacity.CapacitySettings.from_environ,
            {**CAPACITY, contract.ENV_BUDGET: "lots"},
            "GPU_GOVERNANCE_BUDGET: 'lots' - a decimal amount >= 0",
        ),
        (
            capacity.CapacitySettings.from_environ,
            {**CAPACITY, contract.ENV_PRICE_CAP: "-1"},
            "GPU_GOVERNANCE_PRICE_CAP: '-1' - a decimal amount >= 0",
        ),
        (
            capacity.CapacitySettings.from_environ,
            {**CAPACITY, contract.ENV_TICK_SECONDS: "0"},
            "TICK_SECONDS: '0' - a number > 0",
        ),
        (
            capacity.CapacitySettings.from_environ,
            {**CAPACITY, contract.ENV_SLURM_HEAD_NODES: "[1]"},
            "SLURM_HEAD_NODES: '[1]' - a JSON object",
        ),
        (
            capacity.CapacitySettings.from_environ,
            {**CAPACITY, contract.ENV_RAISED_GUARANTEES: "/gg/raised"},
            "RAISED_GUARANTEES_KEY: not set - the KMS key of RAISED_GUARANTEES_PARAMETER",
        ),
        (
            capacity.load_windows,
            {contract.ENV_BUDGET: "1000", contract.ENV_PRICE_CAP: "nan"},
            "GPU_GOVERNANCE_PRICE_CAP: 'nan' - a decimal amount >= 0",
        ),
        (
            reclaim.ReclaimSettings.from_environ,
            {contract.ENV_RECLAIM_TARGETS: "[]"},
            "LEDGER_TABLE: not set - the DynamoDB table of actions",
        ),
        (
            reclaim.ReclaimSettings.from_environ,
            {**RECLAIM, contract.ENV_MIN_RUN_TIME_S: "abc"},
            "MIN_RUN_TIME_S: 'abc' - a number >= 0",
        ),
        (
            reclaim.ReclaimSettings.from_environ,
            {**RECLAIM, contract.ENV_MAX_PREEMPTIONS_PER_TICK: "2.5"},
            "MAX_PREEMPTIONS_PER_TICK: '2.5' - a whole number >= 0",
        ),
        (
            reclaim.ReclaimSettings.from_environ,
            {**RECLAIM, contract.ENV_TICK_SECONDS: "inf"},
            "TICK_SECONDS: 'inf' - a number > 0",
        ),
        (
            reclaim.ReclaimSettings.from_environ,
            {**RECLAIM, contract.ENV_RECLAIM_TARGETS: '{"pool": "p"'},
            'RECLAIM_TARGETS: \'{"pool": "p"\' - a JSON list',
        ),
        (
            reclaim.ReclaimSettings.from_environ,
            {**RECLAIM, contract.ENV_USAGE_TARGETS: "{}"},
            "USAGE_TARGETS: '{}' - a JSON list",
        ),
        (
            guard.GuardSettings.from_environ,
            {k: v for k, v in GUARD.items() if k != contract.ENV_GUARD_QUEUES},
            "GUARD_QUEUES: not set - a JSON list",
        ),
        (
            guard.GuardSettings.from_environ,
            {**GUARD, contract.ENV_TOPIC_ARN: ""},
            "TOPIC_ARN: not set - the SNS topic ARN",
        ),
    ],
)
def test_a_missing_or_malformed_setting_is_one_error_naming_the_variable(read, environment, error):
    with pytest.raises(SettingError) as raised:
        read(environment)
    assert str(raised.value).startswith(error)


def test_the_reclaim_handler_refuses_a_missing_ledger_table_before_reading_anything(monkeypatch):
    """Before: ``KeyError: 'LEDGER_TABLE'`` after the policy was read; now the setting is named first."""
    monkeypatch.delenv(contract.ENV_LEDGER_TABLE, raising=False)
    monkeypatch.setenv(contract.ENV_POLICY_PATH, "/nonexistent/policy.json")
    with pytest.raises(SettingError, match="^LEDGER_TABLE: not set"):
        reclaim.handler({}, None)


def test_the_guard_handler_names_a_malformed_queue_list(monkeypatch):
    for name, value in {**GUARD, contract.ENV_GUARD_QUEUES: "not json"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingError, match="^GUARD_QUEUES: 'not json' - a JSON list"):
        guard.handler({}, None)


@pytest.mark.parametrize(
    ("value", "dry_run"),
    [
        (None, True),
        ("", True),
        ("true", True),
        ("no", True),
        ("flase", True),
        ("false", False),
        ("False", False),
        ("FALSE", False),
    ],
)
def test_only_false_turns_the_dry_run_off(value, dry_run):
    assert Environment({} if value is None else {contract.ENV_DRY_RUN: value}).dry_run() is dry_run
    assert (
        reclaim.ReclaimSettings.from_environ(
            {**RECLAIM, **({} if value is None else {contract.ENV_DRY_RUN: value})}
        ).dry_run
        is dry_run
    )


@pytest.mark.parametrize(
    ("event", "kind"),
    [
        ({"source": "aws.events", "detail-type": "Scheduled Event"}, capacity.SCHEDULED),
        (
            {"source": contract.CAPACITY_EVENT_SOURCE, "detail-type": contract.CAPACITY_REQUEST_DETAIL_TYPE},
            capacity.REQUEST,
        ),
        (
            {"source": contract.ALARM_EVENT_SOURCE, "detail-type": contract.ALARM_STATE_CHANGE_DETAIL_TYPE},
            capacity.ALARM,
        ),
        (
            {"source": contract.STACK_EVENT_SOURCE, "detail-type": contract.STACK_STATUS_CHANGE_DETAIL_TYPE},
            capacity.STACK_UPDATE,
        ),
        ({"source": "aws.ec2", "detail-type": "Capacity Block Delivered"}, capacity.BLOCK),
        ({"source": "aws.ec2", "detail-type": "Capacity Block Reservation Expiration Warning"}, capacity.BLOCK),
        ({"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"}, None),
        (
            {"source": contract.CAPACITY_EVENT_SOURCE, "detail-type": "Capacity Request Refused"},
            None,
        ),  # exact, not a prefix
        ({"source": "aws.events"}, None),
        ({}, None),
    ],
)
def test_the_capacity_controller_recognises_its_events_by_one_table(event, kind):
    assert recognise(event, capacity.EVENTS).kind == kind


def test_an_event_keeps_what_the_handlers_read_of_it():
    raw = {
        "source": contract.SERVICE_JOB_EVENT[0],
        "detail-type": contract.SERVICE_JOB_EVENT[1],
        "id": "e-1",
        "detail": {"jobId": "j"},
    }
    event = recognise(raw, guard.EVENTS)
    assert (event.kind, event.id, event.detail, event.raw) == (
        guard.SERVICE_JOB_STATE_CHANGE,
        "e-1",
        {"jobId": "j"},
        raw,
    )
    assert EventKind("any", "aws.cloudformation").matches("aws.cloudformation", None)


def _environ_reads(path: Path) -> list[int]:
    """Lines where a module reads ``os.environ`` other than to hand it whole to the skeleton or to
    ask whether it runs in Lambda."""
    tree = ast.parse(path.read_text())
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (
            ast.unparse(node.func).endswith("from_environ") or ast.unparse(node.func) == "Environment"
        ):
            allowed |= {id(a) for a in node.args}
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "process":
            allowed |= {id(k.value) for k in node.keywords if k.arg == "settings"}
        if isinstance(node, ast.Compare) and ast.unparse(node.left) == "'AWS_LAMBDA_FUNCTION_NAME'":
            allowed |= {id(c) for c in node.comparators}
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "os.environ" and id(node) not in allowed
    ]


@pytest.mark.parametrize("module", ["capacity/handler.py", "reclaim/handler.py", "guard/handler.py"])
def test_the_handlers_read_the_environment_only_through_the_skeleton(module):
    assert _environ_reads(RUNTIME / module) == []


def test_the_environment_check_sees_a_direct_read(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nx = os.environ['LEDGER_TABLE']\ny = Environment(os.environ)\n")
    assert _environ_reads(module) == [2]
