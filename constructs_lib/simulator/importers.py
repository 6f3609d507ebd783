"""Traces from a platform's own history: Slurm ``sacct``, AWS Batch job listings, Kueue Workloads.

Each importer turns finished jobs into ``TraceJob``s (times in seconds from the earliest
submission in the file). What it cannot replay it skips, and what the record does not say it
guesses, and ``Imported`` names both, by reason: jobs that never started or have not ended, Slurm
job steps, a priority class ``--priority`` does not map, a record without a team; an instance type
or count, priority or team taken from a default. Anything malformed is a ``GovernanceError``
naming the line or record. docs/simulator.md documents the fields each one reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from constructs_lib.backends import BACKENDS
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.wording import counted
from gpu_governance_runtime.common.batch_copy import restartable
from gpu_governance_runtime.common.batch_jobs import service_job_usage
from gpu_governance_runtime.contract import GPU_RESOURCE, TAG_CHECKPOINTABLE, TAG_INSTANCE_TYPE, TAG_INSTANCES

from .traces import TraceJob

SACCT_FIELDS = ("JobID", "Account", "QOS", "Submit", "Start", "End", "NNodes", "TimelimitRaw", "State")
SACCT_COMMAND = "sacct --allusers --allocations --parsable2 --format=" + ",".join(SACCT_FIELDS) + " -S START -E END"


NOT_FINISHED = "not a finished job"
NAMED = 5  # record names a warning lists per reason; the count says how many more


@dataclass(frozen=True, kw_only=True)
class Imported:
    jobs: tuple[TraceJob, ...]
    skipped: Mapping[str, tuple[str, ...]]  # why -> the records left out
    guessed: Mapping[str, tuple[str, ...]]  # what was taken from a default -> the records imported so

    def warning(self) -> str:
        """One line: how many records were skipped and guessed, why, and which."""
        parts = []
        for verb, reasons in (("skipped", self.skipped), ("guessed", self.guessed)):
            if reasons:
                total = sum(len(names) for names in reasons.values())
                parts.append(
                    f"{verb} {counted(total, 'record')}: "
                    + "; ".join(f"{len(names)} {why} [{_names(names)}]" for why, names in reasons.items())
                )
        return "; ".join(parts)


def _names(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown if len(names) <= NAMED else f"{shown} and {len(names) - NAMED} more"


class _Findings:
    """The records an importer skipped or guessed, by reason, in file order."""

    def __init__(self) -> None:
        self.skipped: dict[str, list[str]] = {}
        self.guessed: dict[str, list[str]] = {}

    def skip(self, why: str, record: str) -> None:
        self.skipped.setdefault(why, []).append(record)

    def guess(self, what: str, record: str) -> None:
        self.guessed.setdefault(what, []).append(record)

    def default_type(self, options: ImportOptions, record: str) -> str:
        """--instance-type, for a record that names no instance type."""
        self.guess(f"instance type {options.instance_type} (--instance-type)", record)
        return options.instance_type

    def imported(self, jobs: list[TraceJob]) -> Imported:
        """Submit times from the earliest submission, so a month of history replays from zero;
        a job that ran for no time has nothing to replay."""
        dropped = {job.job_id for job in jobs if job.duration <= 0}
        for job_id in sorted(dropped):
            self.skip(NOT_FINISHED, job_id)
        kept = [job for job in jobs if job.job_id not in dropped]
        start = min((job.submit_time for job in kept), default=0.0)
        return Imported(
            jobs=tuple(
                replace(job, submit_time=job.submit_time - start)
                for job in sorted(kept, key=lambda j: (j.submit_time, j.job_id))
            ),
            skipped={why: tuple(names) for why, names in self.skipped.items()},
            guessed={
                what: tuple(n for n in names if n not in dropped)
                for what, names in self.guessed.items()
                if set(names) - dropped
            },
        )


@dataclass(frozen=True, kw_only=True)
class ImportOptions:
    instance_type: str  # for records that do not name one
    priorities: Mapping[str, int]  # priority class (Slurm QoS suffix, Kueue priority class) -> priority
    checkpointable_teams: frozenset[str] = frozenset()


def _problem(where: str, wrong: str, value: Any, allowed: str) -> GovernanceError:
    return GovernanceError([Problem(path=where, wrong=wrong, value=value, allowed=allowed)])


# --- Slurm sacct ------------------------------------------------------------------------------

UNSET = ("Unknown", "None", "")  # what sacct prints for a time it does not have


def from_sacct(path: str | Path, options: ImportOptions) -> Imported:
    """``sacct --parsable2`` output with at least ``SACCT_FIELDS`` (any order, a header line).
    Account = team; QoS ``<team>.<class>`` gives the priority class; NNodes = instances (one
    HyperPod node is one instance) of --instance-type (sacct names none, so every row says it
    was guessed); TimelimitRaw (minutes) = declared run time. sacct prints QoS
    ``Unknown`` for a job whose QoS id slurmdbd does not know (a QoS deleted since, a record
    written while slurmdbd restarted, or read before slurmdbd has it): such a row is skipped and
    named unless ``--priority Unknown=N`` maps it, like any class --priority does not name."""
    lines = _read_lines(path)
    header = lines[0].split("|") if lines else []
    missing = [f for f in SACCT_FIELDS if f not in header]
    if missing:
        raise _problem(
            f"{path}:1",
            "not sacct --parsable2 output with the needed fields",
            ",".join(missing) or "empty",
            f"the fields of: {SACCT_COMMAND}",
        )
    findings, jobs = _Findings(), []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        row = dict(zip(header, line.split("|"), strict=False))
        job_id = row["JobID"]
        if "." in job_id:
            findings.skip("job step (sacct --allocations leaves them out)", job_id)
            continue
        if row["Start"] in UNSET or row["End"] in UNSET:
            findings.skip(NOT_FINISHED, job_id)  # never ran, or still running
            continue
        where = f"{path}:{number}"
        try:
            submit, start, end = (_slurm_time(row[f]) for f in ("Submit", "Start", "End"))
            nodes = int(row["NNodes"])
            limit = (
                None if row["TimelimitRaw"] in ("", "UNLIMITED", "Partition_Limit") else 60.0 * int(row["TimelimitRaw"])
            )
        except ValueError as error:
            raise _problem(
                where,
                "unreadable sacct row",
                line,
                f"times as YYYY-MM-DDTHH:MM:SS, numeric NNodes and TimelimitRaw ({error})",
            ) from None
        team = row["Account"]
        if not team:
            findings.skip("without an account", job_id)
            continue
        priority_class = row["QOS"].rpartition(".")[2]
        priority = _priority(priority_class, options)
        if priority is None:
            findings.skip(_unmapped(priority_class), job_id)
            continue
        jobs.append(
            TraceJob(
                job_id=job_id,
                team=team,
                submit_time=submit,
                duration=end - start,
                instance_type=findings.default_type(options, job_id),
                count=max(1, nodes),
                priority=priority,
                checkpointable=team in options.checkpointable_teams,
                max_run_time=limit,
            )
        )
    return findings.imported(jobs)


def _slurm_time(text: str) -> float:
    # sacct prints local time without a zone; run it with TZ=UTC (as the reclaim adapter does).
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _priority(priority_class: str, options: ImportOptions) -> int | None:
    """The class's priority from --priority; 0 for every class when none is given; None when
    --priority maps other classes but not this one (the record cannot be classified)."""
    if not options.priorities:
        return 0
    return options.priorities.get(priority_class)


def _unmapped(priority_class: str) -> str:
    return (
        f"with priority class {priority_class!r} that --priority does not map (map it: --priority {priority_class}=N)"
    )


def _read_lines(path: str | Path) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise _problem(
            str(path), "cannot read the file", type(error).__name__, f"a readable text file ({error})"
        ) from None


def _read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _problem(
            str(path), "cannot read the JSON", type(error).__name__, f"a readable JSON file ({error})"
        ) from None


# --- AWS Batch --------------------------------------------------------------------------------


def from_batch(path: str | Path, options: ImportOptions) -> Imported:
    """The JSON of ``ListJobs`` / ``DescribeJobs`` or ``ListServiceJobs`` / ``DescribeServiceJob``
    responses: one response or a list of them (pages). Records with the same jobId are merged
    (a description completes a summary). Team = quotaShareName, else shareIdentifier; priority =
    schedulingPriority (descriptions only); instance type and count from the gpu-governance tags,
    else what Batch records (:func:`_batch_size`); declared run time = the timeout; restartable as
    the reclaim controller decides it (``batch_copy.restartable``): not an array job
    (``arrayProperties``), not a multi-container job (``ecsProperties``), not named in another
    record's ``dependsOn``."""
    document = _read_json(path)
    pages = document if isinstance(document, list) else [document]
    records: dict[str, dict[str, Any]] = {}
    for index, page in enumerate(pages):
        if not isinstance(page, dict):
            raise _problem(f"{path}[{index}]", "not a Batch response", type(page).__name__, "an object")
        listed = page.get("jobs", page.get("jobSummaryList", [page] if "jobId" in page else None))
        if not isinstance(listed, list):
            raise _problem(
                f"{path}[{index}]",
                "not a Batch response",
                sorted(page)[:5],
                "jobs, jobSummaryList, or a DescribeServiceJob object with jobId",
            )
        for record in listed:
            if not isinstance(record, dict) or not record.get("jobId"):
                raise _problem(f"{path}[{index}]", "a job without jobId", str(record)[:80], "Batch job records")
            records.setdefault(record["jobId"], {}).update(record)
    waited_on = {
        d.get("jobId") for record in records.values() for d in record.get("dependsOn") or () if isinstance(d, dict)
    }
    findings, jobs = _Findings(), []
    for job_id, record in records.items():
        if not record.get("startedAt") or not record.get("stoppedAt"):
            findings.skip(NOT_FINISHED, job_id)
            continue
        team = record.get("quotaShareName") or record.get("shareIdentifier")
        if not team:
            findings.skip("without a share (no quotaShareName or shareIdentifier)", job_id)
            continue
        try:
            tags = record.get("tags") or {}
            instance_type, count = _batch_size(job_id, record, tags, options, findings)
            if "schedulingPriority" not in record:  # listings carry none; DescribeJobs / DescribeServiceJob do
                findings.guess("priority 0 (no schedulingPriority: add the Describe responses)", job_id)
            timeout = (record.get("timeout") or record.get("timeoutConfig") or {}).get("attemptDurationSeconds")
            start, stop = record["startedAt"] / 1000, record["stoppedAt"] / 1000
            jobs.append(
                TraceJob(
                    job_id=job_id,
                    team=team,
                    submit_time=record["createdAt"] / 1000,
                    duration=stop - start,
                    instance_type=instance_type,
                    count=count,
                    priority=int(record.get("schedulingPriority", 0)),
                    checkpointable=tags.get(TAG_CHECKPOINTABLE, "").lower() == "true"
                    or team in options.checkpointable_teams,
                    max_run_time=float(timeout) if timeout else None,
                    restartable=restartable(record, waited_on) is None,
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise _problem(
                f"{path}: job {job_id}",
                "unreadable Batch job",
                str(error),
                "createdAt/startedAt/stoppedAt in ms, numeric counts",
            ) from None
    return findings.imported(jobs)


def _batch_size(
    job_id: str, record: Mapping[str, Any], tags: Mapping[str, str], options: ImportOptions, findings: _Findings
) -> tuple[str, int]:
    """Instance type and count: the gpu-governance tags (the reclaim controller's), else what the
    record says as the reclaim controller reads it (``service_job_usage``): a service job's
    capacityUsage is in its instance type (older records: NUM_INSTANCES, a count only) and
    DescribeServiceJob carries the training job's ResourceConfig; a multi-node job's numNodes is
    its instance count. Compute jobs' capacityUsage is in vCPUs or cpu and says neither.
    https://docs.aws.amazon.com/batch/latest/APIReference/API_ServiceJobCapacityUsageSummary.html
    https://docs.aws.amazon.com/batch/latest/APIReference/API_JobCapacityUsageSummary.html"""
    usage = service_job_usage(record)
    typed = next(
        ((unit, n) for unit, n in usage if "." in unit), None
    )  # ml.p5.48xlarge, never VCPU, cpu or NUM_INSTANCES
    counted = next((n for unit, n in usage if unit.upper() == "NUM_INSTANCES"), None)
    instance_type = tags.get(TAG_INSTANCE_TYPE) or (typed[0] if typed else None)
    count = (
        tags.get(TAG_INSTANCES)
        or (typed[1] if typed else counted)
        or (record.get("nodeProperties") or {}).get("numNodes")
    )
    if count is None:
        findings.guess("instance count 1", job_id)
    return instance_type or findings.default_type(options, job_id), int(count or 1)


# --- Kueue ------------------------------------------------------------------------------------


def from_kueue(path: str | Path, options: ImportOptions) -> Imported:
    """``kubectl get workloads -A -o json``: a List of Kueue Workloads (or one Workload). Team =
    the one whose ClusterQueue admitted it, else whose namespace it is in, as a backend that runs
    Kueue names them (its ``kueue`` module; task governance's ``hyperpod-ns-<team>-clusterqueue``
    and ``hyperpod-ns-<team>``); instance type = the ResourceFlavor
    admission assigned its GPUs (task governance names each flavor after its instance type, as the
    reclaim controller reads ClusterQueues in backends/kueue_usage.py);
    instances = pods admitted, over all pod sets; submit = creation; run = from the Admitted to
    the Finished condition; priority = spec.priority, else the priority class looked up in
    --priority, else 0; declared run time = spec.maximumExecutionTimeSeconds. Fields as
    kueue.x-k8s.io/v1beta1 Workload (apis/kueue/v1beta1/workload_types.go)."""
    document = _read_json(path)
    items = (
        document.get("items")
        if isinstance(document, dict) and document.get("kind", "").endswith("List")
        else [document]
    )
    if not isinstance(items, list):
        raise _problem(str(path), "not a Workload list", type(items).__name__, "kubectl get workloads -o json output")
    findings, jobs = _Findings(), []
    for index, workload in enumerate(items):
        where = f"{path}: items[{index}]"
        try:
            if workload.get("kind") != "Workload":
                raise ValueError(f"kind {workload.get('kind')!r} is not Workload")
            metadata, spec, status = workload["metadata"], workload["spec"], workload.get("status") or {}
            job_id = f"{metadata.get('namespace', 'default')}/{metadata['name']}"
            conditions = {c["type"]: c for c in status.get("conditions") or ()}
            admitted, finished = conditions.get("Admitted"), conditions.get("Finished")
            if not admitted or not finished or finished.get("status") != "True" or not status.get("admission"):
                findings.skip(NOT_FINISHED, job_id)
                continue
            start, end = _k8s_time(admitted["lastTransitionTime"]), _k8s_time(finished["lastTransitionTime"])
            priority = spec.get("priority")
            if priority is None:
                priority_class = spec.get("priorityClassName")
                priority = _priority(priority_class, options) if priority_class else 0  # Kueue: no class, priority 0
                if priority is None:
                    findings.skip(_unmapped(priority_class), job_id)
                    continue
            admission = status["admission"]
            queue = admission["clusterQueue"]
            team = _kueue_team(queue) or _kueue_team(metadata.get("namespace", ""))
            if team is None:
                named = " or ".join(f"{n.cluster_queue('<team>')} / {n.namespace('<team>')}" for n in _kueue_names())
                findings.guess(f"team = ClusterQueue name (neither it nor the namespace is {named})", job_id)
            assigned = {a.get("name", "main"): a for a in admission.get("podSetAssignments") or ()}
            limit = spec.get("maximumExecutionTimeSeconds")
            jobs.append(
                TraceJob(
                    job_id=job_id,
                    team=team or queue,
                    submit_time=_k8s_time(metadata["creationTimestamp"]),
                    duration=end - start,
                    instance_type=_kueue_instance_type(job_id, list(assigned.values()), options, findings),
                    count=sum(
                        int(assigned.get(p.get("name", "main"), {}).get("count", p.get("count", 1)))
                        for p in spec["podSets"]
                    ),
                    priority=int(priority),
                    checkpointable=(team or queue) in options.checkpointable_teams,
                    max_run_time=float(limit) if limit else None,
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise _problem(
                where,
                "unreadable Workload",
                str(error),
                "a kueue.x-k8s.io Workload with metadata, spec.podSets, status",
            ) from None
    return findings.imported(jobs)


def _kueue_names() -> list:
    """The ``kueue`` modules of the backends whose pools schedule with Kueue: how they name a team's objects."""
    return [names for backend in BACKENDS.values() if (names := backend.part("kueue")) is not None]


def _kueue_team(name: str) -> str | None:
    """The team whose ClusterQueue or namespace ``name`` is, on any backend that runs Kueue."""
    return next((team for names in _kueue_names() if (team := names.team_named(name))), None)


def _kueue_instance_type(
    job_id: str, assignments: list[Mapping[str, Any]], options: ImportOptions, findings: _Findings
) -> str:
    """The flavor admission assigned the GPUs (a pod set without GPUs: its one flavor)."""
    flavors = []
    for assignment in assignments:
        assigned = assignment.get("flavors") or {}
        flavor = assigned.get(GPU_RESOURCE) or (
            next(iter(set(assigned.values()))) if len(set(assigned.values())) == 1 else None
        )
        if flavor and flavor not in flavors:
            flavors.append(flavor)
    if not flavors:
        return findings.default_type(options, job_id)
    if len(flavors) > 1:
        findings.guess(f"instance type of its first pod set (pod sets on flavors {', '.join(flavors)})", job_id)
    return flavors[0]


def _k8s_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def priorities(pairs: Iterable[str]) -> dict[str, int]:
    """``--priority CLASS=N`` options."""
    result = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            result[name] = int(value)
        except ValueError:
            raise _problem("--priority", "not CLASS=N", pair, "a priority class name, =, an integer") from None
    return result
