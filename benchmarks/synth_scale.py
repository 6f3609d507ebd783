"""Synthesis time and peak memory of generated organisations (tests/scale/generate.py), as the
CDK CLI runs it: `python app.py` in a child process, compliance packs included.

    python benchmarks/synth_scale.py                  # 50, 100 and 200 teams
    python benchmarks/synth_scale.py --teams 20 200   # other sizes
    nice python benchmarks/synth_scale.py --teams 200 500 1000   # issue 27's sizes, beside other work

CPU: the user + system seconds of app.py and its node children (jsii), sampled like memory (the
last 0.1 s is missed), which the load of other work changes far less than the wall-clock time;
"of which python" is app.py's own.
Memory: the Python process and its node child (jsii) together. tracemalloc and getrusage in this
process would see neither, so /proc is sampled every 0.1 s and the largest sum of the tree's
resident set sizes is kept (Linux only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from tests.scale.generate import organisation  # noqa: E402


def _tree(pid: int) -> list[int]:
    pids, queue = [], [pid]
    while queue:
        current = queue.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):  # the task ended while being read
                queue += [int(child) for child in (task / "children").read_text().split()]
    return pids


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def generated_app_environment(tmp: str, teams: int) -> dict[str, str]:
    """Writes a generated organisation of ``teams`` into ``tmp``: the environment in which app.py
    synthesizes it into ``tmp``/out, as the CDK CLI would run it."""
    config = Path(tmp) / "governance.yaml"
    config.write_text(yaml.safe_dump(organisation(teams)))
    return {
        **os.environ,
        "CDK_OUTDIR": str(Path(tmp) / "out"),
        "CDK_CONTEXT_JSON": json.dumps({"config": str(config)}),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")]),
    }


def measure(teams: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="synth-scale-") as tmp:
        env = generated_app_environment(tmp, teams)
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
        )
        peak = cpu = python_cpu = 0
        while process.poll() is None:
            tree = _tree(process.pid)
            peak = max(peak, sum(_rss_kib(pid) for pid in tree))
            cpu = max(cpu, sum(_cpu_ticks(pid) for pid in tree))
            python_cpu = max(python_cpu, _cpu_ticks(process.pid, children=False))
            time.sleep(0.1)
        seconds = time.perf_counter() - started
        stderr = process.stderr.read()
        if process.returncode != 0:
            raise SystemExit(f"{teams} teams: app.py exited {process.returncode}: {stderr[-2000:]}")
        stacks = len(list((Path(tmp) / "out").glob("*.template.json")))
    ticks = os.sysconf("SC_CLK_TCK")
    return {
        "teams": teams,
        "stacks": stacks,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu / ticks, 1),
        "python_cpu_seconds": round(python_cpu / ticks, 1),
        "peak_rss_mib": round(peak / 1024),
    }


def _cpu_ticks(pid: int, children: bool = True) -> int:
    """User + system time of a process (/proc/<pid>/stat fields 14-15) and of its reaped
    children (16-17)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return sum(int(f) for f in fields[11 : 15 if children else 13])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teams", type=int, nargs="+", default=[50, 100, 200])
    args = parser.parse_args()
    print(
        "| teams | stacks | synthesis (s) | s per team | CPU, python + node (s) | of which python (s) | peak RSS, python + node (MiB) | load average (1 min) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for teams in args.teams:
        row = measure(teams)
        print(
            f"| {row['teams']} | {row['stacks']} | {row['seconds']} | {row['seconds'] / teams:.2f} | {row['cpu_seconds']} | {row['python_cpu_seconds']} | {row['peak_rss_mib']} "
            f"| {os.getloadavg()[0]:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
