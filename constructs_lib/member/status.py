"""One small reader per backend for `gpu-governance status`: each turns what the backend shows a
team member into a :class:`constructs_lib.member.waiting.Observation`. Only the Batch reader calls AWS;
the HyperPod EKS and Slurm readers parse the text `kubectl` and `squeue` print.

Batch (quota-share queue ``pool.name``), with the team's submission role, calls exactly:
``batch:GetJobQueueSnapshot`` (the queue), ``batch:ListServiceJobs`` (per status, filtered by
the team's quota share), ``batch:DescribeServiceJob`` (the team's waiting and running jobs, and
``--job``) and, for a team with a GPU-hour limit, ``batch:ListQuotaShares`` (the queue: whether the
reclaim controller disabled the team's share at its limit, reclaim/gpu_hours.py). A running job's training plan is the ``ResourceConfig.TrainingPlanArn`` of the
CreateTrainingJob request Batch holds for it (``serviceRequestPayload``), which SageMaker runs the
job on (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceConfig.html).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from constructs_lib.hyperpod_eks import kubernetes
from constructs_lib.member.waiting import RUNNING, WAITING, Observation, ObservedJob
from gpu_governance_runtime.policy import PoolPolicy
from gpu_governance_runtime.reclaim.adapters import job_id_of, service_job_size, service_job_time_limit
from gpu_governance_runtime.slurm.plan import BORROW_PARTITION, borrow_qos_name

# --- AWS Batch quota share -------------------------------------------------------------------------

BATCH_CALLS = (
    "batch:GetJobQueueSnapshot",
    "batch:ListServiceJobs",
    "batch:DescribeServiceJob",
    "batch:ListQuotaShares",
)
BATCH_ACTIVE = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")
BATCH_RUNNING = ("SCHEDULED", "STARTING", "RUNNING")
BATCH_DESCRIBED = (
    50  # waiting jobs described for their priority (running ones for their plan); more are shown by listing order
)


def batch_observation(
    batch: Any,
    pool: PoolPolicy,
    team: str,
    job_id: str | None = None,
    training_plans: Sequence[Mapping[str, str]] | None = None,
) -> Observation:
    """``training_plans``: the team's active plans as its training plans parameter lists them
    (None: not read), against which each running job's plan is told."""
    snapshot = batch.get_job_queue_snapshot(jobQueue=pool.name)
    in_use: dict[str, dict[str, int]] = {}
    for entry in (
        snapshot.get("queueUtilization", {}).get("quotaShareUtilization", {}).get("topCapacityUtilization", [])
    ):
        for usage in entry.get("capacityUsage", []):
            in_use.setdefault(entry["quotaShareName"], {})[usage["capacityUnit"]] = int(usage["quantity"])
    front = {
        job_id_of(f["jobArn"])
        for f in snapshot.get("frontOfQuotaShares", {}).get("quotaShares", {}).get(team, [])
        if f.get("jobArn")
    }
    share = next(s for s in pool.shares if s.name == team)
    # a disabled share starts no job: with a limit, the reclaim controller's doing (or the team is paused)
    admission_off = share.gpu_hour_limit is not None and any(
        q.get("state") == "DISABLED"
        for page in batch.get_paginator("list_quota_shares").paginate(jobQueue=pool.name)
        for q in page.get("quotaShares") or []
        if q.get("quotaShareName") == team
    )
    summaries: dict[str, dict] = {}
    for status in BATCH_ACTIVE:
        pages = batch.get_paginator("list_service_jobs").paginate(
            jobQueue=pool.name, jobStatus=status, filters=[{"name": "QUOTA_SHARE_NAME", "values": [team]}]
        )
        for page in pages:
            for summary in page["jobSummaryList"]:
                summaries.setdefault(summary["jobId"], summary)  # newest first: a job can repeat across pages
    if job_id is not None and job_id not in summaries:
        summaries[job_id] = batch.describe_service_job(jobId=job_id)
    waiting = sorted(
        (s for s in summaries.values() if s.get("status") == "RUNNABLE"),
        key=lambda s: (s["jobId"] not in front, s.get("createdAt", 0)),
    )
    running = [s for s in summaries.values() if s.get("status") in BATCH_RUNNING]  # described for their training plan
    details = {
        s["jobId"]: batch.describe_service_job(jobId=s["jobId"])
        for s in waiting[:BATCH_DESCRIBED] + running[:BATCH_DESCRIBED]
        if "serviceRequestPayload" not in s
    }
    jobs = tuple(
        _batch_job({**summary, **details.get(summary["jobId"], {})}, pool, team, front)
        for summary in summaries.values()
    )
    notes = (
        (f"{len(waiting) - BATCH_DESCRIBED} more waiting jobs not described: their priority is not known",)
        if len(waiting) > BATCH_DESCRIBED
        else ()
    )
    if len(running) > BATCH_DESCRIBED:
        notes += (
            f"{len(running) - BATCH_DESCRIBED} more running jobs not described: their training plan is not known",
        )
    if job_id is not None:
        jobs = tuple(j for j in jobs if j.job_id == job_id or j.state == WAITING)
    return Observation(
        backend=pool.backend,
        pool=pool.name,
        unit="instances",
        in_use=in_use,
        jobs=jobs,
        notes=notes,
        training_plans=None if training_plans is None else tuple(training_plans),
        admission_off=admission_off,
    )


