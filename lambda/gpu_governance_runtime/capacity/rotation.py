"""Move a window's consumer onto a Capacity Block when it starts and off it before it ends.

The consumer launches from a launch template. Rotation makes a new default version that
launches into the block (market type ``capacity-block`` and the reservation as target); the
drain at the expiration warning makes one that launches into the next block or on demand.
Both compare with the current default first, so a duplicate event changes nothing. The Batch
compute environment or EKS node group is then pointed at the version explicitly: neither
follows ``$Default`` on its own. The new version's data is the current default's, as described,
conformed to the request shape (``request_shapes.conform``: the description has output-only
members such as ``MetadataOptions.State`` that ``CreateLaunchTemplateVersion`` refuses).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable, Mapping

from ..contract import CAPACITY_EVENT_SOURCE
from ..request_shapes import conform

DRAIN_EVENT_SOURCE = CAPACITY_EVENT_SOURCE
DRAIN_EVENT_TYPE = "Capacity Window Draining"

Transform = Callable[[dict[str, Any]], dict[str, Any]]


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


def set_default_version(ec2: Any, launch_template_name: str, transform: Transform, description: str) -> tuple[int, bool]:
    """Make ``transform(current default data)`` the default version; (version, changed)."""
    current = ec2.describe_launch_template_versions(LaunchTemplateName=launch_template_name, Versions=["$Default"])["LaunchTemplateVersions"][0]
    request_shape = ec2.meta.service_model.operation_model("CreateLaunchTemplateVersion").input_shape.members["LaunchTemplateData"]
    wanted = transform(conform(current["LaunchTemplateData"], request_shape))
    if _launch_target(wanted) == _launch_target(current["LaunchTemplateData"]):
        return current["VersionNumber"], False
    created = ec2.create_launch_template_version(
        LaunchTemplateName=launch_template_name, LaunchTemplateData=wanted, VersionDescription=description[:255]
    )["LaunchTemplateVersion"]["VersionNumber"]
    ec2.modify_launch_template(LaunchTemplateName=launch_template_name, DefaultVersion=str(created))
    return created, True


def point_consumer(consumer: Mapping[str, Any], version: int, *, batch: Any, eks: Any) -> None:
    template = consumer["launch_template_name"]
    if consumer["kind"] == "batch_compute_environment":
        batch.update_compute_environment(
            computeEnvironment=consumer["compute_environment"],
            computeResources={"launchTemplate": {"launchTemplateName": template, "version": str(version)}},
            # Running jobs finish (or checkpoint on the drain event); they are not killed by the update.
            updatePolicy={"terminateJobsOnUpdate": False, "jobExecutionTimeoutMinutes": 30},
        )
    elif consumer["kind"] == "eks_node_group":
        eks.update_nodegroup_version(
            clusterName=consumer["cluster_name"], nodegroupName=consumer["nodegroup_name"],
            launchTemplate={"name": template, "version": str(version)},
        )
    else:
        raise ValueError(f"consumer kind {consumer['kind']!r} is fed by a training plan, not a launch template")


def rotate(*, consumer: Mapping[str, Any], reservation_id: str, ec2: Any, batch: Any, eks: Any) -> tuple[int, bool]:
    """The block has started: new work launches into it."""
    version, changed = set_default_version(ec2, consumer["launch_template_name"], into_block(reservation_id), f"gpu-governance: into Capacity Block {reservation_id}")
    if changed:
        point_consumer(consumer, version, batch=batch, eks=eks)
    return version, changed


def drain(*, window: str, consumer: Mapping[str, Any], fallback: str, reservation_id: str, next_block: str | None,
          ends_at: datetime, ec2: Any, batch: Any, eks: Any, events: Any) -> dict[str, Any]:
    """The block ends soon: new work goes to the next block, on demand, or (fallback none)
    nowhere; running jobs are told to checkpoint before instances terminate 30 minutes early."""
    version, changed = None, False
    current_target = _launch_target(ec2.describe_launch_template_versions(
        LaunchTemplateName=consumer["launch_template_name"], Versions=["$Default"])["LaunchTemplateVersions"][0]["LaunchTemplateData"])
    if current_target == ("capacity-block", reservation_id):  # still pointing at the ending block
        if next_block is not None:
            version, changed = set_default_version(ec2, consumer["launch_template_name"], into_block(next_block), f"gpu-governance: into Capacity Block {next_block}")
        elif fallback == "on_demand":
            version, changed = set_default_version(ec2, consumer["launch_template_name"], on_demand, f"gpu-governance: on demand after {reservation_id}")
    if changed:
        point_consumer(consumer, version, batch=batch, eks=eks)
    detail = {"window": window, "capacity_reservation_id": reservation_id, "ends_at": ends_at.isoformat(),
              "moved_to": next_block or (fallback if fallback == "on_demand" else None)}
    events.put_events(Entries=[{"Source": DRAIN_EVENT_SOURCE, "DetailType": DRAIN_EVENT_TYPE, "Detail": json.dumps(detail)}])
    return {**detail, "launch_template_version": version, "changed": changed}


def _launch_target(data: Mapping[str, Any]) -> tuple[str | None, str | None]:
    market = data.get("InstanceMarketOptions", {}).get("MarketType")
    target = data.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget", {}).get("CapacityReservationId")
    return market, target
