"""What the capacity controller tells chargeback (docs/chargeback.md): the fee of each purchase,
once, and how much of each purchased Capacity Block and training plan is in use.

Fees are published where the ledger records a purchase (``controller.py``): that write is
conditional, so exactly one run records each purchase, and only that run publishes its fee; a
bought block whose payment then fails is refunded by one conditional write too, which publishes
minus the fee. They are published at once, not at the end of the run, so a run that times out
afterwards has already told.

Utilisation is read on scheduled runs only: block events and capacity requests run the
controller as well, and counting their runs would count the same hours twice. Each active block
(DescribeCapacityReservations: ``TotalInstanceCount``, ``AvailableInstanceCount``) and training
plan (DescribeTrainingPlan: ``TotalInstanceCount``, ``InUseInstanceCount``) the controller owns
becomes one embedded-metric-format record of the instance-hours of the run's interval, purchased
and used, as ``usage.py`` does for pools: a Sum over any period is that period's instance-hours;
a missed run counts nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from ..common import log, metrics
from ..contract import (
    BLOCK_IDLE_HOURS,
    BLOCK_IDLE_WAITING_HOURS,
    BLOCK_JOB_HOURS,
    BLOCK_USE_DIMENSIONS,
    CAPACITY_NAMESPACE,
    PURCHASE_FEE_DIMENSIONS,
    PURCHASE_FEES,
    PURCHASED_DIMENSIONS,
    PURCHASED_HOURS,
    PURCHASED_USED_HOURS,
    PURCHASED_UTILISATION,
    TAG_MANAGED_BY,
    TAG_TEAM,
    TAG_WINDOW,
)
from ..planners.offers import Reservation, all_items, tags_of
from ..planners.window import Window
from .ledger import Intent

# The Team of a fee or a block whose window is no longer declared and that names no team (or the
# Window of a block without its window tag): the figure is still published (the money was spent),
# under a value no team or window name can take.
UNKNOWN = "(unknown)"
# What EventBridge sends for a rule's schedule (the capacity controller's Schedule rule).
SCHEDULED = ("aws.events", "Scheduled Event")

Write = Callable[[Mapping[str, Any]], None]


def team_of(windows: Mapping[str, Window], window: str, tagged: str | None = None) -> str:
    """The team a window's purchases are charged to: the declared window's, else the purchase's own team tag."""
    declared = windows.get(window)
    return (declared.team if declared is not None else None) or tagged or UNKNOWN


def publish_fee(intent: Intent, team: str, *, refund: bool = False, write: Write | None = None) -> None:
    """The fee of ``intent`` (minus it for a refund) under its team. Call it only where the
    ledger's conditional write that records the purchase (or the refund) succeeded."""
    fee = float(intent.offering.upfront_fee)
    metrics.publish(
        CAPACITY_NAMESPACE,
        dict(zip(PURCHASE_FEE_DIMENSIONS, (team or UNKNOWN,), strict=True)),
        {PURCHASE_FEES: (-fee if refund else fee, "None")},
        write=write or log.write,
    )


@dataclass(frozen=True, kw_only=True)
class Held:
    """One active block or plan as read this run: purchased and used instances."""

    reservation: str
    window: str
    team: str
    purchased: int
    used: int


def read_blocks(ec2: Any, controller_id: str, windows: Mapping[str, Window]) -> list[Held]:
    """Every active Capacity Block this controller bought: in use = total - available."""
    items = all_items(
        ec2,
        "describe_capacity_reservations",
        "CapacityReservations",
        Filters=[{"Name": f"tag:{TAG_MANAGED_BY}", "Values": [controller_id]}, {"Name": "state", "Values": ["active"]}],
    )
    held = []
    for item in items:
        tags = tags_of(item.get("Tags", []))
        window = tags.get(TAG_WINDOW, "")
        total = item["TotalInstanceCount"]
        held.append(
            Held(
                reservation=item["CapacityReservationId"],
                window=window or UNKNOWN,
                team=team_of(windows, window, tags.get(TAG_TEAM)),
                purchased=total,
                used=max(0, total - item.get("AvailableInstanceCount", total)),
            )
        )
    return held


