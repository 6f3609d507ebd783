"""How `gpu-governance status` reads a team's use of a ``hyperpod_eks`` pool: from `kubectl get
workloads -n hyperpod-ns-TEAM -o json` and `kubectl get clusterqueues -o json`, run here or given
as files (Kueue's Workloads and ClusterQueues, kueue.x-k8s.io/v1beta1)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import Any

from constructs_lib.cli.status import Unreadable, text_of
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.status import read_json, timestamp
from constructs_lib.member.waiting import RUNNING, WAITING, Observation, ObservedJob
from gpu_governance_runtime.policy import PoolPolicy

from . import kueue

GPU = "nvidia.com/gpu"
_FLAVOR = re.compile(r"in flavor ([^,\s]+)")


def kueue_observation(
    workloads: Mapping[str, Any], cluster_queues: Mapping[str, Any] | None, pool: PoolPolicy, team: str
) -> Observation:
    """``workloads``: `kubectl get workloads -n hyperpod-ns-<team> -o json`; ``cluster_queues``:
    `kubectl get clusterqueues -o json` (optional: without it, use and quota are not shown)."""
    in_use: dict[str, dict[str, int]] = {}
    nominal: dict[str, dict[str, int]] = {}  # cluster queue's share -> flavor -> GPUs
    borrowing_limit: dict[str, int | None] = {}
    queues = (cluster_queues or {}).get("items", [])
    cohort = next(
        (q.get("spec", {}).get("cohort") for q in queues if q["metadata"]["name"] == kueue.cluster_queue(team)),
        None,
    )
    for queue in queues:
        name = queue["metadata"]["name"]
        share = kueue.cluster_queue_team(name)
        if name != kueue.cluster_queue(team) and (cohort is None or queue.get("spec", {}).get("cohort") != cohort):
            continue  # only the team's cohort shares its capacity
        for flavor in queue.get("status", {}).get("flavorsUsage", []):
            for resource in flavor.get("resources", []):
                if resource["name"] == GPU:
                    in_use.setdefault(share, {})[flavor["name"]] = _quantity(resource.get("total", 0))
        for group in queue.get("spec", {}).get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                for resource in flavor.get("resources", []):
                    if resource["name"] == GPU:
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
            _quantity(c.get("resources", {}).get("requests", {}).get(GPU, 0))
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


def read(args: argparse.Namespace, pool, model) -> Observation:
    namespace = kueue.namespace(args.team)
    workloads = text_of(args.workloads, "--workloads", ("kubectl", "get", "workloads", "-n", namespace, "-o", "json"))
    try:
        queues = text_of(args.cluster_queues, "--cluster-queues", ("kubectl", "get", "clusterqueues", "-o", "json"))
    except Unreadable:
        queues = None  # cluster-scoped: a namespace-level member may not list them; the jobs still explain
    try:
        return kueue_observation(
            read_json(workloads, "workloads"), queues and read_json(queues, "cluster queues"), pool, args.team
        )
    except (ValueError, KeyError, TypeError) as error:
        raise GovernanceError.single(
            "--workloads/--cluster-queues",
            "not Kueue v1beta1 objects as kubectl prints them",
            str(error)[:200],
            "`kubectl get workloads|clusterqueues -o json` output",
        ) from None
