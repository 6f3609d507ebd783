"""Keep each launch-template consumer where its window's phase wants it: on the window's block
while one is active, off it from the block's expiration warning on.

A reconciliation, not an event reaction: every run (scheduled or sooner, after a Capacity Block
event) reads what the consumer actually launches from and moves it one step toward the wanted
state; a step AWS refuses, or one left half-done, is found again by the next run and reported as
an error (the ``ConsumerErrors`` metric and its alarm) until the consumer is where it should be.

- ``batch_compute_environment``: what counts is the launch template *version the compute
  environment names* (``computeResources.launchTemplate``), not the template's ``$Default``: a
  Batch compute environment launches from the version it was given
  (https://docs.aws.amazon.com/batch/latest/APIReference/API_LaunchTemplateSpecification.html).
  A new version is made from that version's data with the wanted launch target and the compute
  environment is pointed at it.
- ``eks_node_group``: the node group must have been created with ``capacityType``
  ``CAPACITY_BLOCK`` (it cannot change later; the EKS Capacity Blocks guide,
  https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html); a node group that
  is not is reported, never silently re-templated. At the block's start the version is moved (at
  size 0, as the guide asks for any update of such a group) and the group is scaled up to the
  block's count; from ``DRAIN_LEAD`` (45 minutes) before the end, more than the 30 the guide
  asks, it is scaled to zero, and EKS drains each node before its instance terminates
  (https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html).

A version differing from the one this controller last set, with a launch target the phase does
not want, was made by someone else: it is reported (``changed_by_someone_else``) and then moved,
never taken as done. In dry run nothing changes: the result says what would have been done.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..contract import CAPACITY_EVENT_SOURCE
from ..request_shapes import conform
from . import market
from .ledger import Ledger
from .planner import Reservation, Window

DRAIN_EVENT_SOURCE = CAPACITY_EVENT_SOURCE
DRAIN_EVENT_TYPE = "Capacity Window Draining"
ACTION_PREFIX = "rotation#"
KINDS = ("batch_compute_environment", "eks_node_group")  # the consumers that launch from a launch template
ON_DEMAND = (None, None)

# From this long before a block's end the phase is "draining": instances end 30 minutes before it
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html), and a
# scheduled run every 15 minutes (the controller's default) always falls in the 15 minutes
# between, even when the expiration warning's event (40 minutes before) is lost.
DRAIN_LEAD = market.TERMINATION_LEAD + timedelta(minutes=15)

Transform = Callable[[dict[str, Any]], dict[str, Any]]
Target = tuple[str | None, str | None]  # (market type, reservation id) a launch template launches into


def into_block(reservation_id: str) -> Transform:
    def launch_data(data: dict[str, Any]) -> dict[str, Any]:
        return {
            **data,
            "InstanceMarketOptions": {"MarketType": "capacity-block"},
            "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": reservation_id}},
        }

    return launch_data


def on_demand(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in ("InstanceMarketOptions", "CapacityReservationSpecification")}


def active_block(window: Window, owned: Iterable[Reservation], now: datetime) -> Reservation | None:
    """The window's block new work should launch into now: started, and not yet draining
    (``DRAIN_LEAD`` before its end)."""
    live = [r for r in owned if r.window == window.name and r.state in ("scheduled", "active")
            and r.start <= now < r.end - DRAIN_LEAD]
    return max(live, key=lambda r: r.start, default=None)


def wanted_target(window: Window, owned: Iterable[Reservation], current: Target, now: datetime) -> Target:
    """The launch target the phase wants: the active block; with none, on demand (``fallback:
    on_demand``) if the consumer still launches into a block, else what it has."""
    block = active_block(window, owned, now)
    if block is not None:
        return ("capacity-block", block.id)
    if window.fallback == "on_demand" and current[0] == "capacity-block":
        return ON_DEMAND
    return current


def reconcile(*, window: Window, owned: Iterable[Reservation], dry_run: bool, ec2: Any, batch: Any, eks: Any, ledger: Ledger,
              now: datetime) -> dict[str, Any]:
    """One step toward the wanted state for the window's consumer; what was found and done. A
    consumer whose window holds no block, now or before, and that this controller never moved is
    not read: nothing of the window's is in it."""
    owned = list(owned)
    consumer = window.consumer
    result: dict[str, Any] = {"window": window.name, "consumer": consumer["kind"]}
    if not any(r.window == window.name for r in owned) and _last_set(ledger, window) is None:
        return {**result, "state": "no block of the window yet"}
    try:
        if consumer["kind"] == "batch_compute_environment":
            return {**result, **_batch(window, owned, dry_run, ec2, batch, ledger, now)}
        return {**result, **_node_group(window, owned, dry_run, ec2, eks, ledger, now)}
    except (ClientError, BotoCoreError) as error:  # refused (busy, throttled): the next run tries again
        code = error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else type(error).__name__
        return {**result, "error": f"{code}: {error}", "retry": "next run"}


