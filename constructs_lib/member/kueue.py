"""What every backend whose teams queue with Kueue on EKS shares on the member's side: how
`gpu-governance status` reads Kueue's Workloads and ClusterQueues (``kueue_observation``), and the
training Job a member submits (``training_job_manifest``), which Kueue admits through the team's
local queue at its priority class.

The Job passes the cluster's admission policies as shipped (``constructs_lib.tenancy.kubernetes``):
Pod Security baseline and restricted alike (non-root, no privilege escalation, all capabilities
dropped, RuntimeDefault seccomp), no node name, and on a team's dedicated nodes (HyperPod instance
groups) their node selector and toleration. Imports no aws_cdk.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.setup import TeamSetup, check_job_name
from constructs_lib.member.status import timestamp
from constructs_lib.member.waiting import RUNNING, WAITING, Observation, ObservedJob
from constructs_lib.tenancy.kubernetes import PRIORITY_CLASS_LABEL, QUEUE_LABEL, Tenants, cost_metadata
from constructs_lib.tenancy.run_time import MAX_EXEC_TIME_LABEL
from gpu_governance_runtime.contract import GPU_RESOURCE, TAG_COST_CENTRE
from gpu_governance_runtime.dedicated_nodes import DEDICATED_NODE_KEY
from gpu_governance_runtime.policy import PoolPolicy

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NON_ROOT_UID = 1000


def training_job_manifest(
    setup: TeamSetup,
    *,
    job_name: str,
    priority_class: str,
    image: str,
    command: Sequence[str],
    instance_type: str,
    gpus: int,
    dedicated_team_nodes: bool = False,
    max_runtime_seconds: int | None = None,
) -> dict[str, Any]:
    """A suspended-until-admitted ``batch/v1`` Job in the team's namespace with the local queue
    and priority-class labels, running as the team's workload service account (its pod identity
    role reads the team's bucket). ``dedicated_team_nodes``: the team owns dedicated instance
    groups, and its pods must select and tolerate them. ``max_runtime_seconds``: how long it may
    run, by default its class's run-time limit where it has one (refused above it); the Job says
    it both as Kueue's maximum execution time and as its ``activeDeadlineSeconds``, which the
    team's admission policy requires on EKS with Kueue and on HyperPod EKS respectively."""
    setup.require("namespace", "local_queue", "service_account")
    check_job_name(setup.team, job_name)
    kueue_class = setup.priority(priority_class)
    if instance_type not in setup.quota:
        raise GovernanceError.single(
            "instance_type", f"not in team {setup.team}'s compute quota", instance_type, f"one of {sorted(setup.quota)}"
        )
    pod_spec: dict[str, Any] = {
        "serviceAccountName": setup.service_account,
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "nodeSelector": {INSTANCE_TYPE_LABEL: instance_type},
        "containers": [
            {
                "name": "trainer",
                "image": image,
                "command": list(command),
                "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    if dedicated_team_nodes:
        pod_spec["nodeSelector"][DEDICATED_NODE_KEY] = setup.team
        pod_spec["tolerations"] = [
            {"key": DEDICATED_NODE_KEY, "operator": "Equal", "value": setup.team, "effect": "NoSchedule"}
        ]
    # The team and its cost centre on the Job and its pods, which cost tools allocate by.
    cost = cost_metadata(setup.team, setup.submission_tags.get(TAG_COST_CENTRE))
    labels = {QUEUE_LABEL: setup.local_queue, PRIORITY_CLASS_LABEL: kueue_class, **cost["labels"]}
    # Kueue unsuspends the job when it admits it; created suspended, no pod starts before.
    spec: dict[str, Any] = {"suspend": True, "backoffLimit": 0, "template": {"metadata": cost, "spec": pod_spec}}
    seconds = max_runtime_seconds if max_runtime_seconds is not None else setup.run_time_limit(priority_class)
    if seconds is not None:
        seconds = setup.max_runtime_seconds(priority_class, seconds, seconds)
        labels[MAX_EXEC_TIME_LABEL] = str(seconds)
        spec["activeDeadlineSeconds"] = seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**cost, "name": job_name, "namespace": setup.namespace, "labels": labels},
        "spec": spec,
    }


# --- status -------------------------------------------------------------------------------

_FLAVOR = re.compile(r"in flavor ([^,\s]+)")


def kueue_observation(
    workloads: Mapping[str, Any],
    cluster_queues: Mapping[str, Any] | None,
    pool: PoolPolicy,
    team: str,
    tenants: Tenants,
) -> Observation:
    """``workloads``: `kubectl get workloads -n <the team's namespace> -o json`; ``cluster_queues``:
    `kubectl get clusterqueues -o json` (optional: without it, use and quota are not shown);
    ``tenants``: how the pool's backend names the teams' namespaces and ClusterQueues."""
    in_use: dict[str, dict[str, int]] = {}
    nominal: dict[str, dict[str, int]] = {}  # cluster queue's share -> flavor -> GPUs
    borrowing_limit: dict[str, int | None] = {}
    queues = (cluster_queues or {}).get("items", [])
    cohort = next((_cohort(q) for q in queues if q["metadata"]["name"] == tenants.cluster_queue(team)), None)
    for queue in queues:
        name = queue["metadata"]["name"]
        share = tenants.cluster_queue_team(name)
        if name != tenants.cluster_queue(team) and (cohort is None or _cohort(queue) != cohort):
            continue  # only the team's cohort shares its capacity
        for flavor in queue.get("status", {}).get("flavorsUsage", []):
            for resource in flavor.get("resources", []):
                if resource["name"] == GPU_RESOURCE:
                    in_use.setdefault(share, {})[flavor["name"]] = _quantity(resource.get("total", 0))
        for group in queue.get("spec", {}).get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                for resource in flavor.get("resources", []):
                    if resource["name"] == GPU_RESOURCE:
                        nominal.setdefault(share, {})[flavor["name"]] = _quantity(resource.get("nominalQuota", 0))
                        if share == team:
                            limit = resource.get("borrowingLimit")
                            borrowing_limit[flavor["name"]] = None if limit is None else _quantity(limit)
    # A cohort holds the sum of its cluster queues' nominal quotas (Kueue's semantics).
    cohort_gpus: dict[str, int] = {}
    for by_flavor in nominal.values():
        for flavor, gpus in by_flavor.items():
            cohort_gpus[flavor] = cohort_gpus.get(flavor, 0) + gpus
    jobs = tuple(
        _workload_job(w, team, in_use, nominal.get(team, {}), borrowing_limit, cohort_gpus)
        for w in workloads.get("items", [])
    )
    nominal = nominal.get(team, {})
    notes = (
        () if cluster_queues else ("no ClusterQueue objects read (--cluster-queues): use and guarantees are not shown",)
    )
    return Observation(
        backend=pool.backend,
        pool=pool.name,
        unit="GPUs",
        in_use=in_use,
        jobs=tuple(j for j in jobs if j),
        notes=notes,
        guaranteed=nominal if cluster_queues else {},
    )


def _workload_job(
    workload: Mapping[str, Any],
    team: str,
    in_use: Mapping[str, Mapping[str, int]],
    nominal: Mapping[str, int],
    borrowing_limit: Mapping[str, int | None],
    cohort_gpus: Mapping[str, int],
) -> ObservedJob | None:
    meta, spec, status = workload["metadata"], workload.get("spec", {}), workload.get("status", {})
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    if conditions.get("Finished", {}).get("status") == "True":
        return None
    owners = meta.get("ownerReferences", [])
    gpus = sum(
        int(ps.get("count", 1))
        * sum(
            _quantity(c.get("resources", {}).get("requests", {}).get(GPU_RESOURCE, 0))
            for c in ps.get("template", {}).get("spec", {}).get("containers", [])
        )
        for ps in spec.get("podSets", [])
    )
    admission = status.get("admission") or {}
    flavors = [f for a in admission.get("podSetAssignments", []) for f in a.get("flavors", {}).values()]
    reserved = conditions.get("QuotaReserved", {})
    message = reserved.get("message", "")
    flavor = flavors[0] if flavors else (_FLAVOR.search(message)[1] if _FLAVOR.search(message) else None)
    base = dict(
        job_id=owners[0]["name"] if owners else meta["name"],
        name=meta["name"],
        team=team,
        instance_type=flavor,
        count=gpus,
        priority=int(spec.get("priority", 0)),
        submitted_at=timestamp(meta.get("creationTimestamp")),
    )
    if conditions.get("Admitted", {}).get("status") == "True":
        return ObservedJob(state=RUNNING, **base)
    words = [message] if message else []
    evicted, preempted = conditions.get("Evicted", {}), conditions.get("Preempted", {})
    if preempted.get("status") == "True" or (evicted.get("status") == "True" and evicted.get("reason") == "Preempted"):
        words.insert(
            0,
            f"preempted ({preempted.get('reason') or evicted.get('reason')}): {preempted.get('message') or evicted.get('message', '')}",
        )
    elif evicted.get("status") == "True":
        words.insert(0, f"evicted ({evicted.get('reason')}): {evicted.get('message', '')}")
    requeue = status.get("requeueState") or {}
    if requeue:
        words.append(
            f"requeued {requeue.get('count', 0)} time(s), next try at {requeue.get('requeueAt', 'once capacity frees')}"
        )
    # Kueue's figures, in GPUs; "?" where no ClusterQueue says (never the policy's instance counts)
    known = flavor in nominal
    limit = borrowing_limit.get(flavor or "")
    figures: dict[str, object] = {
        "used": in_use.get(team, {}).get(flavor, 0) if known else "?",
        "quota": nominal[flavor] if known else "?",
        "capacity": cohort_gpus[flavor] if known else "?",
        "in_use": sum(u.get(flavor, 0) for u in in_use.values()) if known else "?",
        "ceiling": nominal[flavor] + limit if known and limit is not None else "?",
    }
    return ObservedJob(
        state=WAITING,
        reason=_kueue_reason(message, preempted, evicted, figures, limit),
        backend_reason="; ".join(words),
        details=figures,
        **base,
    )


def _kueue_reason(
    message: str, preempted: Mapping, evicted: Mapping, figures: Mapping[str, object], borrowing_limit: int | None
) -> str:
    if "borrowing limit" in message:
        return "borrow_limit"
    if "maximum capacity" in message:
        return "too_large"
    if "insufficient unused quota" in message:
        used, quota = figures["used"], figures["quota"]
        if isinstance(quota, int) and isinstance(used, int) and used < quota:
            return "reclaiming"  # inside the nominal quota: Kueue reclaims from borrowers in the cohort
        return "share_at_limit" if borrowing_limit == 0 else "pool_full"
    if preempted.get("status") == "True" or evicted.get("status") == "True":
        return "preempted"
    if "doesn't exist" in message or "inactive" in message or "Inadmissible" in message:
        return "misconfigured"
    return "backend"


def _quantity(value: Any) -> int:
    """A Kubernetes quantity of whole devices ("8", 8); GPUs are never fractional."""
    return int(str(value))


def _cohort(queue: Mapping[str, Any]) -> str | None:
    """A ClusterQueue's cohort: ``cohortName`` in kueue.x-k8s.io/v1beta2 (what kubectl prints from
    Kueue 0.16 on), ``cohort`` in v1beta1."""
    spec = queue.get("spec", {})
    return spec.get("cohortName") or spec.get("cohort")
