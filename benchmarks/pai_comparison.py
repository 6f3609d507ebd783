"""Side by side on one trace: `gpu-governance simulate` and the Alibaba PAI cluster simulator.

    git clone --depth 1 https://github.com/alibaba/clusterdata /tmp/clusterdata   # the PAI simulator is
    #   its folder cluster-trace-gpu-v2020/simulator (needs numpy and matplotlib; not part of this project)
    gpu-governance openb-trace openb_pod_list_gpuspec33.csv /tmp/openb115.csv --since-day 115
    python benchmarks/pai_comparison.py --pai-dir /tmp/clusterdata/cluster-trace-gpu-v2020/simulator --trace /tmp/openb115.csv

In one run it converts the trace to the PAI simulator's input, runs the PAI simulator's own entry
point `run_simulator.py` unchanged as a subprocess (its five allocation policies SJF, SJU, SJG,
SJGG, FIFO over one big node, each a replay of the whole trace), times our `compare()` (three
replays: policy, static, pooled) in this process and `gpu-governance simulate` as a whole command,
and prints jobs per second per replay and per command, the ratios, each side's CPU time and the load
average. Nothing is asserted about timings (docs/performance.md records the figures).

The PAI code is never copied into this repository: it runs from a temporary copy of --pai-dir,
because its entry point reads its trace from a fixed path next to itself
(traces/pai/pai_job_duration_estimate_100K.csv) and writes logs/ there.

How a trace job maps to a PAI job (pai_rows):
  job_id         the job's position in arrival order (PAI sorts FIFO by (submit_time, job_id), so ids
                 must be numbers; ours are names)
  user           the team
  submit_time    the submission time in whole seconds, as in the trace (openb's are whole seconds)
  duration       the run time in whole seconds, at least 1 (PAI truncates and lifts 0 to 1 itself)
  num_gpu        instances x 1: one PAI GPU stands for one instance of the pool, so `-g` is the
                 pool's capacity in instances (the openb pool is one GPU per ml.g5.xlarge)
  num_inst       1: the PAI cluster is one big node (its default NUM_NODES = 1), so gang placement
                 across nodes does not arise
  num_cpu        0: we model no CPUs; PAI's node has 23.22 CPUs per GPU, which then never binds
  user_dur, group_dur, group_gpu_dur
                 the duration itself: PAI's SJU / SJG / SJGG sort by these estimates, which the trace
                 does not have, so they get the oracle (they then replay like SJF)
What does not map: priorities, teams' guarantees, lending and reclaim (PAI has one queue and no
quotas; its preemption only follows capacity patterns, off by default), checkpointing, declared run
times, several instance types. PAI's FIFO replay is therefore comparable to our pooled replay (one
queue over the whole pool), not to the policy. PAI advances time one second per tick, ours every
60 s (the command's default), so the makespans differ slightly.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from constructs_lib.cli.simulate import pool_policy  # noqa: E402
from constructs_lib.model.loader import load_model  # noqa: E402
from constructs_lib.simulator import compare, read_trace  # noqa: E402
from constructs_lib.simulator.traces import TraceJob  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Settings  # noqa: E402

PAI_ENTRY = "run_simulator.py"
PAI_TRACE = Path("traces") / "pai" / "pai_job_duration_estimate_100K.csv"  # where PAI_ENTRY reads it
PAI_COLUMNS = (
    "job_id",
    "user",
    "submit_time",
    "duration",
    "num_gpu",
    "num_cpu",
    "num_inst",
    "user_dur",
    "group_dur",
    "group_gpu_dur",
)
# One line per policy: (FIFO, LGF),avg_jct,wait_time,makespan,jobs_done,runtime
PAI_RESULT = re.compile(
    r"^\((?P<policy>[A-Z]+) *, *[A-Z]+\),(?P<jct>[\d.]+),(?P<wait>[\d.]+),(?P<makespan>\d+),(?P<done>\d+),(?P<runtime>[\d.]+)$"
)


def pai_rows(jobs: Iterable[TraceJob]) -> list[dict[str, int | str]]:
    """The PAI simulator's rows for the jobs, numbered in arrival order (the mapping in the module doc)."""
    ordered = sorted(jobs, key=lambda job: (job.submit_time, job.job_id))
    rows = []
    for number, job in enumerate(ordered):
        duration = max(1, round(job.duration))
        rows.append(
            {
                "job_id": number,
                "user": job.team,
                "submit_time": round(job.submit_time),
                "duration": duration,
                "num_gpu": job.count,
                "num_cpu": 0,
                "num_inst": 1,
                "user_dur": duration,
                "group_dur": duration,
                "group_gpu_dur": duration,
            }
        )
    return rows