def _batch_job(job: Mapping[str, Any], pool: PoolPolicy, team: str, front: set[str]) -> ObservedJob:
    size = service_job_size(dict(job), pool.capacity)
    status = job.get("status", "")
    reason_text = job.get("statusReason", "")
    state = RUNNING if status in BATCH_RUNNING else WAITING if status == "RUNNABLE" else status
    # Batch states a blocked queue head: MISCONFIGURATION:* never runs as is; CAPACITY:* waits on SageMaker capacity.
    code = (
        "misconfigured"
        if reason_text.startswith("MISCONFIGURATION:")
        else "backend"
        if reason_text.startswith("CAPACITY:")
        else None
    )
    if state == WAITING and code is None and job["jobId"] in front:
        reason_text = reason_text or "front of the team's quota share"
    return ObservedJob(
        job_id=job["jobId"],
        name=job.get("jobName", ""),
        team=job.get("quotaShareName", team),
        state=state,
        instance_type=size[0] if size else None,
        count=size[1] if size else 0,
        priority=int(job.get("schedulingPriority", 0)),
        priority_known="schedulingPriority" in job,
        submitted_at=job.get("createdAt", 0) / 1000,
        reason=code if state == WAITING else None,
        backend_reason=reason_text,
        training_plan=_training_plan(job.get("serviceRequestPayload")),
        started_at=job["startedAt"] / 1000 if job.get("startedAt") and state == RUNNING else None,
        run_time_s=service_job_time_limit(dict(job)),
    )


def _training_plan(payload: str | None) -> str | None:
    """The ``ResourceConfig.TrainingPlanArn`` of a service job's CreateTrainingJob request (None: on demand, or not described)."""
    try:
        return (json.loads(payload or "{}").get("ResourceConfig") or {}).get("TrainingPlanArn")
    except (ValueError, AttributeError):
        return None  # not a SageMaker request as Batch holds it: nothing to tell


# --- HyperPod EKS: Kueue Workloads and ClusterQueues (kueue.x-k8s.io/v1beta1) -------------------------

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
        (q.get("spec", {}).get("cohort") for q in queues if q["metadata"]["name"] == kubernetes.cluster_queue(team)),
        None,
    )
    for queue in queues:
        name = queue["metadata"]["name"]
        share = kubernetes.cluster_queue_team(name)
        if name != kubernetes.cluster_queue(team) and (cohort is None or queue.get("spec", {}).get("cohort") != cohort):
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
        submitted_at=_timestamp(meta.get("creationTimestamp")),
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


def _timestamp(text: str | None) -> float:
    if not text:
        return 0.0
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()  # squeue runs with TZ=UTC


# --- Slurm: squeue ----------------------------------------------------------------------------------

