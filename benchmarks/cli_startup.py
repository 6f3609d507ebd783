"""Wall time of the `gpu-governance` commands that synthesize nothing, each started afresh.

    python benchmarks/cli_startup.py              # 10 runs a command, prints a Markdown table
    python benchmarks/cli_startup.py --runs 20

Each run is a new interpreter, `python -m constructs_lib.cli ...`, as a user starts it; the
command lines (and their input files) are the ones tests/foundation/test_cli_imports.py checks
for aws_cdk / jsii imports.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from tests.foundation.test_cli_imports import offline_commands  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")])}
    env.pop("GPU_GOVERNANCE_CONFIG", None)
    print(f"| command | median (s) | min (s) | max (s) |  ({args.runs} runs each)")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for name, (argv, expected_code) in offline_commands(Path(folder)).items():
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                result = subprocess.run(
                    [sys.executable, "-m", "constructs_lib.cli", *argv],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                times.append(time.perf_counter() - start)
                if result.returncode != expected_code:
                    sys.exit(f"{name}: exit {result.returncode}, expected {expected_code}")
            print(f"| `{name}` | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |")


if __name__ == "__main__":
    main()
