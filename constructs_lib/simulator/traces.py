"""Job traces for the simulator: the project's CSV format, and a converter from the Alibaba
"openb" GPU-cluster traces (alibaba/clusterdata, cluster-trace-gpu-v2023).

Trace format, header exactly::

    job_id,team,submit_time,duration,instance_type,count,priority,checkpointable

Times in seconds (floats allowed), ``count`` whole instances, ``priority`` an integer (higher is
more urgent), ``checkpointable`` true/false. Optional last columns: ``max_run_time``, the
declared run-time limit in seconds (empty: none declared), then ``restartable``, true/false
(empty: true): false for a job the reclaim controller could not bring back as it was once stopped
(``RunningJob.restartable``: a Batch array job, a job others depend on, a multi-container job):
it counts against its team's quota first, and a reclaim stops it for good. The importers write both.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from constructs_lib.core.errors import GovernanceError, Problem

TRACE_COLUMNS = ("job_id", "team", "submit_time", "duration", "instance_type", "count", "priority", "checkpointable")
WITH_LIMIT = (*TRACE_COLUMNS, "max_run_time")
WITH_RESTARTABLE = (*WITH_LIMIT, "restartable")


@dataclass(frozen=True, kw_only=True, slots=True)  # slots: a million-job trace is held in memory
class TraceJob:
    job_id: str
    team: str
    submit_time: float
    duration: float
    instance_type: str
    count: int
    priority: int
    checkpointable: bool
    max_run_time: float | None = None  # the declared limit, when the source has one
    restartable: bool = True  # False: a reclaim stops it for good (RunningJob.restartable)


def read_trace(path: str | Path, classes: Mapping[str, int] | None = None) -> tuple[TraceJob, ...]:
    """Every bad row is reported with its line number, all at once. A ``priority`` is a number,
    or the name of one of ``classes`` (the governance file's priority classes: name -> weight)."""
    problems: list[Problem] = []
    jobs: list[TraceJob] = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            columns = tuple(header or ())
            if columns not in (TRACE_COLUMNS, WITH_LIMIT, WITH_RESTARTABLE):
                raise GovernanceError(
                    [
                        Problem(
                            path=f"{path}:1",
                            wrong="wrong header",
                            value=",".join(columns),
                            allowed=",".join(TRACE_COLUMNS) + "[,max_run_time[,restartable]]",
                        )
                    ]
                )
            seen: set[str] = set()
            for line, row in enumerate(reader, start=2):
                job = _parse_row(row, columns, f"{path}:{line}", problems, classes or {})
                if job is None:
                    continue
                if job.job_id in seen:
                    problems.append(
                        Problem(
                            path=f"{path}:{line}.job_id",
                            wrong="duplicate job id",
                            value=job.job_id,
                            allowed="unique ids",
                        )
                    )
                seen.add(job.job_id)
                jobs.append(job)
    except (OSError, UnicodeDecodeError) as error:
        raise GovernanceError(
            [
                Problem(
                    path=str(path),
                    wrong="cannot read the trace",
                    value=type(error).__name__,
                    allowed=f"a readable CSV file ({error})",
                )
            ]
        ) from None
    if problems:
        raise GovernanceError(
            problems[:50]
            + (
                [
                    Problem(
                        path=str(path),
                        wrong="more bad rows",
                        value=len(problems) - 50,
                        allowed="fix the rows above first",
                    )
                ]
                if len(problems) > 50
                else []
            )
        )
    return tuple(jobs)


def _parse_row(
    row: list[str], columns: tuple[str, ...], where: str, problems: list[Problem], classes: Mapping[str, int]
) -> TraceJob | None:
    if len(row) != len(columns):
        problems.append(
            Problem(
                path=where,
                wrong="wrong number of fields",
                value=len(row),
                allowed=f"{len(columns)}: {','.join(columns)}",
            )
        )
        return None
    values = dict(zip(columns, (cell.strip() for cell in row), strict=False))
    before = len(problems)

    def number(column: str, convert, allowed: str, ok) -> float | int:
        try:
            value = convert(values[column])
        except ValueError:
            value = None
        if value is None or not ok(value):
            problems.append(Problem(path=f"{where}.{column}", wrong="invalid", value=values[column], allowed=allowed))
            return 0
        return value

    submit = number("submit_time", float, "seconds >= 0", lambda v: math.isfinite(v) and v >= 0)
    duration = number("duration", float, "seconds > 0", lambda v: math.isfinite(v) and v > 0)
    count = number("count", int, "a whole number of instances >= 1", lambda v: v >= 1)
    if values["priority"] in classes:
        priority = classes[values["priority"]]
    else:
        priority = number(
            "priority",
            int,
            "an integer (higher is more urgent)"
            + (f", or a priority class: one of {sorted(classes)}" if classes else ""),
            lambda v: True,
        )
    limit = (
        number("max_run_time", float, "seconds > 0, or empty", lambda v: math.isfinite(v) and v > 0)
        if values.get("max_run_time")
        else None
    )
    checkpointable = values["checkpointable"].lower()
    if checkpointable not in ("true", "false"):
        problems.append(
            Problem(
                path=f"{where}.checkpointable", wrong="invalid", value=values["checkpointable"], allowed="true or false"
            )
        )
    restartable = (values.get("restartable") or "true").lower()
    if restartable not in ("true", "false"):
        problems.append(
            Problem(
                path=f"{where}.restartable",
                wrong="invalid",
                value=values["restartable"],
                allowed="true, false or empty (true)",
            )
        )
    for column in ("job_id", "team", "instance_type"):
        if not values[column]:
            problems.append(Problem(path=f"{where}.{column}", wrong="missing", value="", allowed="a non-empty value"))
    if len(problems) > before:
        return None
    return TraceJob(
        job_id=values["job_id"],
        team=values["team"],
        submit_time=submit,
        duration=duration,
        instance_type=values["instance_type"],
        count=count,
        priority=priority,
        checkpointable=checkpointable == "true",
        max_run_time=limit,
        restartable=restartable == "true",
    )


def write_trace(jobs: Iterable[TraceJob], path: str | Path) -> int:
    written = 0
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(WITH_RESTARTABLE)
        for job in jobs:
            writer.writerow(
                [
                    job.job_id,
                    job.team,
                    _seconds(job.submit_time),
                    _seconds(job.duration),
                    job.instance_type,
                    job.count,
                    job.priority,
                    str(job.checkpointable).lower(),
                    "" if job.max_run_time is None else _seconds(job.max_run_time),
                    str(job.restartable).lower(),
                ]
            )
            written += 1
    return written


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


# --- openb ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class QosClass:
    """Where tasks of one openb QoS class go."""

    team: str
    priority: int
    checkpointable: bool


@dataclass(frozen=True, kw_only=True)
class OpenbMapping:
    """The explicit mapping from an openb task to a trace job (docs/performance.md discusses it).

    * ``qos`` decides team, priority and checkpointability: latency-sensitive (LS) serving work is
      the critical team; Burstable and Guaranteed pods are a steady team; best-effort (BE) pods are
      the background team, checkpointable, lowest priority.
    * duration = deletion_time - scheduled_time (tasks still running at the end of the trace are
      cut there); submit time = creation_time.
    * GPUs to instances: one instance per whole GPU of ``instance_type`` (a one-GPU type); a
      fractional GPU (gpu_milli < 1000) rounds up to one whole instance.
    * dropped: CPU-only tasks, tasks never scheduled (no duration), tasks with duration <= 0.
    """

    instance_type: str = "ml.g5.xlarge"
    qos: Mapping[str, QosClass] = field(
        default_factory=lambda: {
            "LS": QosClass(team="serving", priority=90, checkpointable=False),
            "Guaranteed": QosClass(team="platform", priority=50, checkpointable=False),
            "Burstable": QosClass(team="platform", priority=50, checkpointable=False),
            "BE": QosClass(team="research", priority=10, checkpointable=True),
        }
    )


OPENB_COLUMNS = ("name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time")


def convert_openb(path: str | Path, mapping: OpenbMapping = OpenbMapping()) -> Iterator[TraceJob]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in OPENB_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise GovernanceError(
                [
                    Problem(
                        path=f"{path}:1",
                        wrong="not an openb pod list",
                        value=missing,
                        allowed=f"columns {', '.join(OPENB_COLUMNS)}",
                    )
                ]
            )
        for line, row in enumerate(reader, start=2):
            try:
                job = _openb_job(row, mapping)
            except (KeyError, ValueError) as error:
                raise GovernanceError(
                    [
                        Problem(
                            path=f"{path}:{line}",
                            wrong="unreadable openb row",
                            value=str(error),
                            allowed=f"known qos {sorted(mapping.qos)} and numeric fields",
                        )
                    ]
                ) from None
            if job is not None:
                yield job


def _openb_job(row: Mapping[str, str], mapping: OpenbMapping) -> TraceJob | None:
    gpus, milli = int(row["num_gpu"]), int(row["gpu_milli"] or 0)
    if gpus == 0 or not row["scheduled_time"]:
        return None
    duration = float(row["deletion_time"]) - float(row["scheduled_time"])
    if duration <= 0:
        return None
    qos = mapping.qos[row["qos"]]
    count = gpus if milli >= 1000 else max(1, math.ceil(gpus * milli / 1000))
    return TraceJob(
        job_id=row["name"],
        team=qos.team,
        submit_time=float(row["creation_time"]),
        duration=duration,
        instance_type=mapping.instance_type,
        count=count,
        priority=qos.priority,
        checkpointable=qos.checkpointable,
    )