def read_plan(sagemaker: Any, plan: Reservation, windows: Mapping[str, Window]) -> Held | None:
    """A training plan the controller owns (listed this run), if it is still active."""
    described = sagemaker.describe_training_plan(TrainingPlanName=plan.id)
    if described["Status"] != "Active":
        return None
    return Held(
        reservation=described["TrainingPlanArn"],
        window=plan.window,
        team=team_of(windows, plan.window),
        purchased=described.get("TotalInstanceCount", 0),
        used=described.get("InUseInstanceCount", 0),
    )


def records(held: Iterable[Held], *, tick_seconds: float, now: datetime) -> list[dict[str, Any]]:
    """One embedded-metric-format record per block or plan with instances."""
    hours = tick_seconds / 3600
    return [
        metrics.document(
            CAPACITY_NAMESPACE,
            dict(zip(PURCHASED_DIMENSIONS, (h.window, h.team, h.reservation), strict=True)),
            {
                PURCHASED_HOURS: (h.purchased * hours, "None"),
                PURCHASED_USED_HOURS: (h.used * hours, "None"),
                PURCHASED_UTILISATION: (100.0 * h.used / h.purchased, "Percent"),
            },
            timestamp=now.timestamp(),
        )
        for h in held
        if h.purchased > 0
    ]


def publish_block_use(
    fills: Iterable[Mapping[str, Any]],
    *,
    tick_seconds: float,
    now: datetime,
    write: Write | None = None,
) -> list[dict[str, Any]]:
    """Each active Batch block as this run found it (``fill.fill``): instance-hours of the run's interval with a job
    on it, idle while the consumer's work waited or ran on demand, idle with no work of it anywhere (issue 40; the
    usage report sums them). Only on scheduled runs, as for utilisation."""
    hours = tick_seconds / 3600
    published = []
    for found in fills:
        if "instances" not in found:  # the read failed: nothing is known of this interval
            continue
        busy = min(found["on_block"], found["instances"])
        idle = found["instances"] - busy
        waited = min(idle, found["waiting"] + found["on_demand"])
        values = {
            BLOCK_JOB_HOURS: busy * hours,
            BLOCK_IDLE_WAITING_HOURS: waited * hours,
            BLOCK_IDLE_HOURS: (idle - waited) * hours,
        }
        # By the window that bought the block, as the ledger knows it (the usage report reads it by its intents).
        dimensions = (found["block_window"], found["capacity_reservation_id"])
        (write or log.write)(
            metrics.document(
                CAPACITY_NAMESPACE,
                dict(zip(BLOCK_USE_DIMENSIONS, dimensions, strict=True)),
                {name: (value, "None") for name, value in values.items()},
                timestamp=now.timestamp(),
            )
        )
        published.append({"block_use": found["capacity_reservation_id"], "window": found["block_window"], **values})
    return published


def publish_utilisation(
    *,
    owned: Iterable[Reservation],
    windows: Mapping[str, Window],
    ec2: Any,
    sagemaker: Any,
    controller_id: str,
    tick_seconds: float,
    now: datetime,
    write: Write | None = None,
) -> list[dict[str, Any]]:
    """Read and publish every active block and plan; one result per block or plan, or per read
    that failed (reported, the others still published; the next run reads again)."""
    held: list[Held] = []
    results: list[dict[str, Any]] = []
    try:
        held += read_blocks(ec2, controller_id, windows)
    except ClientError as error:
        results.append({"utilisation": "capacity blocks", "error": f"{error.response['Error']['Code']}: {error}"})
    for plan in owned:
        if plan.id.startswith("arn:") and plan.state == "active":  # a training plan (blocks have cr- ids)
            try:
                found = read_plan(sagemaker, plan, windows)
            except ClientError as error:
                results.append({"utilisation": plan.id, "error": f"{error.response['Error']['Code']}: {error}"})
                continue
            held += [found] if found else []
    for record in records(held, tick_seconds=tick_seconds, now=now):
        (write or log.write)(record)
    return [
        {"utilisation": h.reservation, "window": h.window, "team": h.team, "purchased": h.purchased, "used": h.used}
        for h in held
    ] + results
