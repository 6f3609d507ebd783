"""The Kueue objects that govern an ``eks_kueue`` pool, generated from the model, and how its
tenants are named (docs/eks-kueue.md).

Plain functions returning plain dicts of ``kueue.x-k8s.io/v1beta2`` (served from Kueue 0.15,
its storage version from 0.16), so the construct applies them and the tests check every one
against the schema of Kueue's own CRDs and Kueue's conformance cases:

* one ResourceFlavor per instance type of the pool, named as the type, selecting the nodes of
  that type (``node.kubernetes.io/instance-type``);
* a Cohort per pool (the root: the pool's capacity no team or group is guaranteed is its own
  nominal quota, which every team may borrow), and one per group with a quota in the pool (its
  parent the pool's: the group's headroom is its nominal quota, its borrowing limit 0, so the
  group's teams together never hold more than the group's quota);
* per team a ClusterQueue (``<namespace>-clusterqueue``) in its group's cohort or the pool's,
  admitting only from the team's namespace, with a nominal quota per flavor for ``cpu``,
  ``memory`` and ``nvidia.com/gpu`` (its instances times what one node of the type has), the
  borrowing and lending limits of its sharing, and the preemption of the library's semantics
  (below); and a LocalQueue in the team's namespace;
* a WorkloadPriorityClass per declared priority class (``<class>-priority``, value the weight).

The preemption each ClusterQueue declares is the library's (docs/reclaim.md, "Where we differ from
Kueue", which tests/reclaim/test_kueue_conformance.py checks case by case): a team takes back its
guarantee from any borrower whatever its priority (``reclaimWithinCohort: Any``), never preempts
another team's work to borrow (``borrowWithinCohort`` left at ``Never``), and preempts its own
strictly lower-priority work to start urgent work within its quota when its sharing has in-share
preemption (``withinClusterQueue: LowerPriority``, else ``Never``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from constructs_lib.model import KubernetesTenancy, PriorityClass, Team, TeamGroup
from constructs_lib.model.projects import group_in_pool, groups_in_pool
from constructs_lib.model.quota import borrow_instances, instance_quota
from constructs_lib.tenancy.kubernetes import (
    NAME_LABEL,
    Manifest,
    Tenants,
    cost_metadata,
    object_meta,
    pod_security_labels,
    usage_reader_objects,
    workload_priority_class,
)
from constructs_lib.tenancy.run_time import KUEUE_MAX_EXEC_TIME, run_time_admission, run_time_limits
from gpu_governance_runtime.backends.eks_kueue import GROUP_SUFFIX, NAMESPACE_PREFIX
from gpu_governance_runtime.contract import GPU_RESOURCE, borrow_ceiling, lendable

from .karpenter import KarpenterBlocks
from .pool import EksKueuePool

API_VERSION = "kueue.x-k8s.io/v1beta2"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"  # [aws: eks.node-instance-type-label]
RESOURCES = ("cpu", "memory", GPU_RESOURCE)
"""What each ClusterQueue covers: Kueue admits no workload asking for a resource its
ClusterQueue does not cover ("resource ... unavailable in ClusterQueue")."""


NAMES = Tenants(namespace_prefix=NAMESPACE_PREFIX, group_suffix=GROUP_SUFFIX, operator_namespaces=())
"""How the teams' objects are named on every such cluster: namespace ``gpu-team-<team>``, group
``gpu-team-<team>-members``, queues ``gpu-team-<team>-localqueue`` / ``-clusterqueue``."""
# The names `gpu-governance trace from-kueue` reads a Workload's team from (Backend.part("kueue")).
namespace = NAMES.namespace
cluster_queue = NAMES.cluster_queue
team_named = NAMES.team_named


def tenants(pool: EksKueuePool) -> Tenants:
    """The pool's tenants: :data:`NAMES`, and the namespaces of its Kueue and training operators."""
    return replace(NAMES, operator_namespaces=pool.operator_namespaces)


def cohort(pool: EksKueuePool) -> str:
    """The pool's Cohort, the root of its tree (pool names of this backend are DNS labels)."""
    return pool.name


def group_cohort(pool: EksKueuePool, group: TeamGroup) -> str:
    return f"{pool.name}-{group.name}"


