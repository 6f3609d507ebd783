"""Every window has an owner (a declared team, optionally a cost centre): it reaches the compiled
policy, the tags on the purchase request, and every report of what would be bought."""

from __future__ import annotations

import copy
import json
from decimal import Decimal

import pytest
import yaml
from moto import mock_aws

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime import contract
from gpu_governance_runtime.capacity import controller
from gpu_governance_runtime.policy import PolicyError, parse_policy

from .builders import NOW, at, block, window
from .stubbed_aws import CONTROLLER, StubbedAws, add_training_plan_stubs, create_ledger_table

BASE = yaml.safe_load(default_config_text())


def with_window(**changes) -> dict:
    data = copy.deepcopy(BASE)
    data["capacity_windows"][0].update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del data["capacity_windows"][0][key]
    return data


def problems(data) -> dict:
    with pytest.raises(GovernanceError) as caught:
        GovernanceModel.from_dict(data)
    return {p.path: p for p in caught.value.problems}


def test_the_reference_window_names_its_owner_and_the_policy_carries_it():
    model = GovernanceModel.from_dict(copy.deepcopy(BASE))
    (read,) = parse_policy(compile_policy(model)).capacity_windows
    declared = model.capacity_windows[0]
    assert (read.team, read.cost_centre) == (declared.team, declared.cost_centre)
    assert declared.team in {t.name for t in model.teams}


@pytest.mark.parametrize(
    "changes, path, wrong",
    [
        ({"team": None}, "capacity_windows[0].team", "missing"),
        ({"team": "marketing"}, "capacity_windows[0].team", "undeclared team"),
        ({"cost_centre": "cc\n4100"}, "capacity_windows[0].cost_centre", "invalid"),
    ],
)
def test_a_window_without_a_declared_owner_is_refused_with_its_path(changes, path, wrong):
    found = problems(with_window(**changes))
    assert wrong in found[path].wrong
    if changes.get("team") == "marketing":
        assert found[path].allowed == "one of ['production', 'research', 'training']"


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda w: w.pop("team"), "capacity_windows[0].team: missing - the compiled policy always sets it"),
        (lambda w: w.update(team=""), "capacity_windows[0].team: '' - a team name"),
        (lambda w: w.update(cost_centre=7), "capacity_windows[0].cost_centre: 7 - a string or null"),
    ],
)
def test_the_runtime_reader_refuses_a_window_without_an_owner(change, expected):
    document = compile_policy(GovernanceModel.from_dict(copy.deepcopy(BASE)))
    change(document["capacity_windows"][0])
    with pytest.raises(PolicyError) as raised:
        parse_policy(document)
    assert expected in str(raised.value)


def test_every_purchase_tag_is_allowed_by_the_contract():
    owned = window(team="research", cost_centre="cc-1").owner_tags
    assert owned == {contract.TAG_TEAM: "research", contract.TAG_COST_CENTRE: "cc-1"}
    assert set(owned) <= set(contract.PURCHASE_TAG_KEYS)
    assert window(team="research").owner_tags == {contract.TAG_TEAM: "research"}  # no empty cost-centre tag


@pytest.fixture
def aws():
    with mock_aws():
        yield StubbedAws(), create_ledger_table()


def tags(intent, window_name, **owner):
    return [
        {"Key": contract.TAG_INTENT, "Value": intent},
        {"Key": contract.TAG_WINDOW, "Value": window_name},
        {"Key": contract.TAG_MANAGED_BY, "Value": CONTROLLER},
    ] + [{"Key": k, "Value": v} for k, v in owner.items()]


