import json

import pytest
import yaml
from moto import mock_aws

from constructs_lib.cli import main
from constructs_lib.model.loader import default_config_text
from gpu_governance_runtime.planners.capacity import plan

from .builders import NOW, at, block, window
from .stubbed_aws import TABLE, create_ledger_table


def offering_json(id, start, end, fee, zone="us-east-1a", hours=24):
    return {
        "CapacityBlockOfferingId": id,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": zone,
        "InstanceCount": 4,
        "StartDate": start,
        "EndDate": end,
        "CapacityBlockDurationHours": hours,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
    }


@pytest.fixture
def files(tmp_path):
    data = yaml.safe_load(default_config_text())
    data["capacity_windows"] = [
        {
            "name": "launch-load-test",
            "team": "research",
            "instance_type": "p5.48xlarge",
            "instance_count": 4,
            "start": "2026-12-10T14:00:00Z",
            "duration_hours": 6,
            "min_yield": 0,  # buys whatever covers: these tests are about the planner's other rules
            "max_price_per_instance_hour": 40,
            "budget": {"amount": 20000},
            "feeds": {
                "kind": "batch_compute_environment",
                "launch_template_name": "gpu-p5",
                "compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5",
                "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
                "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
            },
        }
    ]
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    offerings = tmp_path / "offerings.json"  # the shape `aws ec2 describe-capacity-block-offerings` prints
    offerings.write_text(
        json.dumps(
            {
                "CapacityBlockOfferings": [
                    offering_json(
                        "cb-0000000000000001", "2026-12-10T11:30:00+00:00", "2026-12-11T11:30:00+00:00", "2784.00"
                    ),
                    offering_json(
                        "cb-0000000000000002", "2026-12-10T11:30:00+00:00", "2026-12-11T12:00:00+00:00", "1000.00"
                    ),
                ]
            }
        )
    )
    return config, offerings