def _flavor_quotas(pool: EksKueuePool, instances: Mapping[str, Mapping[str, int | None]]) -> dict[str, Any]:
    """One resource group covering :data:`RESOURCES`: per instance type, each of ``instances``
    (``nominalQuota``, ``borrowingLimit``, ``lendingLimit`` in instances; None: not set) as
    what that many nodes of the type have."""
    per_node = {
        "cpu": lambda t, n: str(n * pool.vcpus_per_instance[t]),
        "memory": lambda t, n: f"{n * pool.memory_gib_per_instance[t]}Gi",
        GPU_RESOURCE: lambda t, n: str(n * pool.gpus_per_instance[t]),
    }
    return {
        "coveredResources": list(RESOURCES),
        "flavors": [
            {
                "name": instance_type,
                "resources": [
                    {
                        "name": resource,
                        **{field: amount(instance_type, n) for field, n in limits.items() if n is not None},
                    }
                    for resource, amount in per_node.items()
                ],
            }
            for instance_type, limits in sorted(instances.items())
        ],
    }


def team_limits(pool: EksKueuePool, team: Team) -> dict[str, dict[str, int | None]]:
    """Per instance type of the team's quota, in instances: its nominal quota, the most it may
    borrow on top (None: no limit) and the most it lends while idle (None: all of it), the same
    numbers the reclaim planner and the simulator read from the policy document."""
    sharing = team.sharing
    quota, absolute = instance_quota(team, pool), borrow_instances(team, pool)
    limits = {}
    for instance_type, nominal in quota.items():
        if instance_type in absolute:
            borrowing: int | None = absolute[instance_type]
        else:
            ceiling = borrow_ceiling(sharing.strategy, nominal, sharing.borrow_percent)
            borrowing = None if ceiling is None else ceiling - nominal
        lending = lendable(sharing.strategy, nominal, sharing.lending_limit)
        limits[instance_type] = {
            "nominalQuota": nominal,
            "borrowingLimit": borrowing,
            "lendingLimit": None if lending == nominal else lending,  # [aws: eks.kueue-borrowing-and-lending-limits]
        }
    return limits


def cluster_queue_object(pool: EksKueuePool, team: Team, cohort_name: str) -> Manifest:
    """The team's ClusterQueue in ``cohort_name``, admitting only workloads of its namespace."""
    names = tenants(pool)
    spec: dict[str, Any] = {
        "cohortName": cohort_name,
        "namespaceSelector": {"matchLabels": {NAME_LABEL: names.namespace(team.name)}},
        "resourceGroups": [_flavor_quotas(pool, team_limits(pool, team))],
        "preemption": {
            "reclaimWithinCohort": "Any",  # [aws: eks.kueue-reclaim-any]
            "withinClusterQueue": "LowerPriority" if team.sharing.in_share_preemption else "Never",
        },
    }
    if pool.fair_share:
        spec["fairSharing"] = {"weight": str(team.fair_share_weight)}
    if team.paused:
        # Admitted workloads run to completion; nothing new is admitted (Kueue's Hold).
        spec["stopPolicy"] = "Hold"  # [aws: eks.kueue-stop-policy-hold]
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": object_meta(names.cluster_queue(team.name), team.name),
        "spec": spec,
    }


def local_queue(pool: EksKueuePool, team: str) -> Manifest:
    names = tenants(pool)
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": names.meta(names.local_queue(team), team),
        "spec": {"clusterQueue": names.cluster_queue(team)},
    }


