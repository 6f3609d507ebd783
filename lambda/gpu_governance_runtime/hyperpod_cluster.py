"""Read a HyperPod cluster's instance groups and write some of them back with ``UpdateCluster``.

``UpdateCluster`` takes whole instance-group specifications, so a group's current one is read
with ``DescribeCluster`` and sent back with only the intended change. Callers send only the
groups they declare: groups left out of ``InstanceGroups`` are not changed, so an edit made by
hand to another group is never overwritten.

The description names some fields differently from the specification: ``TargetCount`` and
``MinCount`` are the specification's ``InstanceCount`` and ``MinInstanceCount``, and where the
description has ``Current<X>`` and ``Desired<X>`` the specification's ``<X>`` is the desired
one. The mapping walks the installed botocore model, so fields added to the API are carried too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SPECIFICATION_SHAPE = "ClusterInstanceGroupSpecification"
RENAMED = {"InstanceCount": "TargetCount", "MinInstanceCount": "MinCount"}


class MissingInstanceGroup(ValueError):
    """The cluster has no instance group of a declared name."""


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


def group_specification(sagemaker: Any, details: dict[str, Any]) -> dict[str, Any]:
    """``specification`` against the request shape of the client's own service model."""
    return specification(details, sagemaker.meta.service_model.shape_for(SPECIFICATION_SHAPE))


def described_groups(
    sagemaker: Any, cluster_arn: str, names: Iterable[str], *, fix: str, optional: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """The described instance groups named, by name, plus those of ``optional`` the cluster has.
    A name the cluster lacks raises ``MissingInstanceGroup`` naming every missing group, the
    groups there are, and ``fix``."""
    groups = {g["InstanceGroupName"]: g for g in sagemaker.describe_cluster(ClusterName=cluster_arn)["InstanceGroups"]}
    wanted = list(dict.fromkeys(names))
    missing = [name for name in wanted if name not in groups]
    if missing:
        raise MissingInstanceGroup(
            f"HyperPod cluster {cluster_arn} has no instance group {', '.join(map(repr, missing))}; "
            f"it has {sorted(groups)}. {fix}"
        )
    return {name: groups[name] for name in dict.fromkeys([*wanted, *optional]) if name in groups}
