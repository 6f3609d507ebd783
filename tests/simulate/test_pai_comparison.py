"""benchmarks/pai_comparison.py writes the PAI simulator's input as its reader expects it, and reads
its result lines. No PAI code and no timing here: the benchmark itself runs the PAI simulator."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

from constructs_lib.simulator.traces import TraceJob

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pai_comparison.py"
spec = importlib.util.spec_from_file_location("pai_comparison", SCRIPT)
pai = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pai)

G5 = "ml.g5.xlarge"


def job(job_id, team, submit, duration, count):
    return TraceJob(
        job_id=job_id,
        team=team,
        submit_time=submit,
        duration=duration,
        instance_type=G5,
        count=count,
        priority=50,
        checkpointable=False,
    )


# Given out of arrival order; one shares the first's submission time (ties go by our job id).
JOBS = [
    job("train-b", "research", 9_949_982.0, 28_775.0, 8),
    job("serve-z", "serving", 9_941_376.0, 31_053.0, 1),
    job("serve-a", "serving", 9_941_376.0, 0.4, 2),
]


def test_the_converter_writes_one_pai_row_per_job_in_arrival_order(tmp_path):
    path = tmp_path / "traces" / "pai" / "trace.csv"
    assert pai.write_pai_trace(JOBS, path) == len(JOBS)
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames) == pai.PAI_COLUMNS
    ordered = sorted(JOBS, key=lambda j: (j.submit_time, j.job_id))
    assert [row["user"] for row in rows] == [j.team for j in ordered]
    for number, (row, source) in enumerate(zip(rows, ordered, strict=False)):
        # PAI's reader turns only digit strings into numbers (utils._add_job: value.isdigit()),
        # and sorts FIFO by (submit_time, job_id): every number is a whole, unsigned integer.
        assert all(row[column].isdigit() for column in pai.PAI_COLUMNS if column != "user")
        assert int(row["job_id"]) == number
        assert int(row["submit_time"]) == source.submit_time
        assert int(row["duration"]) == max(1, round(source.duration))
        assert int(row["num_gpu"]) == source.count  # one PAI GPU per instance of the pool
        assert (row["num_cpu"], row["num_inst"]) == ("0", "1")
        assert row["user_dur"] == row["group_dur"] == row["group_gpu_dur"] == row["duration"]
    assert rows[0]["duration"] == "1"  # a sub-second job still runs a second, as PAI itself would make it


def test_the_result_lines_of_the_pai_entry_point_are_read():
    # As run_simulator.py prints them (its README's example output).
    line = "(FIFO, LGF),7918.47,2879.77,535706,20000,110.53"
    match = pai.PAI_RESULT.match(line)
    assert (match["policy"], match["makespan"], match["done"], match["runtime"]) == (
        "FIFO",
        "535706",
        "20000",
        "110.53",
    )
    assert pai.PAI_RESULT.match("(SJGG, LGF),6001.94,963.23,535706,20000,51.11")["policy"] == "SJGG"
    assert pai.PAI_RESULT.match("alloc,preempt,avg_jct,wait_time,makespan,jobs_done,runtime") is None