def namespace_object(pool: EksKueuePool, team: Team, tenancy: KubernetesTenancy) -> Manifest:
    """The team's namespace, with Kubernetes' own Pod Security admission at the team's level and
    the team and cost-centre labels cost tools allocate its spend by."""
    cost = cost_metadata(team.name, team.cost_centre)
    metadata = object_meta(tenants(pool).namespace(team.name), team.name)
    metadata["labels"].update(pod_security_labels(tenancy.pod_security, pool.kubernetes_version))
    metadata["labels"].update(cost["labels"])
    if "annotations" in cost:
        metadata["annotations"] = cost["annotations"]
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def resource_flavors(pool: EksKueuePool, blocks: KarpenterBlocks | None = None) -> list[Manifest]:
    """A flavor per instance type; one whose blocks Karpenter launches tolerates their taint, which Kueue
    adds to the pods it admits in the flavor's quota, and to no other pod [aws: eks.kueue-flavor-tolerations]."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": object_meta(instance_type, None),
            "spec": {
                "nodeLabels": {INSTANCE_TYPE_LABEL: instance_type},
                **({"tolerations": [blocks.toleration]} if blocks and instance_type in blocks.instance_types else {}),
            },
        }
        for instance_type in sorted(pool.capacity)
    ]


def workload_priority_classes(classes: Sequence[PriorityClass]) -> list[Manifest]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": object_meta(workload_priority_class(c.name), None),
            "value": c.weight,
            "description": f"Priority class {c.name} of the governance file (weight {c.weight})",
        }
        for c in classes
    ]


def cohorts(pool: EksKueuePool, teams: Sequence[Team], groups: Sequence[TeamGroup]) -> list[Manifest]:
    """The pool's Cohort, holding what no team or top group is guaranteed, and one per group with a
    quota in the pool, parents first, under its nearest ancestor's with one (else the pool's):
    its nominal quota is the group's headroom above its teams' and child groups' quotas, its
    borrowingLimit what the group may hold beyond its quota (0 unless declared: the quota is its
    ceiling) and its lendingLimit, where declared, what of its quota it lends outside itself. Kueue
    counts a Cohort's subtree (its nominal quota and what its children lend it) against both."""
    tree = groups_in_pool(groups, pool.name)
    held = dict.fromkeys(pool.capacity, 0)
    nominal = {g.name: dict(g.quotas[pool.name]) for g, _ in tree}
    for group, parent in tree:  # a top group's quota is held in the pool, a child's in its parent's
        for instance_type, count in group.quotas[pool.name].items():
            if parent is None:
                held[instance_type] += count
            else:
                nominal[parent.name][instance_type] -= count
    for team in teams:
        group = group_in_pool(groups, team.name, pool.name)
        for instance_type, count in instance_quota(team, pool).items():
            if group is None:
                held[instance_type] += count
            else:
                nominal[group.name][instance_type] -= count
    manifests = []
    for group, parent in tree:
        borrowing = group.borrowing_limits.get(pool.name, {})
        lending = group.lending_limits.get(pool.name, {})
        limits = {
            instance_type: {
                "nominalQuota": headroom,
                "borrowingLimit": borrowing.get(instance_type, 0),
                "lendingLimit": lending.get(instance_type),  # [aws: eks.kueue-cohort-lending-limit]
            }
            for instance_type, headroom in nominal[group.name].items()
        }
        manifests.append(
            {
                "apiVersion": API_VERSION,
                "kind": "Cohort",
                "metadata": object_meta(group_cohort(pool, group), None),
                # [aws: eks.kueue-cohort-tree]
                "spec": {
                    "parentName": cohort(pool) if parent is None else group_cohort(pool, parent),
                    "resourceGroups": [_flavor_quotas(pool, limits)],
                },
            }
        )
    unassigned = {t: {"nominalQuota": pool.capacity[t] - held[t]} for t in sorted(pool.capacity)}
    root = {
        "apiVersion": API_VERSION,
        "kind": "Cohort",
        "metadata": object_meta(cohort(pool), None),
        "spec": {"resourceGroups": [_flavor_quotas(pool, unassigned)]},
    }
    return [root, *manifests]


def cohort_of(pool: EksKueuePool, team: Team, groups: Sequence[TeamGroup]) -> str:
    """The Cohort the team's ClusterQueue joins: its nearest group's with a quota in the pool, else the pool's."""
    group = group_in_pool(groups, team.name, pool.name)
    return cohort(pool) if group is None else group_cohort(pool, group)


def cluster_objects(
    pool: EksKueuePool,
    teams: Sequence[Team],
    groups: Sequence[TeamGroup],
    classes: Sequence[PriorityClass],
    blocks: KarpenterBlocks | None = None,
) -> list[Manifest]:
    """Cluster-wide, applied once before any team's objects: flavors, priority classes, cohorts."""
    return [*resource_flavors(pool, blocks), *workload_priority_classes(classes), *cohorts(pool, teams, groups)]


def usage_reader(pool: EksKueuePool, teams: Sequence[Team]) -> list[Manifest]:
    """What the reclaim controller's group may do on the cluster: read every ClusterQueue, and patch
    (its stopPolicy, at a GPU-hour limit) those of the teams with a limit, except a paused team's,
    which is Hold as deployed and not the controller's to change."""
    names = tenants(pool)
    return usage_reader_objects([names.cluster_queue(t.name) for t in teams if t.gpu_hour_limit and not t.paused])


def team_objects(
    pool: EksKueuePool, team: Team, groups: Sequence[TeamGroup], classes: Sequence[PriorityClass]
) -> list[Manifest]:
    """Everything the team gets on the cluster, in apply order: its namespace first, its queues,
    then the isolation every Kubernetes backend shares (``tenancy.kubernetes``)."""
    tenancy = team.kubernetes.get(pool.name, KubernetesTenancy())
    return [
        namespace_object(pool, team, tenancy),
        cluster_queue_object(pool, team, cohort_of(pool, team, groups)),
        local_queue(pool, team.name),
        *tenants(pool).team_objects(team.name, tenancy, tenancy.granted_priority_classes(classes)),
        *run_time_admission(tenants(pool), KUEUE_MAX_EXEC_TIME, team.name, run_time_limits(team, pool, classes)),
    ]
