"""Traces from a platform's own history: Slurm ``sacct``, AWS Batch job listings, Kueue Workloads.

Each importer turns finished jobs into ``TraceJob``s (times in seconds from the earliest
submission in the file) and skips, with a count, what cannot be replayed: jobs that never started
or have not ended, and Slurm job steps. Anything malformed is a ``GovernanceError`` naming the
line or record. docs/simulator.md documents the fields each one reads.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from gpu_governance_runtime.contract import TAG_CHECKPOINTABLE, TAG_INSTANCE_TYPE, TAG_INSTANCES

from constructs_lib.core.errors import GovernanceError, Problem
from .traces import TraceJob

SACCT_FIELDS = ("JobID", "Account", "QOS", "Submit", "Start", "End", "NNodes", "TimelimitRaw", "State")
SACCT_COMMAND = "sacct --allusers --allocations --parsable2 --format=" + ",".join(SACCT_FIELDS) + " -S START -E END"


@dataclass(frozen=True, kw_only=True)
class Imported:
    jobs: tuple[TraceJob, ...]
    skipped: int  # records that are not finished jobs (never started, still running, steps)


@dataclass(frozen=True, kw_only=True)
class ImportOptions:
    instance_type: str  # for records that do not name one
    priorities: Mapping[str, int]  # priority class (Slurm QoS suffix, Kueue priority class) -> priority
    checkpointable_teams: frozenset[str] = frozenset()


def _problem(where: str, wrong: str, value: Any, allowed: str) -> GovernanceError:
    return GovernanceError([Problem(path=where, wrong=wrong, value=value, allowed=allowed)])


def _relative(jobs: list[TraceJob], skipped: int) -> Imported:
    """Submit times from the earliest submission, so a month of history replays from zero."""
    start = min((job.submit_time for job in jobs), default=0.0)
    return Imported(jobs=tuple(replace(job, submit_time=job.submit_time - start) for job in sorted(jobs, key=lambda j: (j.submit_time, j.job_id))), skipped=skipped)


# --- Slurm sacct ------------------------------------------------------------------------------


def from_sacct(path: str | Path, options: ImportOptions) -> Imported:
    """``sacct --parsable2`` output with at least ``SACCT_FIELDS`` (any order, a header line).
    Account = team; QoS ``<team>.<class>`` gives the priority class; NNodes = instances (one
    HyperPod node is one instance); TimelimitRaw (minutes) = declared run time."""
    lines = _read_lines(path)
    header = lines[0].split("|") if lines else []
    missing = [f for f in SACCT_FIELDS if f not in header]
    if missing:
        raise _problem(f"{path}:1", "not sacct --parsable2 output with the needed fields", ",".join(missing) or "empty", f"the fields of: {SACCT_COMMAND}")
    jobs, skipped = [], 0
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        row = dict(zip(header, line.split("|")))
        if "." in row["JobID"] or row["Start"] in ("Unknown", "None", "") or row["End"] in ("Unknown", "None", ""):
            skipped += 1  # a job step, or a job that never ran or is still running
            continue
        where = f"{path}:{number}"
        try:
            submit, start, end = (_slurm_time(row[f]) for f in ("Submit", "Start", "End"))
            nodes = int(row["NNodes"])
            limit = None if row["TimelimitRaw"] in ("", "UNLIMITED", "Partition_Limit") else 60.0 * int(row["TimelimitRaw"])
        except ValueError as error:
            raise _problem(where, "unreadable sacct row", line, f"times as YYYY-MM-DDTHH:MM:SS, numeric NNodes and TimelimitRaw ({error})") from None
        if end <= start:
            skipped += 1  # cancelled at once: nothing to replay
            continue
        team = row["Account"]
        jobs.append(
            TraceJob(
                job_id=row["JobID"], team=team, submit_time=submit, duration=end - start, instance_type=options.instance_type,
                count=max(1, nodes), priority=_priority(row["QOS"].rpartition(".")[2], options, where),
                checkpointable=team in options.checkpointable_teams, max_run_time=limit,
            )
        )
    return _relative(jobs, skipped)


def _slurm_time(text: str) -> float:
    # sacct prints local time without a zone; run it with TZ=UTC (as the reclaim adapter does).
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def _priority(priority_class: str, options: ImportOptions, where: str) -> int:
    if priority_class in options.priorities:
        return options.priorities[priority_class]
    if not options.priorities:
        return 0
    raise _problem(f"{where}.priority_class", "unknown priority class", priority_class, f"one of {sorted(options.priorities)} (--priority CLASS=N)")


def _read_lines(path: str | Path) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise _problem(str(path), "cannot read the file", type(error).__name__, f"a readable text file ({error})") from None


def _read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _problem(str(path), "cannot read the JSON", type(error).__name__, f"a readable JSON file ({error})") from None


# --- AWS Batch --------------------------------------------------------------------------------


def from_batch(path: str | Path, options: ImportOptions) -> Imported:
    """The JSON of ``ListJobs`` / ``DescribeJobs`` or ``ListServiceJobs`` / ``DescribeServiceJob``
    responses: one response or a list of them (pages). Records with the same jobId are merged
    (a description completes a summary). Team = quotaShareName, else shareIdentifier; priority =
    schedulingPriority; instances and type from the gpu-governance tags the reclaim controller
    reads, else capacityUsage, nodeProperties.numNodes or 1; declared run time = the timeout."""
    document = _read_json(path)
    pages = document if isinstance(document, list) else [document]
    records: dict[str, dict[str, Any]] = {}
    for index, page in enumerate(pages):
        if not isinstance(page, dict):
            raise _problem(f"{path}[{index}]", "not a Batch response", type(page).__name__, "an object")
        listed = page.get("jobs", page.get("jobSummaryList", [page] if "jobId" in page else None))
        if not isinstance(listed, list):
            raise _problem(f"{path}[{index}]", "not a Batch response", sorted(page)[:5], "jobs, jobSummaryList, or a DescribeServiceJob object with jobId")
        for record in listed:
            if not isinstance(record, dict) or not record.get("jobId"):
                raise _problem(f"{path}[{index}]", "a job without jobId", str(record)[:80], "Batch job records")
            records.setdefault(record["jobId"], {}).update(record)
    jobs, skipped = [], 0
    for job_id, record in records.items():
        if not record.get("startedAt") or not record.get("stoppedAt"):
            skipped += 1
            continue
        where = f"{path}: job {job_id}"
        try:
            tags = record.get("tags") or {}
            team = record.get("quotaShareName") or record.get("shareIdentifier")
            if not team:
                raise ValueError("no quotaShareName or shareIdentifier")
            count = int(tags.get(TAG_INSTANCES) or _batch_instances(record))
            timeout = (record.get("timeout") or record.get("timeoutConfig") or {}).get("attemptDurationSeconds")
            start, stop = record["startedAt"] / 1000, record["stoppedAt"] / 1000
            jobs.append(
                TraceJob(
                    job_id=job_id, team=team, submit_time=record["createdAt"] / 1000, duration=stop - start,
                    instance_type=tags.get(TAG_INSTANCE_TYPE, options.instance_type), count=count,
                    priority=int(record.get("schedulingPriority", 0)),
                    checkpointable=tags.get(TAG_CHECKPOINTABLE, "").lower() == "true" or team in options.checkpointable_teams,
                    max_run_time=float(timeout) if timeout else None,
                )
            )
        except (KeyError, TypeError, ValueError) as error:
            raise _problem(where, "unreadable Batch job", str(error), "createdAt/startedAt/stoppedAt in ms, a share, numeric counts") from None
    return _relative([j for j in jobs if j.duration > 0], skipped + sum(1 for j in jobs if j.duration <= 0))


def _batch_instances(record: Mapping[str, Any]) -> int:
    for usage in record.get("capacityUsage") or ():
        if usage.get("capacityUnit", "").lower().endswith("instance") or usage.get("capacityUnit", "").lower().endswith("instances"):
            return math.ceil(usage["quantity"])
    return (record.get("nodeProperties") or {}).get("numNodes") or 1


# --- Kueue ------------------------------------------------------------------------------------


def from_kueue(path: str | Path, options: ImportOptions) -> Imported:
    """``kubectl get workloads -A -o json``: a List of Kueue Workloads (or one Workload). Team =
    the ClusterQueue it was admitted to; instances = pods of all pod sets; submit = creation;
    run = from the Admitted to the Finished condition; priority = spec.priority, else the
    priority class looked up in --priority; declared run time = spec.maximumExecutionTimeSeconds."""
    document = _read_json(path)
    items = document.get("items") if isinstance(document, dict) and document.get("kind", "").endswith("List") else [document]
    if not isinstance(items, list):
        raise _problem(str(path), "not a Workload list", type(items).__name__, "kubectl get workloads -o json output")
    jobs, skipped = [], 0
    for index, workload in enumerate(items):
        where = f"{path}: items[{index}]"
        try:
            if workload.get("kind") != "Workload":
                raise ValueError(f"kind {workload.get('kind')!r} is not Workload")
            metadata, spec, status = workload["metadata"], workload["spec"], workload.get("status") or {}
            conditions = {c["type"]: c for c in status.get("conditions") or ()}
            admitted, finished = conditions.get("Admitted"), conditions.get("Finished")
            if not admitted or not finished or finished.get("status") != "True" or "admission" not in status:
                skipped += 1
                continue
            start, end = _k8s_time(admitted["lastTransitionTime"]), _k8s_time(finished["lastTransitionTime"])
            priority = spec.get("priority")
            if priority is None:
                priority = _priority(spec.get("priorityClassName", ""), options, where)
            team = status["admission"]["clusterQueue"]
            limit = spec.get("maximumExecutionTimeSeconds")
            jobs.append(
                TraceJob(
                    job_id=f"{metadata.get('namespace', 'default')}/{metadata['name']}", team=team,
                    submit_time=_k8s_time(metadata["creationTimestamp"]), duration=end - start, instance_type=options.instance_type,
                    count=sum(int(pod_set.get("count", 1)) for pod_set in spec["podSets"]), priority=int(priority),
                    checkpointable=team in options.checkpointable_teams, max_run_time=float(limit) if limit else None,
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise _problem(where, "unreadable Workload", str(error), "a kueue.x-k8s.io Workload with metadata, spec.podSets, status") from None
    return _relative([j for j in jobs if j.duration > 0], skipped + sum(1 for j in jobs if j.duration <= 0))


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
