"""The steps of a capacity run that act on the windows' consumers once the controller has bought:
point HyperPod instance groups at their window's active training plan, fill a Batch consumer's
active block and take off it what must go, move every launch-template consumer one step toward its
phase, and drain the blocks near their end. ``clients``: the handler's ``Clients``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..planners.window import Window
from . import controller, fill, hyperpod, requeue, rotation
from .ledger import Ledger


def run(
    windows: dict[str, Window], owned, clients: Any, ledger: Ledger, notify, now: datetime, time_left, handled
) -> dict[str, Any]:
    """Every consumer step of one run, in order; ``owned``: what the controller listed (the launch-template
    consumers also get what it bought that EC2 does not list yet, ``controller.known_blocks``); ``handled``: the
    block this run's expiration warning already drained."""
    result: dict[str, Any] = {
        "hyperpod": repoint_instance_groups(windows, owned, clients, ledger, notify, now, time_left)
    }
    known = controller.known_blocks(owned, ledger)
    result["fill"] = fill_batch_blocks(windows, known, clients, ledger, now)
    closing = {f["window"] for f in result["fill"] if f.get("closing")}
    result["rotation"] = rotate_consumers(windows, known, clients, ledger, now, time_left, closing)
    if any(f.get("taken_off") for f in result["fill"]):  # off the block now, once it is closed to their copies
        result["taken_off"] = requeue.resume(
            ledger=ledger, batch=clients.batch, submit=clients.submit_batch, now=now, time_left=time_left
        )
    result["draining_blocks"] = drain_batch_blocks(windows, known, clients, ledger, now, time_left, handled=handled)
    return result


def moved_to(window: Window) -> str | None:
    """Where the window's work goes when its block ends, as the drain event says."""
    return window.fallback if window.fallback == "on_demand" else None


def drain_batch_block(
    window: Window, reservation_id: str, ends_at: datetime, clients: Any, ledger: Ledger, now: datetime, time_left
) -> dict[str, Any]:
    return requeue.drain(
        window=window.name,
        compute_environment=window.consumer["block_compute_environment"],
        reservation_id=reservation_id,
        ends_at=ends_at,
        moved_to=moved_to(window),
        dry_run=window.dry_run,
        ledger=ledger,
        ec2=clients.ec2,
        ecs=clients.ecs,
        batch=clients.batch,
        submit=clients.submit_batch,
        events=clients.events,
        now=now,
        time_left=time_left,
    )


def drain_batch_blocks(
    windows: dict[str, Window], owned, clients: Any, ledger: Ledger, now: datetime, time_left, handled: str | None
) -> list[dict[str, Any]]:
    """Every run, not only at the expiration warning: each block a window's Batch compute
    environment runs on, within ``requeue.SIGNAL_LEAD`` of its end, is drained (``requeue.drain``),
    so its jobs are told first and get two runs to be stopped before the instances go.
    ``handled``: the block this run's expiration warning already drained."""
    results = []
    for window in windows.values():
        if window.consumer.get("kind") != "batch_compute_environment":
            continue
        for block in owned:
            if (
                block.window != window.name
                or block.state != "active"
                or block.id == handled
                or not requeue.draining(block.end, now)
            ):
                continue
            try:
                results.append(
                    {
                        "window": window.name,
                        "capacity_reservation_id": block.id,
                        **drain_batch_block(window, block.id, block.end, clients, ledger, now, time_left),
                    }
                )
            except (
                ClientError,
                BotoCoreError,
            ) as error:  # the listing failed: the next run (one more before the stops) reads again
                results.append(
                    {
                        "window": window.name,
                        "capacity_reservation_id": block.id,
                        "error": str(error),
                        "retry": "next run",
                    }
                )
    return results


def fill_batch_blocks(windows: dict[str, Window], owned, clients: Any, ledger: Ledger, now: datetime):
    """Every Batch consumer's active block: what to take off it, whether it is closing, what to move onto it."""
    results = []
    for window, sharing in rotation.by_consumer(windows.values()):
        block = rotation.active_block(window, owned, now, sharing)
        if window.consumer["kind"] != "batch_compute_environment" or block is None:
            continue
        try:
            results.append(
                fill.fill(
                    window=window,
                    block=block,
                    dry_run=window.dry_run,
                    ledger=ledger,
                    ec2=clients.ec2,
                    ecs=clients.ecs,
                    batch=clients.batch,
                    events=clients.events,
                    now=now,
                )
            )
        except (ClientError, BotoCoreError) as error:  # a read or the event failed: the next run looks again
            results.append({"window": window.name, "error": str(error), "retry": "next run"})
    return results


def rotate_consumers(
    windows: dict[str, Window], owned, clients: Any, ledger: Ledger, now: datetime, time_left, closing=frozenset()
) -> list[dict[str, Any]]:
    """Every launch-template consumer one step toward its phase (rotation.reconcile), every run; ``closing``: the
    windows whose active block takes no new job now (fill.py)."""
    results = []
    for window, sharing in rotation.by_consumer(windows.values()):
        if time_left() < REPOINT_SECONDS:
            results.append(
                {"window": window.name, "deferred": "too little of the invocation left; the next run does it"}
            )
            continue
        results.append(
            rotation.reconcile(
                window=window,
                owned=owned,
                dry_run=window.dry_run,
                ec2=clients.ec2,
                batch=clients.batch,
                eks=clients.eks,
                ecs=clients.ecs,
                ledger=ledger,
                now=now,
                sharing=sharing,
                closing=window.name in closing,
            )
        )
    return results


# DescribeCluster, UpdateCluster and the ledger record of one instance group.
REPOINT_SECONDS = 20


def repoint_instance_groups(
    windows: dict[str, Window], owned, clients: Any, ledger: Ledger, notify, now: datetime, time_left
) -> list[dict[str, Any]]:
    results = []
    for window in windows.values():
        if window.consumer.get("kind") != "hyperpod_instance_group":
            continue
        if time_left() < REPOINT_SECONDS:
            results.append(
                {"window": window.name, "deferred": "too little of the invocation left; the next run does it"}
            )
            continue
        try:
            results.append(
                hyperpod.repoint(
                    window=window.name,
                    cluster_arn=window.consumer["cluster_arn"],
                    instance_group=window.consumer["instance_group"],
                    plans=owned,
                    fallback=window.fallback,
                    dry_run=window.dry_run,
                    sagemaker=clients.sagemaker,
                    ledger=ledger,
                    now=now,
                )
            )
        except hyperpod.MissingInstanceGroup as error:
            results.append({"window": window.name, "error": str(error)})
            notify("HyperPod instance group not found", {"window": window.name, "error": str(error)})
    return results
