"""Point a HyperPod instance group at the window's active training plan, and back when it ends.

``UpdateCluster`` takes whole instance-group specifications, so the group's current one is read
with ``DescribeCluster`` and sent back unchanged but for ``TrainingPlanArn``. Only the declared
group is sent: groups left out of ``InstanceGroups`` are not changed, so an edit made by hand to
another group is never overwritten.

The description names some fields differently from the specification: ``TargetCount`` and
``MinCount`` are the specification's ``InstanceCount`` and ``MinInstanceCount``, and where the
description has ``Current<X>`` and ``Desired<X>`` the specification's ``<X>`` is the desired
one. The mapping walks the installed botocore model, so fields added to the API are carried too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from botocore.exceptions import ClientError

from .ledger import Ledger
from .planner import Reservation

SPECIFICATION_SHAPE = "ClusterInstanceGroupSpecification"
RENAMED = {"InstanceCount": "TargetCount", "MinInstanceCount": "MinCount"}


class MissingInstanceGroup(ValueError):
    """The cluster has no instance group of the declared name."""


def desired_plan(plans: Iterable[Reservation], window: str, current: str | None, fallback: str, now: datetime) -> str | None:
    """The plan the group should use: the window's active plan; when none is active, on demand
    (``fallback: on_demand``) if the group still uses one of the window's plans, else unchanged."""
    own = [p for p in plans if p.window == window]
    active = sorted((p for p in own if p.state == "active" and p.start <= now < p.end), key=lambda p: p.start)
    if active:
        return active[-1].id
    if fallback == "on_demand" and current in {p.id for p in own}:
        return None
    return current


def specification(details: dict[str, Any], shape: Any) -> dict[str, Any]:
    """The specification (``shape``) that recreates a described instance group (``details``)."""
    found = {}
    for name, member in shape.members.items():
        value = details.get(RENAMED.get(name, name), details.get(f"Desired{name}"))
        if value is None:
            continue
        if member.type_name == "structure" and isinstance(value, dict):
            value = specification(value, member)
        found[name] = value
    return found


def repoint(*, window: str, cluster_arn: str, instance_group: str, plans: Iterable[Reservation], fallback: str, dry_run: bool,
            sagemaker: Any, ledger: Ledger, now: datetime) -> dict[str, Any]:
    """Make the group use ``desired_plan``: no call when it already does; in dry run only say so."""
    groups = sagemaker.describe_cluster(ClusterName=cluster_arn)["InstanceGroups"]
    group = next((g for g in groups if g["InstanceGroupName"] == instance_group), None)
    if group is None:
        raise MissingInstanceGroup(
            f"window {window}: HyperPod cluster {cluster_arn} has no instance group {instance_group!r}; "
            f"it has {sorted(g['InstanceGroupName'] for g in groups)}. Fix feeds.instance_group or the cluster."
        )
    current = group.get("TrainingPlanArn")
    wanted = desired_plan(plans, window, current, fallback, now)
    result = {"window": window, "cluster": cluster_arn, "instance_group": instance_group, "from": current, "to": wanted}
    if wanted == current:
        return {**result, "changed": False}
    if dry_run:
        return {**result, "changed": False, "dry_run": True}
    spec = specification(group, sagemaker.meta.service_model.shape_for(SPECIFICATION_SHAPE))
    spec.pop("TrainingPlanArn", None)
    if wanted is not None:
        spec["TrainingPlanArn"] = wanted
    action_id = f"repoint#{cluster_arn}/{instance_group}@{now.isoformat()}"
    try:
        sagemaker.update_cluster(ClusterName=cluster_arn, InstanceGroups=[spec])
    except ClientError as error:
        # Throttled, or the cluster is busy updating: nothing changed; the next run tries again.
        code = error.response.get("Error", {}).get("Code", "")
        ledger.record_action(action_id, status="failed", details={**result, "error": code}, now=now)
        return {**result, "changed": False, "error": code, "retry": "next run"}
    ledger.record_action(action_id, status="done", details=result, now=now)
    return {**result, "changed": True}
