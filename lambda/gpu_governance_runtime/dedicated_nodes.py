"""Label and taint the instance groups of a HyperPod EKS cluster that are dedicated to one team.

The handler of a CloudFormation custom resource (``aws_cdk.custom_resources.Provider``) whose
properties are ``ClusterArn`` and ``Groups`` (instance group name -> team). On Create and Update
it sets, on each declared group, the label and the ``NoSchedule`` taint
``gpu-governance/dedicated-team=<team>``; labels and taints with other keys stay as they are.
Groups dropped from ``Groups`` by an Update, and all groups on Delete, lose our label and taint
and nothing else. Groups already right are not sent at all, so a repeated or duplicate event
makes no call. The group specifications come from ``hyperpod_cluster``: only the groups that
change are sent, each whole, with its new ``KubernetesConfig``.

``UpdateCluster`` states the desired configuration, so resending it is harmless: the client
retries throttling and transient errors (botocore standard mode) before the deployment fails.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.exceptions import ClientError

from . import api_check
from .common import log, metrics
from .common.clients import DESIRED_STATE as RETRY_CONFIG  # the name its tests use
from .contract import DEDICATED_GROUPS_UPDATED, HYPERPOD_NAMESPACE
from .hyperpod_cluster import described_groups, group_specification

DEDICATED_NODE_KEY = "gpu-governance/dedicated-team"
"""Node label and taint key marking a node as dedicated to the team named in the value."""

METRIC_NAMESPACE = HYPERPOD_NAMESPACE
# Checked against the runtime's boto3 at cold start (api_check); a test keeps it equal to the calls in the code.
REQUIRED_OPERATIONS = {"sagemaker": ("DescribeCluster", "UpdateCluster")}

Groups = Mapping[str, "str | None"]
"""Instance group name -> the team it is dedicated to, or None: not dedicated by us."""


def dedicated_node_config(team: str) -> dict[str, Any]:
    """Labels and taints for the team's dedicated instance groups, in the shape of the
    ``KubernetesConfig`` of a HyperPod instance group (CreateCluster / UpdateCluster)."""
    return {
        "Labels": {DEDICATED_NODE_KEY: team},
        "Taints": [{"Key": DEDICATED_NODE_KEY, "Value": team, "Effect": "NoSchedule"}],
    }


def dedicate(config: Mapping[str, Any] | None, team: str | None) -> dict[str, Any]:
    """``config`` (a group's ``KubernetesConfig`` specification) with our label and taint for
    ``team``, or without them for None. Every label and taint with another key is kept."""
    ours = dedicated_node_config(team) if team is not None else {"Labels": {}, "Taints": []}
    labels = {key: value for key, value in ((config or {}).get("Labels") or {}).items() if key != DEDICATED_NODE_KEY}
    taints = [taint for taint in ((config or {}).get("Taints") or []) if taint.get("Key") != DEDICATED_NODE_KEY]
    return {"Labels": {**labels, **ours["Labels"]}, "Taints": [*taints, *ours["Taints"]]}


def same(config: Mapping[str, Any] | None, other: Mapping[str, Any] | None) -> bool:
    """Whether two ``KubernetesConfig`` put the same labels and taints on the nodes (absent
    means none; the order of taints does not matter)."""

    def canonical(c: Mapping[str, Any] | None) -> tuple:
        c = c or {}
        return dict(c.get("Labels") or {}), sorted(json.dumps(t, sort_keys=True) for t in c.get("Taints") or [])

    return canonical(config) == canonical(other)


def changes(specifications: Mapping[str, Mapping[str, Any]], wanted: Groups) -> dict[str, dict[str, Any]]:
    """The specification to send for each group whose configuration is not yet ``wanted``
    (groups absent from ``specifications`` are skipped: there is nothing of ours on them)."""
    found = {}
    for name, team in wanted.items():
        if name not in specifications:
            continue
        current = specifications[name].get("KubernetesConfig")
        desired = dedicate(current, team)
        if not same(desired, current):
            found[name] = {**specifications[name], "KubernetesConfig": desired}
    return found


def reconcile(sagemaker: Any, cluster_arn: str, wanted: Groups) -> list[str]:
    """Make every group of ``wanted`` carry its team's label and taint (None: not ours) with at
    most one ``UpdateCluster`` call; returns the groups sent. A group to dedicate that the
    cluster lacks is an error; one to clear that is gone needs nothing."""
    required = [name for name, team in wanted.items() if team is not None]
    groups = described_groups(
        sagemaker,
        cluster_arn,
        required,
        optional=wanted,
        fix="Fix dedicated_instance_groups in the governance model, or create the group first.",
    )
    updates = changes({name: group_specification(sagemaker, group) for name, group in groups.items()}, wanted)
    if not updates:
        return []
    try:
        sagemaker.update_cluster(ClusterName=cluster_arn, InstanceGroups=list(updates.values()))
    except ClientError as error:
        details = error.response.get("Error", {})
        raise RuntimeError(
            f"UpdateCluster on HyperPod cluster {cluster_arn} for instance groups {sorted(updates)} failed after retries "
            f"({details.get('Code')}: {details.get('Message')}); nothing was changed. A ConflictException usually means the "
            "cluster is being updated: deploy again once it is InService."
        ) from None
    return sorted(updates)


def wanted_groups(event: Mapping[str, Any]) -> Groups:
    """What a custom-resource event asks for: on Delete no group of ours; on Update the old
    groups no longer declared (same cluster only: a new cluster means a new physical id, and
    CloudFormation then deletes the old resource, which clears the old cluster)."""
    properties = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        return {name: None for name in properties["Groups"]}
    wanted: dict[str, str | None] = dict(properties["Groups"])
    old = event.get("OldResourceProperties") or {}
    if event["RequestType"] == "Update" and old.get("ClusterArn") == properties["ClusterArn"]:
        wanted.update({name: None for name in old.get("Groups", {}) if name not in wanted})
    return wanted


def physical_id(cluster_arn: str) -> str:
    return f"{cluster_arn}/dedicated-nodes"


def _client() -> Any:
    if "AWS_LAMBDA_FUNCTION_NAME" not in os.environ:
        return None  # imported by tests: they bring their own client
    sagemaker = boto3.client("sagemaker", config=RETRY_CONFIG)
    api_check.require({"sagemaker": sagemaker}, REQUIRED_OPERATIONS, namespace=METRIC_NAMESPACE)
    return sagemaker


SAGEMAKER = _client()  # module level: reused by warm invocations


def handler(event: Mapping[str, Any], context: Any = None, *, sagemaker: Any = None) -> dict[str, Any]:
    sagemaker = sagemaker or SAGEMAKER
    cluster_arn = event["ResourceProperties"]["ClusterArn"]
    wanted = wanted_groups(event)
    try:
        updated = reconcile(sagemaker, cluster_arn, wanted)
    except ClientError as error:
        # A deleted cluster has no labels left to clear.
        if event["RequestType"] != "Delete" or error.response.get("Error", {}).get("Code") != "ResourceNotFound":
            raise
        updated = []
    log.info(
        "dedicated instance groups reconciled",
        request=event["RequestType"],
        cluster=cluster_arn,
        wanted=wanted,
        updated=updated,
    )
    metrics.publish(METRIC_NAMESPACE, {"Cluster": cluster_arn}, {DEDICATED_GROUPS_UPDATED: (len(updated), "Count")})
    return {"PhysicalResourceId": physical_id(cluster_arn), "Data": {"UpdatedGroups": ",".join(updated)}}