def test_a_block_is_bought_with_its_owner_in_the_request_tags(aws):
    stubbed, ledger = aws
    owned = window(team="research", cost_centre="cc-4100")
    offer = block("cbo-1", at(10), 1, per_hour="29")
    intent = "launch-load-test-202612101400-1"
    stubbed.owned()
    stubbed.offerings(offer)
    stubbed.ec2_stub.add_response(
        "purchase_capacity_block",
        {"CapacityReservation": {"CapacityReservationId": "cr-0123456789abcdef0"}},
        {
            "CapacityBlockOfferingId": offer.id,
            "InstancePlatform": "Linux/UNIX",
            "TagSpecifications": [
                {
                    "ResourceType": "capacity-reservation",
                    "Tags": tags(
                        intent, owned.name, **{contract.TAG_TEAM: "research", contract.TAG_COST_CENTRE: "cc-4100"}
                    ),
                }
            ],
        },
    )
    notes = []
    report = controller.run(
        windows=[owned], ledger=ledger, capacity=stubbed.market, notify=lambda s, m: notes.append((s, m)), now=NOW
    )
    assert [i.id for i in report.bought] == [intent]
    assert notes[0][1]["team"] == "research" and notes[0][1]["cost_centre"] == "cc-4100"
    stubbed.done()


def test_a_training_plan_is_created_with_its_owner_in_the_request_tags(aws):
    stubbed, ledger = aws
    plans, offerings = add_training_plan_stubs(stubbed)
    owned = window(
        name="finetune-eval",
        market="training_plan",
        instance_type="ml.p5.48xlarge",
        team="production",
        consumer={"kind": "sagemaker_training_jobs", "pool": None},
        budget=Decimal("5000"),
    )
    offer = block("tpo-aaaa1111", at(10), 1, per_hour="29", instance_type="ml.p5.48xlarge", kind="training_plan")
    intent = "finetune-eval-202612101400-1"
    stubbed.owned()
    plans()
    offerings(offer)
    stubbed.sm_stub.add_response(
        "create_training_plan",
        {"TrainingPlanArn": "arn:aws:sagemaker:us-east-1:111122223333:training-plan/x"},
        {
            "TrainingPlanName": intent,
            "TrainingPlanOfferingId": offer.id,
            "Tags": tags(intent, owned.name, **{contract.TAG_TEAM: "production"}),
        },
    )
    report = controller.run(windows=[owned], ledger=ledger, capacity=stubbed.market, notify=lambda *_: None, now=NOW)
    assert [i.id for i in report.bought] == [intent]
    stubbed.done()


def test_capacity_plan_says_whom_each_block_serves(tmp_path, capsys):
    data = with_window(
        name="workshop",
        instance_type="p5.48xlarge",
        instance_count=4,
        start="2026-12-10T07:30:00Z",
        duration_hours=4,
        repeat_every_days=None,
        team="research",
        cost_centre="cc-7",
        feeds={
            "kind": "batch_compute_environment",
            "launch_template_name": "gpu-p5",
            "compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5",
            "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
            "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
        },
    )
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    offerings = tmp_path / "offerings.json"
    offerings.write_text(
        json.dumps(
            {
                "CapacityBlockOfferings": [
                    {
                        "CapacityBlockOfferingId": "cb-4h",
                        "InstanceType": "p5.48xlarge",
                        "AvailabilityZone": "us-east-1a",
                        "InstanceCount": 4,
                        "StartDate": "2026-12-10T07:30:00Z",
                        "EndDate": "2026-12-10T11:30:00Z",
                        "CapacityBlockDurationHours": 4,
                        "CapacityBlockDurationMinutes": 0,
                        "UpfrontFee": "480.00",
                        "CurrencyCode": "USD",
                    }
                ]
            }
        )
    )
    args = ["capacity", "plan", "--config", str(config), "--offerings", str(offerings), "--now", "2026-12-01T09:00:00Z"]
    assert main(args) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("WOULD BUY (dry run) block cb-4h for workshop@20261210T0730Z")
    assert line.endswith(
        "(0 instance-hours unused); serves team research, cost centre cc-7; its hours use 88 % of it (min_yield 50 %)"
    )  # the window's last 30 minutes are the block's, when EC2 ends its instances
    assert main(args + ["--json"]) == 0
    (purchase,) = json.loads(capsys.readouterr().out)["purchases"]
    assert (purchase["team"], purchase["cost_centre"]) == ("research", "cc-7")
