"""Capacity windows fed through Karpenter on an ``eks_kueue`` pool (``feeds: {kind: karpenter_node_pool}``).

Per pool fed that way, one EC2NodeClass and one NodePool, both ``gpu-governance-<pool>-blocks``:

* the EC2NodeClass selects capacity reservations by the tags the capacity controller puts on every
  purchase for the pool (``gpu-governance:pool`` and ``gpu-governance:managed-by``) and the capacity
  account as owner, so a block bought later is found without a deploy
  [aws: eks.karpenter-finds-later-reservations], and no other pool's block
  (Karpenter: capacity blocks are selected "in the same way you would for a default ODCR"
  [aws: eks.karpenter-selects-blocks-by-tags]);
* the NodePool launches only capacity type ``reserved`` (and ``on-demand`` when the windows fall
  back to it) [aws: eks.karpenter-reserved-capacity-type], of the windows' instance types in their
  zones, tainted ``gpu-governance/capacity-block=<pool>:NoSchedule`` so that only pods admitted
  through the pool's Kueue ResourceFlavor of the type, which tolerates the taint, run there
  (``kueue.resource_flavors``); its nodes never expire, and are consolidated only when empty.

Before a block ends Karpenter drains its nodes itself [aws: eks.karpenter-drains-before-block-end]:
the controller moves nothing for this feed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from constructs_lib.model.capacity import capacity_controller_id
from constructs_lib.tenancy.kubernetes import object_meta
from gpu_governance_runtime.contract import TAG_MANAGED_BY, TAG_POOL

from .checks import karpenter_windows
from .pool import EksKueuePool

TAINT_KEY = "gpu-governance/capacity-block"  # also the nodes' label, valued with the pool's name
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
DISCOVERY_TAG = "karpenter.sh/discovery"  # as Karpenter's getting-started guide tags subnets and security groups


@dataclass(frozen=True)
class KarpenterBlocks:
    """What the pool's Karpenter feed is made of, gathered from the windows that name it."""

    pool: str
    instance_types: tuple[str, ...]
    zones: tuple[str, ...]
    on_demand_fallback: bool
    node_role: str
    ami_alias: str
    discovery_tags: Mapping[str, str]
    managed_by: str
    owner_account: str

    @property
    def name(self) -> str:
        return f"gpu-governance-{self.pool}-blocks"

    @property
    def toleration(self) -> dict[str, str]:
        return {"key": TAINT_KEY, "operator": "Equal", "value": self.pool, "effect": "NoSchedule"}


def blocks_of(model, pool: EksKueuePool) -> KarpenterBlocks | None:
    """The pool's Karpenter feed, or None when no window feeds it through Karpenter."""
    windows = [w for _, w in karpenter_windows(model, pool)]
    if not windows:
        return None
    feed = windows[0].feeds
    return KarpenterBlocks(
        pool=pool.name,
        instance_types=tuple(sorted({w.instance_type for w in windows})),
        zones=tuple(sorted({z for w in windows for z in w.availability_zones})),
        on_demand_fallback=windows[0].fallback == "on_demand",
        node_role=feed.node_role,
        ami_alias=feed.ami_alias,
        discovery_tags=dict(feed.discovery_tags) or {DISCOVERY_TAG: pool.eks_cluster_name},
        managed_by=capacity_controller_id(model.organisation),
        owner_account=model.capacity_account.account_id,
    )


def objects(blocks: KarpenterBlocks) -> list[dict[str, Any]]:
    """The EC2NodeClass, then the NodePool that names it."""
    node_class = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": object_meta(blocks.name, None),
        "spec": {
            "role": blocks.node_role,
            "amiSelectorTerms": [{"alias": blocks.ami_alias}],
            "subnetSelectorTerms": [{"tags": dict(blocks.discovery_tags)}],
            "securityGroupSelectorTerms": [{"tags": dict(blocks.discovery_tags)}],
            # Tags within a term are ANDed, and ownerID restricts the term to the capacity account's reservations.
            "capacityReservationSelectorTerms": [
                {"tags": {TAG_POOL: blocks.pool, TAG_MANAGED_BY: blocks.managed_by}, "ownerID": blocks.owner_account}
            ],
            "tags": {TAG_POOL: blocks.pool},
        },
    }
    capacity_types = ["reserved", "on-demand"] if blocks.on_demand_fallback else ["reserved"]
    node_pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": object_meta(blocks.name, None),
        "spec": {
            "template": {
                "metadata": {"labels": {TAINT_KEY: blocks.pool}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": blocks.name},
                    "requirements": [
                        {"key": CAPACITY_TYPE, "operator": "In", "values": capacity_types},
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": list(blocks.instance_types),
                        },
                        {"key": ZONE_LABEL, "operator": "In", "values": list(blocks.zones)},
                    ],
                    "taints": [{"key": TAINT_KEY, "value": blocks.pool, "effect": "NoSchedule"}],
                    # A node lives as long as its block: Karpenter's default expiry (720h) would end a longer block's jobs.
                    "expireAfter": "Never",
                },
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m"},
        },
    }
    return [node_class, node_pool]