def _batch(window, owned, dry_run, ec2, batch, ledger, now) -> dict[str, Any]:
    consumer = window.consumer
    (environment,) = batch.describe_compute_environments(computeEnvironments=[consumer["compute_environment"]])["computeEnvironments"]
    template = environment.get("computeResources", {}).get("launchTemplate") or {}
    version = _version(ec2, consumer["launch_template_name"], template.get("version", "$Default"))
    current = _launch_target(version["LaunchTemplateData"])
    wanted = wanted_target(window, owned, current, now)
    found = {"version": version["VersionNumber"], "launches_into": _named(current), "wants": _named(wanted),
             **_drift(ledger, window, version["VersionNumber"], current, wanted)}
    if current == wanted:
        return {**found, "state": "in place"}
    if dry_run:
        return {**found, "dry_run": True, "would": f"make a launch template version into {_named(wanted)} and point the compute environment at it"}
    created = _create_version(ec2, consumer["launch_template_name"], version, wanted)
    _record(ledger, window, "moving", created, wanted, now)
    batch.update_compute_environment(
        computeEnvironment=consumer["compute_environment"],
        computeResources={"launchTemplate": {"launchTemplateName": consumer["launch_template_name"], "version": str(created)}},
        updatePolicy={"terminateJobsOnUpdate": False, "jobExecutionTimeoutMinutes": 30},
    )
    _record(ledger, window, "done", created, wanted, now)
    return {**found, "state": "moved", "to_version": created}


def _node_group(window, owned, dry_run, ec2, eks, ledger, now) -> dict[str, Any]:
    consumer = window.consumer
    group = eks.describe_nodegroup(clusterName=consumer["cluster_name"], nodegroupName=consumer["nodegroup_name"])["nodegroup"]
    if group.get("capacityType") != "CAPACITY_BLOCK":
        return {"error": f"node group {consumer['nodegroup_name']} has capacityType {group.get('capacityType')}; a Capacity Block needs "
                         "a node group created with CAPACITY_BLOCK (it cannot change later): nothing moved"}
    if group.get("status") not in ("ACTIVE", "DEGRADED"):
        return {"state": f"node group {group.get('status')}", "retry": "next run"}  # an update is in progress
    version = _version(ec2, consumer["launch_template_name"], group.get("launchTemplate", {}).get("version", "$Default"))
    current = _launch_target(version["LaunchTemplateData"])
    block = active_block(window, owned, now)
    wanted = wanted_target(window, owned, current, now)
    size = group.get("scalingConfig", {})
    wanted_size = min(block.count, size.get("maxSize", block.count)) if block is not None else 0
    found = {"version": version["VersionNumber"], "launches_into": _named(current), "wants": _named(wanted),
             "desired_size": size.get("desiredSize"), "wanted_size": wanted_size,
             **_drift(ledger, window, version["VersionNumber"], current, wanted)}
    if wanted_size == 0 and size.get("desiredSize", 0) > 0:
        step = ("scale to 0 (EKS drains each node first)", lambda: _scale(eks, consumer, 0))
    elif current != wanted and size.get("desiredSize", 0) == 0:
        step = (f"make a launch template version into {_named(wanted)} and move the node group to it",
                lambda: _move_node_group(ec2, eks, consumer, version, wanted, window, ledger, now))
    elif current != wanted:
        step = ("scale to 0 before moving the node group (EKS asks size 0 for updates)", lambda: _scale(eks, consumer, 0))
    elif size.get("desiredSize", 0) != wanted_size:
        step = (f"scale to {wanted_size}", lambda: _scale(eks, consumer, wanted_size))
    else:
        return {**found, "state": "in place"}
    if dry_run:
        return {**found, "dry_run": True, "would": step[0]}
    step[1]()
    return {**found, "state": "moving", "did": step[0]}


