"""Point a HyperPod instance group at the window's active training plan, and back when it ends.

The group's specification is read and sent back unchanged but for ``TrainingPlanArn``, and only
the declared group is sent (``gpu_governance_runtime.hyperpod_cluster``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from ..hyperpod_cluster import MissingInstanceGroup, described_groups, group_specification  # noqa: F401 (the handler catches it here)
from ..planners.offers import Reservation
from .ledger import Ledger


def desired_plan(
    plans: Iterable[Reservation], window: str, current: str | None, fallback: str, now: datetime
) -> str | None:
    """The plan the group should use: the window's active plan; when none is active, on demand
    (``fallback: on_demand``) if the group still uses one of the window's plans, else unchanged."""
    own = [p for p in plans if p.window == window]
    active = sorted((p for p in own if p.state == "active" and p.start <= now < p.end), key=lambda p: p.start)
    if active:
        return active[-1].id
    if fallback == "on_demand" and current in {p.id for p in own}:
        return None
    return current


def repoint(
    *,
    window: str,
    cluster_arn: str,
    instance_group: str,
    plans: Iterable[Reservation],
    fallback: str,
    dry_run: bool,
    sagemaker: Any,
    ledger: Ledger,
    now: datetime,
) -> dict[str, Any]:
    """Make the group use ``desired_plan``: no call when it already does; in dry run only say so."""
    group = described_groups(
        sagemaker, cluster_arn, [instance_group], fix=f"Fix feeds.instance_group of window {window} or the cluster."
    )[instance_group]
    current = group.get("TrainingPlanArn")
    wanted = desired_plan(plans, window, current, fallback, now)
    result = {"window": window, "cluster": cluster_arn, "instance_group": instance_group, "from": current, "to": wanted}
    if wanted == current:
        return {**result, "changed": False}
    if dry_run:
        return {**result, "changed": False, "dry_run": True}
    spec = group_specification(sagemaker, group)
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
