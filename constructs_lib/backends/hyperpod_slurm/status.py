"""How `gpu-governance status` reads a team's use of a ``hyperpod_slurm`` pool: from `squeue`, run
here or given as a file."""

from __future__ import annotations

import argparse
import os

from constructs_lib.cli.status import text_of
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.status import timestamp
from constructs_lib.member.waiting import RUNNING, WAITING, Observation, ObservedJob
from gpu_governance_runtime.policy import PoolPolicy
from gpu_governance_runtime.slurm.plan import BORROW_PARTITION, borrow_qos_name

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
                submitted_at=timestamp(submitted if submitted[:1].isdigit() else None),
                reason=code if state == "PENDING" else None,
                backend_reason=f"{reason}: {words} (partition {partition}, QoS {qos})" if state == "PENDING" else "",
                details=details,
            )
        )
    return Observation(backend=pool.backend, pool=pool.name, unit="nodes", in_use=in_use, jobs=tuple(jobs))


def read(args: argparse.Namespace, pool, model) -> Observation:
    text = text_of(
        args.squeue, "--squeue", SQUEUE_COMMAND, env={**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    )
    try:
        return slurm_observation(text, pool, args.team)
    except ValueError as error:
        raise GovernanceError.single(
            "--squeue", "not the squeue output status reads", str(error)[:200], "see docs/status.md"
        ) from None