def _scale(eks, consumer, size: int) -> None:
    eks.update_nodegroup_config(clusterName=consumer["cluster_name"], nodegroupName=consumer["nodegroup_name"],
                                scalingConfig={"desiredSize": size, **({"minSize": 0} if size == 0 else {})})


def _move_node_group(ec2, eks, consumer, version, wanted, window, ledger, now) -> None:
    created = _create_version(ec2, consumer["launch_template_name"], version, wanted)
    _record(ledger, window, "moving", created, wanted, now)
    eks.update_nodegroup_version(clusterName=consumer["cluster_name"], nodegroupName=consumer["nodegroup_name"],
                                 launchTemplate={"name": consumer["launch_template_name"], "version": str(created)})
    _record(ledger, window, "done", created, wanted, now)


def announce_drain(*, window: str, reservation_id: str, ends_at: datetime, moved_to: str | None, events: Any) -> dict[str, Any]:
    """Tell the jobs on an ending block to checkpoint (the expiration warning's event)."""
    detail = {"window": window, "capacity_reservation_id": reservation_id, "ends_at": ends_at.isoformat(), "moved_to": moved_to}
    events.put_events(Entries=[{"Source": DRAIN_EVENT_SOURCE, "DetailType": DRAIN_EVENT_TYPE, "Detail": json.dumps(detail)}])
    return detail


def _version(ec2: Any, template: str, version: str) -> dict[str, Any]:
    return ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=[str(version)])["LaunchTemplateVersions"][0]


def _create_version(ec2: Any, template: str, base: Mapping[str, Any], wanted: Target) -> int:
    """A new version: ``base``'s data as described, conformed to the request shape (the description
    has output-only members such as ``MetadataOptions.State`` that the create call refuses), with
    the wanted launch target."""
    request_shape = ec2.meta.service_model.operation_model("CreateLaunchTemplateVersion").input_shape.members["LaunchTemplateData"]
    transform = on_demand if wanted == ON_DEMAND else into_block(wanted[1])
    return ec2.create_launch_template_version(
        LaunchTemplateName=template, LaunchTemplateData=transform(conform(base["LaunchTemplateData"], request_shape)),
        VersionDescription=f"gpu-governance: into {_named(wanted)}"[:255],
    )["LaunchTemplateVersion"]["VersionNumber"]


def _record(ledger: Ledger, window: Window, status: str, version: int, wanted: Target, now: datetime) -> None:
    ledger.record_action(ACTION_PREFIX + window.name, status=status, details={"version": version, "launches_into": _named(wanted)}, now=now)


def _drift(ledger: Ledger, window: Window, version: int, current: Target, wanted: Target) -> dict[str, Any]:
    """Report a version this controller did not set whose target the phase does not want."""
    recorded = _last_set(ledger, window)
    if recorded is None or recorded["version"] == version or current == wanted:
        return {}
    return {"changed_by_someone_else": f"version {version} (launching into {_named(current)}) replaced version {recorded['version']} "
                                       "this controller set"}


def _last_set(ledger: Ledger, window: Window) -> dict[str, Any] | None:
    key = ACTION_PREFIX + window.name
    return next((details for action, _, details in ledger.actions(key, ("moving", "done")) if action == key), None)


def _named(target: Target) -> str:
    return "on demand" if target == ON_DEMAND else f"Capacity Block {target[1]}" if target[0] == "capacity-block" else f"{target}"


def _launch_target(data: Mapping[str, Any]) -> Target:
    market_type = data.get("InstanceMarketOptions", {}).get("MarketType")
    target = data.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget", {}).get("CapacityReservationId")
    return (market_type, target) if market_type == "capacity-block" else ON_DEMAND