def test_plan_prints_what_would_be_bought_and_why(files, capsys):
    config, offerings = files
    assert (
        main(
            [
                "capacity",
                "plan",
                "--config",
                str(config),
                "--offerings",
                str(offerings),
                "--now",
                "2026-12-01T09:00:00Z",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "WOULD BUY (dry run) block cb-0000000000000001 for launch-load-test@20261210T1400Z: 4 x p5.48xlarge in us-east-1a"
    )
    assert "2784.00 USD (29.00/instance-hour, cap 40)" in out[0]
    assert out[1] == "IGNORED offering cb-0000000000000002: ends 12:00 UTC, but blocks end at 11:30 UTC"


def test_plan_json_and_spent_budget(files, capsys):
    config, offerings = files
    args = [
        "capacity",
        "plan",
        "--config",
        str(config),
        "--offerings",
        str(offerings),
        "--now",
        "2026-12-01T09:00:00Z",
        "--json",
    ]
    assert main(args + ["--spent", "launch-load-test=18000"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["purchases"] == []
    assert result["uncovered"] == [
        {
            "occurrence": "launch-load-test@20261210T1400Z",
            "reason": "budget: cheapest cover costs 2784.00, 2000 left this month",
        }
    ]


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["--now", "yesterday"], "--now: not a UTC time ('yesterday')"),
        (
            ["--spent", "nobody=5"],
            "--spent: invalid ('nobody=5') - WINDOW=AMOUNT with WINDOW one of ['launch-load-test']",
        ),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(files, capsys, argv_tail, message):
    config, offerings = files
    assert main(["capacity", "plan", "--config", str(config), "--offerings", str(offerings)] + argv_tail) == 2
    assert message in capsys.readouterr().err


def test_bad_offerings_file_names_the_item(files, tmp_path, capsys):
    config, _ = files
    broken = tmp_path / "broken.json"
    broken.write_text(
        json.dumps({"CapacityBlockOfferings": [{"CapacityBlockOfferingId": "cb-1", "UpfrontFee": "abc"}]})
    )
    assert main(["capacity", "plan", "--config", str(config), "--offerings", str(broken)]) == 2
    assert f"{broken}: CapacityBlockOfferings[0]: unreadable (KeyError" in capsys.readouterr().err
    not_json = tmp_path / "not.json"
    not_json.write_text("{")
    assert main(["capacity", "plan", "--config", str(config), "--offerings", str(not_json)]) == 2
    assert "not valid JSON at line 1" in capsys.readouterr().err


def test_approve_marks_the_intent_and_refuses_twice(capsys, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        ledger = create_ledger_table()
        w = window(mode="approval")
        purchase = plan(
            windows=[w], reservations=[], offerings=[block("cbo-1", at(10), 1)], spent={}, now=NOW
        ).purchases[0]
        intent = ledger.claim(purchase, w, status="awaiting_approval", now=NOW)
        assert main(["capacity", "approve", intent.id, "--table", TABLE]) == 0
        assert capsys.readouterr().out.startswith(
            f"approved {intent.id}: 4 x p5.48xlarge in us-east-1a, 2026-12-10 11:30 to 2026-12-11 11:30 UTC"
        )
        assert ledger.intent(intent.id).status == "approved"
        assert main(["capacity", "approve", intent.id, "--table", TABLE]) == 2
        assert "is approved, not awaiting_approval" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"CapacityBlockOfferings": None},
            "CapacityBlockOfferings: not a list (None) - a list of items as the AWS CLI prints it",
        ),
        (
            {"InstanceCount": "4"},
            "CapacityBlockOfferings[0]: unreadable (ValueError: InstanceCount '4' is not a whole number)",
        ),
        (
            {"StartDate": 1796815800},
            "CapacityBlockOfferings[0]: unreadable (ValueError: time 1796815800 is not an ISO 8601 text with a zone",
        ),
        ({"UpfrontFee": [1]}, "CapacityBlockOfferings[0]: unreadable (ValueError: UpfrontFee [1] is not an amount)"),
    ],
)
def test_odd_offerings_exit_2_naming_the_field(files, tmp_path, capsys, change, message):
    config, _ = files
    item = {**offering_json("cb-1", "2026-12-10T11:30:00+00:00", "2026-12-11T11:30:00+00:00", "2784.00"), **change}
    odd = tmp_path / "odd.json"
    odd.write_text(
        json.dumps(
            {"CapacityBlockOfferings": None}
            if change == {"CapacityBlockOfferings": None}
            else {"CapacityBlockOfferings": [item]}
        )
    )
    assert (
        main(["capacity", "plan", "--config", str(config), "--offerings", str(odd), "--now", "2026-12-01T09:00:00Z"])
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_numeric_fee_prints_as_written(files, tmp_path, capsys):
    config, _ = files
    numeric = tmp_path / "numeric.json"
    numeric.write_text(
        json.dumps(
            {
                "CapacityBlockOfferings": [
                    offering_json("cb-1", "2026-12-10T11:30:00+00:00", "2026-12-11T11:30:00+00:00", 2784.84)
                ]
            }
        )
    )
    args = ["capacity", "plan", "--config", str(config), "--offerings", str(numeric), "--now", "2026-12-01T09:00:00Z"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2784.84 USD (29.01/instance-hour" in out and "2784.840000" not in out


# --- the text output of every planner outcome (issue 24, outcome 10) ----------------------------------------------------


def plan_text(tmp_path, capsys, *, window_changes=(), market=()):
    """`capacity plan` text for one batch window (changed by ``window_changes``) against ``market`` files."""
    data = yaml.safe_load(default_config_text())
    data["capacity_windows"] = [
        {
            "name": "launch-load-test",
            "team": "research",
            "instance_type": "p5.48xlarge",
            "instance_count": 4,
            "start": "2026-12-10T14:00:00Z",
            "duration_hours": 6,
            "mode": "auto",
            "min_yield": 0,  # buys whatever covers: these tests are about the planner's other rules
            "max_price_per_instance_hour": 40,
            "budget": {"amount": 20000},
            "feeds": {
                "kind": "batch_compute_environment",
                "launch_template_name": "gpu-p5",
                "compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5",
                "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
                "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
            },
            **dict(window_changes),
        }
    ]
    config = tmp_path / "governance.yaml"
    config.write_text(yaml.safe_dump(data))
    args = ["capacity", "plan", "--config", str(config), "--now", "2026-12-01T09:00:00Z"]
    for index, content in enumerate(market):
        path = tmp_path / f"market{index}.json"
        path.write_text(json.dumps(content))
        args += ["--offerings", str(path)]
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.err, captured.err
    return [line for line in captured.out.splitlines() if not line.startswith("GRID ")]  # the grid: its own test


def test_plan_text_single_piece(tmp_path, capsys):
    out = plan_text(
        tmp_path,
        capsys,
        market=[
            {
                "CapacityBlockOfferings": [
                    offering_json("cb-1", "2026-12-10T11:30:00+00:00", "2026-12-11T11:30:00+00:00", "2784.00")
                ]
            }
        ],
    )
    assert out == [
        "BUY block cb-1 for launch-load-test@20261210T1400Z: 4 x p5.48xlarge in us-east-1a, 2026-12-10 11:30 to 2026-12-11 11:30 UTC, "
        "2784.00 USD (29.00/instance-hour, cap 40); cheapest cover, then least unused time (72 instance-hours unused); "
        "serves team research; its hours use 25 % of it (min_yield 0 %)",
        "SPEND launch-load-test: 2784.00 of 20000 per month",
    ]


def test_plan_text_several_pieces_whole_cover_in_buying_order(tmp_path, capsys):
    # 30 hours from 14:00 need two consecutive one-day blocks; each alone is smaller than the window
    # (the piece-by-piece "unused" was negative: an int with no quantize, a traceback).
    out = plan_text(
        tmp_path,
        capsys,
        window_changes={"duration_hours": 30},
        market=[
            {
                "CapacityBlockOfferings": [
                    offering_json("cb-2", "2026-12-11T11:30:00+00:00", "2026-12-12T11:30:00+00:00", "2880.00"),
                    offering_json("cb-1", "2026-12-10T11:30:00+00:00", "2026-12-11T11:30:00+00:00", "2784.00"),
                ]
            }
        ],
    )
    assert out[0] == (
        "BUY 2 pieces for launch-load-test@20261210T1400Z, 5664.00 USD in all, in this order (a piece that fails stops the rest): "
        "cheapest cover, then least unused time (72 instance-hours unused); serves team research; its hours use 61 % "
        "of it (min_yield 0 %)"
    )
    assert out[1].startswith(
        "  piece 1: block cb-1: 4 x p5.48xlarge in us-east-1a, 2026-12-10 11:30 to 2026-12-11 11:30 UTC, 2784.00 USD"
    )
    assert out[2].startswith(
        "  piece 2: block cb-2: 4 x p5.48xlarge in us-east-1a, 2026-12-11 11:30 to 2026-12-12 11:30 UTC, 2880.00 USD"
    )


def test_plan_text_extension_of_a_held_block(tmp_path, capsys):
    held = {
        "CapacityReservationId": "cr-0123456789abcdef0",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "TotalInstanceCount": 4,
        "StartDate": "2026-12-09T11:30:00+00:00",
        "EndDate": "2026-12-10T11:30:00+00:00",
        "State": "scheduled",
        "Tags": [{"Key": "gpu-governance:window", "Value": "launch-load-test"}],
    }
    extension = {
        "CapacityBlockExtensionOfferingId": "cbe-1",
        "InstanceType": "p5.48xlarge",
        "InstanceCount": 4,
        "AvailabilityZone": "us-east-1a",
        "StartDate": "2026-12-09T11:30:00+00:00",
        "CapacityBlockExtensionStartDate": "2026-12-10T11:30:00+00:00",
        "CapacityBlockExtensionEndDate": "2026-12-11T11:30:00+00:00",
        "CapacityBlockExtensionDurationHours": 24,
        "UpfrontFee": "2500.00",
        "CurrencyCode": "USD",
    }
    out = plan_text(
        tmp_path,
        capsys,
        window_changes={"prefer_extension": True},
        market=[{"CapacityReservations": [held]}, {"CapacityBlockExtensionOfferings": [extension]}],
    )
    assert out[0].startswith(
        "BUY extension of cr-0123456789abcdef0 cbe-1 for launch-load-test@20261210T1400Z: 4 x p5.48xlarge in us-east-1a, "
        "2026-12-10 11:30 to 2026-12-11 11:30 UTC, 2500.00 USD"
    )


def test_plan_text_an_extension_of_no_listed_block_exits_2(tmp_path, capsys, files):
    config, _ = files
    extension = tmp_path / "extension.json"
    extension.write_text(
        json.dumps(
            {
                "CapacityBlockExtensionOfferings": [
                    {
                        "CapacityBlockExtensionOfferingId": "cbe-1",
                        "InstanceType": "p5.48xlarge",
                        "InstanceCount": 4,
                        "AvailabilityZone": "us-east-1a",
                        "CapacityBlockExtensionStartDate": "2026-12-10T11:30:00+00:00",
                        "CapacityBlockExtensionEndDate": "2026-12-11T11:30:00+00:00",
                        "CapacityBlockExtensionDurationHours": 24,
                        "UpfrontFee": "2500.00",
                        "CurrencyCode": "USD",
                    }
                ]
            }
        )
    )
    assert main(["capacity", "plan", "--config", str(config), "--offerings", str(extension)]) == 2
    assert (
        f"{extension}: CapacityBlockExtensionOfferings[0]: extends no one listed block ('cbe-1')"
        in capsys.readouterr().err
    )


def test_plan_text_uncovered(tmp_path, capsys):
    out = plan_text(tmp_path, capsys, market=[{"CapacityBlockOfferings": []}])
    assert out == [
        "NOT COVERED launch-load-test@20261210T1400Z (team research): no offering of p5.48xlarge in any zone for "
        "4 x 2026-12-10 14:00-2026-12-10 20:00 UTC"
    ]


def test_plan_text_refused_offering_and_refused_cover(tmp_path, capsys):
    out = plan_text(
        tmp_path,
        capsys,
        market=[
            {
                "CapacityBlockOfferings": [
                    offering_json("cb-late", "2026-12-10T11:30:00+00:00", "2026-12-11T12:00:00+00:00", "1000.00"),
                    offering_json("cb-dear", "2026-12-10T11:30:00+00:00", "2026-12-11T11:30:00+00:00", "9600.00"),
                ]
            }
        ],
    )
    assert out == [
        "NOT COVERED launch-load-test@20261210T1400Z (team research): price cap: covering offerings cost from 100.00 per "
        "instance-hour, cap is 40",
        "IGNORED offering cb-late: ends 12:00 UTC, but blocks end at 11:30 UTC",
    ]