# Every job of the cluster (use of the pool needs the other teams' jobs too), one line per array task.
SQUEUE_FORMAT = "%i|%j|%a|%q|%T|%D|%P|%Q|%V|%r"
SQUEUE_COMMAND = ("squeue", "--noheader", "--array", "--states=PENDING,RUNNING", "-o", SQUEUE_FORMAT)
# Slurm's pending reason -> (REASONS code, or None: decide from the numbers; plain words).
SLURM_REASONS: dict[str, tuple[str | None, str]] = {
    "None": (None, "just submitted, not scheduled yet"),
    "Resources": (None, "no free node in its partition"),
    "Priority": ("backend", "jobs of higher priority are ahead of it in its partition"),
    "QOSGrpGRES": (None, "its QoS's GPU limit for all its jobs is reached"),
    "QOSMaxGRESPerUser": ("backend", "you hold the most GPUs one user may under this QoS"),
    "QOSMaxGRESPerJob": ("misconfigured", "asks for more GPUs than one job may under this QoS"),
    "QOSGrpNodeLimit": ("share_at_limit", "its QoS's node limit for all its jobs is reached"),
    "QOSMaxJobsPerUserLimit": ("backend", "you run the most jobs one user may under this QoS"),
    # The library sets GrpTRES on a group's account and, with user_limits.max_gpus, on each member's association.
    "AssocGrpGRES": (
        "share_at_limit",
        "your group's GPU limit, or the GPUs one member may hold (user_limits), is reached",
    ),
    "AssocGrpNodeLimit": ("share_at_limit", "your account's node limit is reached"),
    # MaxJobs is set only on members' associations (user_limits.max_running_jobs).
    "AssocMaxJobsLimit": ("backend", "you run the most jobs one member of your team may (user_limits)"),
    "AssocGrpGRESMinutes": ("gpu_hour_limit", "your account's GPU minutes (GrpTRESMins) would be passed"),
    "AssocGrpJobsLimit": ("paused", "your account may start no job (GrpJobs=0: the team is paused)"),
    "JobHeldUser": ("held", "held by its owner (scontrol release)"),
    "JobHeldAdmin": ("held", "held by an administrator"),
    "Dependency": ("dependency", "waits for the jobs it depends on"),
    "DependencyNeverSatisfied": ("misconfigured", "a job it depends on failed: it will never start"),
    "BeginTime": ("begin_time", "its begin time has not come"),
    "ReqNodeNotAvail": ("backend", "nodes it needs are down, drained or reserved"),
    "PartitionNodeLimit": ("misconfigured", "asks for more nodes than its partition allows"),
    "PartitionTimeLimit": ("misconfigured", "asks for more time than its partition allows"),
    "InvalidAccount": ("misconfigured", "its account is not valid"),
    "InvalidQOS": ("misconfigured", "its QoS is not valid"),
    "QOSNotAllowed": ("misconfigured", "its account may not use that QoS"),
    "Reservation": ("backend", "waits for its reservation to start"),
}


def slurm_observation(text: str, pool: PoolPolicy, team: str) -> Observation:
    """``text``: the output of :data:`SQUEUE_COMMAND` (``TZ=UTC SLURM_TIME_FORMAT=standard``). A
    team's nodes are counted as instances of the pool's only instance type."""
    (instance_type,) = pool.capacity if len(pool.capacity) == 1 else (None,)
    shares = {s.name for s in pool.shares}
    in_use: dict[str, dict[str, int]] = {}
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.strip().split("|")
        if len(parts) != 10:
            raise ValueError(f"squeue line {number}: {line!r} - expected the 10 fields of {SQUEUE_FORMAT!r}")
        job_id, name, account, qos, state, nodes, partition, priority, submitted, reason = parts
        if account not in shares:
            continue
        if state == "RUNNING" and instance_type:
            in_use.setdefault(account, {})[instance_type] = in_use.get(account, {}).get(instance_type, 0) + int(nodes)
        if account != team:
            continue
        code, words = SLURM_REASONS.get(reason, ("backend", reason))
        details = {}
        if reason == "QOSGrpGRES":  # the generated QoS: only a team's borrow QoS carries a GPU limit (its borrow limit)
            code = "borrow_limit" if qos == borrow_qos_name(team) else "share_at_limit"
            details = {"limit": f"the GPUs its borrow QoS {qos} allows (GrpTRES) are all in use"}
        elif partition == team:  # the generated mapping: the team's own partition, its own nodes only (docs/slurm.md)
            details = {
                "own_partition": partition,
                "borrow_partition": BORROW_PARTITION,
                "borrow_qos": borrow_qos_name(team),
            }
        jobs.append(
            ObservedJob(
                job_id=job_id,
                name=name,
                team=account,
                state=RUNNING if state == "RUNNING" else WAITING if state == "PENDING" else state,
                instance_type=instance_type,
                count=int(nodes),
                priority=int(priority),
                submitted_at=_timestamp(submitted if submitted[:1].isdigit() else None),
                reason=code if state == "PENDING" else None,
                backend_reason=f"{reason}: {words} (partition {partition}, QoS {qos})" if state == "PENDING" else "",
                details=details,
            )
        )
    return Observation(backend=pool.backend, pool=pool.name, unit="nodes", in_use=in_use, jobs=tuple(jobs))


def read_json(text: str, what: str) -> Mapping[str, Any]:
    document = json.loads(text)
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        raise ValueError(f"{what}: not a Kubernetes list (`kubectl get ... -o json` prints one with items)")
    return document