def write_pai_trace(jobs: Iterable[TraceJob], path: Path) -> int:
    """Writes the PAI simulator's input CSV; returns the number of jobs."""
    rows = pai_rows(jobs)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=PAI_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def run_ours(trace: Path, config: Path) -> tuple[float, float]:
    """Our three replays in this process, then `gpu-governance simulate` as a whole command: jobs/s per replay and per command."""
    pool = pool_policy(load_model(config), None)
    jobs = read_trace(trace)
    started, cpu = time.perf_counter(), time.process_time()
    results = compare(jobs, shares=pool.shares, capacity=pool.capacity, tick_s=60, settings=pool.settings(Settings()))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    per_replay = 3 * len(jobs) / seconds
    print(
        f"ours compare(): jobs={len(jobs)} replays=3 seconds={seconds:.3f} cpu_s={cpu:.3f} jobs_per_second_per_replay={per_replay:,.0f} load={load()}"
    )
    first = min(job.submit_time for job in jobs)
    for name, metrics in results.items():
        print(
            f"ours {name}: makespan_s={metrics.makespan_s:.0f} (first submission {first:.0f}) jobs_completed={metrics.jobs_completed} "
            f"jobs_unfinished={metrics.jobs_unfinished} utilization={metrics.utilization:.3f}"
        )
    command = [sys.executable, "-m", "constructs_lib.cli", "simulate", "--config", str(config), "--trace", str(trace)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "lambda")]))
    started, cpu = time.perf_counter(), children_cpu()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
    seconds, cpu = time.perf_counter() - started, children_cpu() - cpu
    print(
        f"ours command: {' '.join(command[1:])} seconds={seconds:.3f} cpu_s={cpu:.3f} jobs_per_second={len(jobs) / seconds:,.0f} load={load()}"
    )
    return per_replay, len(jobs) / seconds


def run_pai(pai_dir: Path, trace: Path, capacity: int, python: str) -> tuple[float, float, float]:
    """The PAI simulator's own entry point, unchanged, from a temporary copy of its folder: jobs/s of
    its FIFO replay, per replay over the whole command, and per command."""
    jobs = read_trace(trace)
    with tempfile.TemporaryDirectory(prefix="pai-") as work:
        for source in pai_dir.glob("*.py"):
            shutil.copy2(source, work)
        count = write_pai_trace(jobs, Path(work) / PAI_TRACE)
        command = [python, PAI_ENTRY, "--arrival_rate", "-1", "--num_jobs", str(count), "--num_gpus", str(capacity)]
        started, cpu = time.perf_counter(), children_cpu()
        output = subprocess.run(command, cwd=work, check=True, capture_output=True, text=True).stdout
        seconds, cpu = time.perf_counter() - started, children_cpu() - cpu
    results = [match for line in output.splitlines() if (match := PAI_RESULT.match(line))]
    replays = results[: len(results) // 2]  # the same lines are printed again sorted by JCT
    first = round(min(job.submit_time for job in jobs))
    fifo = 0.0
    for result in replays:
        runtime = float(result["runtime"])
        print(
            f"pai {result['policy']}: makespan_s={int(result['makespan']) - first} (its clock at the end less the first submission) "
            f"jobs_done={result['done']} avg_wait_s={float(result['wait']):.0f} seconds={runtime:.2f} jobs_per_second={count / runtime:,.0f}"
        )
        fifo = count / runtime if result["policy"] == "FIFO" else fifo
    print(
        f"pai command: {' '.join(command)} (in a copy of {pai_dir}) replays={len(replays)} seconds={seconds:.3f} cpu_s={cpu:.3f} "
        f"jobs_per_second={count / seconds:,.0f} jobs_per_second_per_replay={len(replays) * count / seconds:,.0f} load={load()}"
    )
    return fifo, len(replays) * count / seconds, count / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pai-dir",
        required=True,
        type=Path,
        help="the PAI simulator's folder (clusterdata/cluster-trace-gpu-v2020/simulator)",
    )
    parser.add_argument("--trace", required=True, type=Path, help="our trace CSV (e.g. the openb day-115 trace)")
    parser.add_argument("--config", type=Path, default=ROOT / "benchmarks" / "openb-lend-and-borrow.yaml")
    parser.add_argument(
        "--pai-python", default=sys.executable, help="interpreter for the PAI simulator (needs numpy and matplotlib)"
    )
    args = parser.parse_args()
    print(f"start: load={load()} cpus={os.cpu_count()}")
    ours_replay, ours_command = run_ours(args.trace, args.config)
    (capacity,) = pool_policy(load_model(args.config), None).capacity.values()
    pai_fifo, pai_replay, pai_command = run_pai(args.pai_dir, args.trace, capacity, args.pai_python)
    print(
        f"ratio per replay: {ours_replay / pai_fifo:.0f}x PAI's FIFO replay, {ours_replay / pai_replay:.0f}x PAI's average replay; "
        f"ratio per command: {ours_command / pai_command:.0f}x, per replay of each command {3 * ours_command / pai_replay:.0f}x "
        "(PAI's command runs 5 replays, ours 3)"
    )
    own = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"end: load={load()} this process cpu_s={own.ru_utime + own.ru_stime:.2f} peak_rss_mib={own.ru_maxrss / 1024:.0f}"
    )


if __name__ == "__main__":
    main()
