"""The reclaim controller plans and reports with the guarantees the capacity controller has raised
(capacity/raised.py): the owner's jobs on the bought capacity are inside its guarantee, so they
are not reclaimed, and Guaranteed / GuaranteedInstanceHours count the raise; a raise past its
``until`` counts nothing. moto for SSM and DynamoDB, Stubber for Batch."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the reclaim handler builds its clients on import

from gpu_governance_runtime import (
    contract,  # noqa: E402
    raised_guarantees,  # noqa: E402
)
from gpu_governance_runtime.backends.batch_fair_share.adapter import BatchFairShareAdapter  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.reclaim import handler as controller  # noqa: E402

from .test_controller import G6E, NOW, POLICY, QUEUE, SETTINGS, expect_read, ledger_table, stubbed  # noqa: E402,F401 - the fixture

PARAMETER = contract.raised_guarantees_parameter("acme")
WHEN = datetime.fromtimestamp(NOW, UTC)


def raise_of(instances, until, pool="ec2-gpu", team="research", instance_type=G6E):
    return {
        "pool": pool,
        "team": team,
        "instance_type": instance_type,
        "instances": instances,
        "until": until.isoformat(),
        "window": "burst",
    }


def tick(table, raises):
    """research runs 8 on a guarantee of 2 while training waits for its 6 (test_controller's queue)."""
    client, stubber = stubbed("batch")
    expect_read(stubber)
    records = []
    with stubber:
        result = controller.run_tick(
            "ec2-gpu",
            BatchFairShareAdapter(client, job_queue=QUEUE, pool=POLICY.pool("ec2-gpu"), submit=client),
            Ledger(table),
            settings=SETTINGS,
            dry_run=True,
            namespace="Test",
            now=NOW,
            emit=records.append,
            raises=raises,
        )
    share = {r["Share"]: r for r in records if "_aws" in r and "InUse" in r}
    usage = {r["Share"]: r for r in records if "_aws" in r and contract.GUARANTEED_HOURS in r}
    return result, share, usage, {r["job_id"] for r in records if r.get("event") == "preemption"}


def test_the_owners_jobs_on_raised_capacity_are_inside_its_guarantee(ledger_table):  # noqa: F811
    declared, share, usage, victims = tick(ledger_table, [])
    assert (declared.preemptions, victims, share["research"]["Guaranteed"], share["research"]["Borrowed"]) == (
        2,
        {"borrow-big", "borrow-small"},
        2,
        6,
    )
    assert usage["research"][contract.GUARANTEED_HOURS] == pytest.approx(2 / 60)  # 2 instances over a 60 s tick
    # 6 bought instances raise research's guarantee (and the pool) to 8: nothing of research's is
    # borrowed, training starts on the 6 the pool gained, nobody is reclaimed.
    raised_tick, share, usage, victims = tick(ledger_table, [raise_of(6, WHEN + timedelta(hours=1))])
    assert (raised_tick.preemptions, raised_tick.starts, victims) == (0, 1, set())
    assert (share["research"]["Guaranteed"], share["research"]["Borrowed"], share["training"]["Guaranteed"]) == (
        8,
        0,
        6,
    )
    assert usage["research"][contract.GUARANTEED_HOURS] == pytest.approx(8 / 60)


def test_raises_of_other_pools_teams_without_a_share_or_past_their_end_count_nothing(ledger_table, monkeypatch):  # noqa: F811
    with mock_aws():
        ssm = boto3.client("ssm", region_name="us-east-1")
        ssm.put_parameter(
            Name=PARAMETER,
            Type="SecureString",
            Value=json.dumps(
                [
                    raise_of(
                        6, WHEN - timedelta(minutes=1)
                    ),  # lowered a minute ago: stale, however long the parameter says it
                    raise_of(6, WHEN + timedelta(hours=1), pool="sagemaker"),
                    raise_of(6, WHEN + timedelta(hours=1), team="outsider"),
                ]
            ),
        )
        in_force = raised_guarantees.read(ssm=ssm, name=PARAMETER, now=WHEN)
    assert len(in_force) == 2
    result, share, _, _ = tick(ledger_table, in_force)
    assert (result.preemptions, share["research"]["Guaranteed"]) == (2, 2)


def test_the_handler_reads_the_parameter_once_and_an_unreadable_one_fails_the_pool(
    ledger_table, tmp_path, monkeypatch, capsys
):  # noqa: F811
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "version": 1,
                "organisation": "acme",
                "priority_classes": [],
                "capacity_windows": [],
                "pools": [
                    {
                        "name": "ec2-gpu",
                        "backend": "batch_fair_share",
                        "capacity": {G6E: 8},
                        "shares": [
                            {
                                "name": "research",
                                "quota": {G6E: 2},
                                "strategy": "lend_and_borrow",
                                "borrow_limit": None,
                                "in_share_preemption": False,
                                "fair_share_weight": 10,
                            },
                            {
                                "name": "training",
                                "quota": {G6E: 6},
                                "strategy": "lend",
                                "borrow_limit": None,
                                "in_share_preemption": False,
                                "fair_share_weight": 10,
                            },
                        ],
                    }
                ],
            }
        )
    )
    for name, value in (
        ("POLICY_PATH", str(policy)),
        ("LEDGER_TABLE", "ledger"),
        (contract.ENV_RAISED_GUARANTEES, PARAMETER),
        ("RECLAIM_TARGETS", json.dumps([{"pool": "ec2-gpu", "job_queue": QUEUE}])),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(controller, "dynamodb", boto3.resource("dynamodb"))
    with mock_aws():
        ssm = boto3.client("ssm", region_name="us-east-1")
        monkeypatch.setattr(controller, "ssm", ssm)
        now = datetime.now(UTC)
        ssm.put_parameter(
            Name=PARAMETER, Type="SecureString", Value=json.dumps([raise_of(6, now + timedelta(hours=1))])
        )
        client, stubber = stubbed("batch")
        expect_read(stubber)
        monkeypatch.setattr(controller, "batch", client)
        with stubber:
            result = controller.handler({}, None)
        assert result["pools"] == [{"pool": "ec2-gpu", "preemptions": 0, "starts": 1, "acted": 0, "failed": 0}]
        ssm.put_parameter(Name=PARAMETER, Type="SecureString", Overwrite=True, Value='[{"pool": "ec2-gpu"}]')
        capsys.readouterr()
        assert controller.handler({}, None)["pools"] == []  # nothing planned on a guess
    failure = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "pool_failed" in line]
    assert failure[0]["pool"] == "ec2-gpu" and "raised-guarantees" in failure[0]["error"]
