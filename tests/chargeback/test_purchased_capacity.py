"""Purchased capacity for chargeback (lambda/gpu_governance_runtime/capacity/chargeback.py): the
utilisation of every active Capacity Block and training plan, read with botocore's Stubber on
responses of the full shape the service models give (the Stubber checks them), and the fee of
each purchase published exactly once, whatever the lag, the faults and the repeated runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from moto import mock_aws

from gpu_governance_runtime import contract
from gpu_governance_runtime.capacity import chargeback, controller
from gpu_governance_runtime.capacity.handler import process
from gpu_governance_runtime.common import log
from tests.capacity.builders import NOW, at, block, reservation, window
from tests.capacity.simulated_ec2 import FAULTS
from tests.capacity.stubbed_aws import CONTROLLER, StubbedAws, capacity_reservation, create_ledger_table
from tests.capacity.test_consistency import MINUTE, WINDOW as BOUGHT_WINDOW, World
from tests.capacity.test_handler import emf_records, env  # noqa: F401  (the handler's fixture)

ACCOUNT = "111122223333"
START, END = datetime(2026, 12, 10, 11, 30, tzinfo=UTC), datetime(2026, 12, 11, 11, 30, tzinfo=UTC)
WINDOWS = {
    "launch": window(name="launch", team="research"),
    "plans": window(name="plans", market="training_plan", team="training"),
}
PLAN_ARN = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:training-plan/plans-202612101130-1"


def active_block(block_id: str, *, window_name: str, total: int, available: int, team: str | None = None) -> dict:
    """A Capacity Block as DescribeCapacityReservations returns it, every member the model has filled."""
    tags = {
        contract.TAG_INTENT: f"{window_name}-202612101130-1",
        contract.TAG_WINDOW: window_name,
        contract.TAG_MANAGED_BY: CONTROLLER,
        **({contract.TAG_TEAM: team} if team else {}),
    }
    return {
        "CapacityReservationId": block_id,
        "OwnerId": ACCOUNT,
        "CapacityReservationArn": f"arn:aws:ec2:us-east-1:{ACCOUNT}:capacity-reservation/{block_id}",
        "AvailabilityZoneId": "use1-az4",
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-east-1a",
        "Tenancy": "default",
        "TotalInstanceCount": total,
        "AvailableInstanceCount": available,
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": "active",
        "StartDate": START,
        "EndDate": END,
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": START - timedelta(days=3),
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        "CapacityAllocations": [{"AllocationType": "used", "Count": total - available}],
        "ReservationType": "capacity-block",
        "DeliveryPreference": "fixed",
        "CapacityBlockId": f"cb-{block_id[3:]}",
    }


def described_plan(arn: str, *, status: str = "Active", total: int = 2, in_use: int = 1) -> dict:
    """A training plan as DescribeTrainingPlan returns it."""
    return {
        "TrainingPlanArn": arn,
        "TrainingPlanName": arn.rsplit("/", 1)[1],
        "Status": status,
        "StatusMessage": "",
        "DurationHours": 24,
        "DurationMinutes": 0,
        "StartTime": START,
        "EndTime": END,
        "UpfrontFee": "1510.08",
        "CurrencyCode": "USD",
        "TotalInstanceCount": total,
        "AvailableInstanceCount": total - in_use,
        "InUseInstanceCount": in_use,
        "UnhealthyInstanceCount": 0,
        "AvailableSpareInstanceCount": 0,
        "TargetResources": ["training-job"],
        "ReservedCapacitySummaries": [
            {
                "ReservedCapacityArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:reserved-capacity/rc-1",
                "ReservedCapacityType": "Instance",
                "InstanceType": "ml.p5.48xlarge",
                "TotalInstanceCount": total,
                "Status": status,
                "AvailabilityZone": "us-east-1a",
                "AvailabilityZoneId": "use1-az4",
                "DurationHours": 24,
                "DurationMinutes": 0,
                "StartTime": START,
                "EndTime": END,
            }
        ],
    }


def expect_blocks(stubbed: StubbedAws, *blocks: dict) -> None:
    stubbed.ec2_stub.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": list(blocks)},
        {
            "Filters": [
                {"Name": f"tag:{contract.TAG_MANAGED_BY}", "Values": [CONTROLLER]},
                {"Name": "state", "Values": ["active"]},
            ]
        },
    )


def expect_purchase(stubbed: StubbedAws, offer, intent_id: str, team: str) -> None:
    """PurchaseCapacityBlock of ``offer`` with the tags of a window owned by ``team``."""
    tags = {
        contract.TAG_INTENT: intent_id,
        contract.TAG_WINDOW: "launch-load-test",
        contract.TAG_MANAGED_BY: CONTROLLER,
        contract.TAG_TEAM: team,
    }
    stubbed.ec2_stub.add_response(
        "purchase_capacity_block",
        {"CapacityReservation": {"CapacityReservationId": "cr-0123456789abcdef0", "State": "payment-pending"}},
        {
            "CapacityBlockOfferingId": offer.id,
            "InstancePlatform": "Linux/UNIX",
            "TagSpecifications": [
                {"ResourceType": "capacity-reservation", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        },
    )


def plan_reservation(arn: str = PLAN_ARN, state: str = "active"):
    return reservation(arn, START, 1, state=state, count=2, window_name="plans")


def test_each_active_block_and_plan_becomes_its_instance_hours_used_and_purchased():
    stubbed = StubbedAws()
    expect_blocks(
        stubbed,
        active_block("cr-0aaaaaaaaaaaaaaa1", window_name="launch", total=4, available=1),
        active_block("cr-0bbbbbbbbbbbbbbb2", window_name="gone", total=2, available=2, team="vision"),
    )
    stubbed.sm_stub.add_response("describe_training_plan", described_plan(PLAN_ARN), {"TrainingPlanName": PLAN_ARN})
    written: list[dict] = []
    owned = [
        plan_reservation(),
        plan_reservation(f"{PLAN_ARN}-later", state="scheduled"),
        reservation("cr-0aaaaaaaaaaaaaaa1", START, 1, state="active"),
    ]
    results = chargeback.publish_utilisation(
        owned=owned,
        windows=WINDOWS,
        ec2=stubbed.ec2,
        sagemaker=stubbed.sagemaker,
        controller_id=CONTROLLER,
        tick_seconds=900,
        now=NOW,
        write=written.append,
    )
    stubbed.done()  # one listing of the blocks, one DescribeTrainingPlan (the scheduled plan is not read)
    figures = {
        tuple(r[d] for d in contract.PURCHASED_DIMENSIONS): (
            r[contract.PURCHASED_HOURS],
            r[contract.PURCHASED_USED_HOURS],
            r[contract.PURCHASED_UTILISATION],
        )
        for r in written
    }
    assert figures == {
        ("launch", "research", "cr-0aaaaaaaaaaaaaaa1"): (
            1.0,
            0.75,
            75.0,
        ),  # 4 instances x 15 minutes, 3 of them running
        ("gone", "vision", "cr-0bbbbbbbbbbbbbbb2"): (0.5, 0.0, 0.0),  # its window is gone: the block's own team tag
        ("plans", "training", PLAN_ARN): (0.5, 0.25, 50.0),
    }
    assert all(r["_aws"]["CloudWatchMetrics"][0]["Namespace"] == contract.CAPACITY_NAMESPACE for r in written)
    assert [r.get("error") for r in results] == [None, None, None]


def test_a_plan_that_is_no_longer_active_and_a_read_that_fails_publish_nothing_for_them():
    stubbed = StubbedAws()
    stubbed.ec2_stub.add_client_error(
        "describe_capacity_reservations", service_error_code="RequestLimitExceeded", http_status_code=503
    )
    stubbed.sm_stub.add_response(
        "describe_training_plan", described_plan(PLAN_ARN, status="Expired"), {"TrainingPlanName": PLAN_ARN}
    )
    stubbed.sm_stub.add_client_error(
        "describe_training_plan", service_error_code="ResourceNotFound", http_status_code=400
    )
    written: list[dict] = []
    results = chargeback.publish_utilisation(
        owned=[plan_reservation(), plan_reservation(f"{PLAN_ARN}-2")],
        windows=WINDOWS,
        ec2=stubbed.ec2,
        sagemaker=stubbed.sagemaker,
        controller_id=CONTROLLER,
        tick_seconds=900,
        now=NOW,
        write=written.append,
    )
    stubbed.done()
    assert written == []
    assert [r["utilisation"] for r in results] == ["capacity blocks", f"{PLAN_ARN}-2"]
    assert "RequestLimitExceeded" in results[0]["error"] and "ResourceNotFound" in results[1]["error"]


def test_only_scheduled_runs_count_hours_and_a_failed_read_is_a_consumer_error(env, capsys):  # noqa: F811
    stubbed, clients, settings, _ = env
    stubbed.owned()
    stubbed.offerings()
    expect_blocks(stubbed, active_block("cr-0aaaaaaaaaaaaaaa1", window_name="launch-load-test", total=4, available=0))
    result = process(
        {"source": "aws.events", "detail-type": "Scheduled Event"}, clients=clients, settings=settings, now=NOW
    )
    records = emf_records(capsys.readouterr().out)
    [used] = [r for r in records if contract.PURCHASED_USED_HOURS in r]
    assert (used["Team"], used[contract.PURCHASED_USED_HOURS]) == (
        "research",
        4 * float(settings[contract.ENV_TICK_SECONDS]) / 3600,
    )
    assert result["utilisation"][0]["used"] == 4
    # A capacity request runs the controller too: no second count of the same hours (the Stubber
    # has no listing of active blocks queued, so reading one would fail the test).
    stubbed.owned()
    stubbed.offerings()
    process(
        {"source": contract.CAPACITY_EVENT_SOURCE, "detail-type": "Something else"},
        clients=clients,
        settings=settings,
        now=NOW,
    )
    assert not [r for r in emf_records(capsys.readouterr().out) if contract.PURCHASED_HOURS in r]
    stubbed.owned()
    stubbed.offerings()
    stubbed.ec2_stub.add_client_error(
        "describe_capacity_reservations", service_error_code="Unavailable", http_status_code=503
    )
    process({"source": "aws.events", "detail-type": "Scheduled Event"}, clients=clients, settings=settings, now=NOW)
    assert next(r for r in emf_records(capsys.readouterr().out) if "ConsumerErrors" in r)["ConsumerErrors"] == 1
    stubbed.done()


# --- fees, exactly once -------------------------------------------------------------------------


def fees(records: list[dict]) -> list[tuple[str, float]]:
    return [(r["Team"], r[contract.PURCHASE_FEES]) for r in records if contract.PURCHASE_FEES in r]


@pytest.fixture
def aws():
    with mock_aws():
        yield


def test_a_purchase_publishes_its_fee_once_under_its_team_and_a_repeated_run_nothing(aws):
    stubbed, ledger = StubbedAws(), create_ledger_table()
    bought = window(mode="auto", budget=Decimal("5000"), team="research")
    offer = block("cbo-1111111111111111", at(10), 1, per_hour="29")
    written: list[dict] = []
    with mock.patch.object(log, "write", written.append):
        stubbed.owned()
        stubbed.offerings(offer)
        expect_purchase(stubbed, offer, "launch-load-test-202612101400-1", "research")
        controller.run(windows=[bought], ledger=ledger, capacity=stubbed.market, notify=lambda *_: None, now=NOW)
        stubbed.owned(capacity_reservation(offer, intent_id="launch-load-test-202612101400-1", window=bought.name))
        controller.run(
            windows=[bought], ledger=ledger, capacity=stubbed.market, notify=lambda *_: None, now=NOW + MINUTE
        )
    stubbed.done()
    assert fees(written) == [("research", float(offer.upfront_fee))]


def test_a_payment_failure_takes_the_fee_back_once(aws):
    stubbed, ledger = StubbedAws(), create_ledger_table()
    bought = window(mode="auto", budget=Decimal("5000"), team="research")
    offer = block("cbo-1111111111111111", at(10), 1, per_hour="29")
    listed = capacity_reservation(
        offer, intent_id="launch-load-test-202612101400-1", window=bought.name, state="payment-failed"
    )
    written: list[dict] = []
    with mock.patch.object(log, "write", written.append):
        stubbed.owned()
        stubbed.offerings(offer)
        expect_purchase(stubbed, offer, "launch-load-test-202612101400-1", "research")
        controller.run(windows=[bought], ledger=ledger, capacity=stubbed.market, notify=lambda *_: None, now=NOW)
        for minute in (1, 2):  # listed as payment-failed by two runs; nothing else for sale
            stubbed.owned(listed)
            stubbed.offerings()
            controller.run(
                windows=[bought],
                ledger=ledger,
                capacity=stubbed.market,
                notify=lambda *_: None,
                now=NOW + minute * MINUTE,
            )
    stubbed.done()
    fee = float(offer.upfront_fee)
    assert fees(written) == [("research", fee), ("research", -fee)]
    assert ledger.spent(bought, NOW) == 0


STEP = st.tuples(st.integers(0, 20), st.sampled_from(sorted(FAULTS)), st.integers(0, 2))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lag=st.integers(0, 30), steps=st.lists(STEP, min_size=1, max_size=8))
def test_whatever_the_lag_the_faults_and_the_overlapping_runs_the_fees_published_are_what_was_paid(lag, steps):
    """Beyond the settle grace a block can be bought twice (found late); its fee is then published
    when the ledger records it, once, like every other."""
    with mock_aws(), mock.patch.object(log, "write", (written := []).append):
        world = World(lag_minutes=lag, windows=(BOUGHT_WINDOW,))
        for gap, fault, overlapping in steps:
            world.sim.faults = [fault]
            world.sim.during_call = [world.run] * overlapping
            world.run_at((world.sim.now - NOW) / MINUTE + gap)
        world.quiesce()
        paid = sum((p.offering.upfront_fee for p in world.sim.made), Decimal(0))
        assert sum(Decimal(str(f)) for _, f in fees(written)) == paid == world.ledger.spent(BOUGHT_WINDOW, NOW)
        assert {t for t, _ in fees(written)} <= {chargeback.UNKNOWN}  # the builders' window names no team
