"""What Powertools for AWS Lambda (Python) would cost the controllers, against the runtime's own
``common`` package: import (cold-start) time, the time to write one metric document, and the
size of the function asset if Powertools were bundled into it.

    pip install --target /tmp/powertools aws-lambda-powertools==3.37.0   # not a project dependency
    python benchmarks/runtime_common.py --powertools /tmp/powertools     # prints Markdown tables
    python benchmarks/runtime_common.py --powertools /tmp/powertools --runs 41

Each import is timed in a new interpreter, after ``import boto3`` (every handler imports it
first, and it loads jmespath, which Powertools needs), from a copy staged as
``constructs_lib/core/runtime_asset.py`` stages the asset: without ``__pycache__``, and with
``PYTHONDONTWRITEBYTECODE`` because Lambda's /var/task is read-only, so a bundled package is
compiled from source at every cold start. The "with bytecode" rows are the best case (compiled
files present, as a layer that ships them would have). Python is the one running this script.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "lambda" / "gpu_governance_runtime"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")

COMMON = "import gpu_governance_runtime.common.log, gpu_governance_runtime.common.metrics, gpu_governance_runtime.common.clients"
POWERTOOLS = (
    "from aws_lambda_powertools import Logger, Metrics\n"
    "Logger(service='reclaim'); Metrics(namespace='GpuGovernance/Reclaim')"
)
TIMED = """
import sys, time
sys.path[:0] = {path!r}
import boto3
start = time.perf_counter()
{code}
print((time.perf_counter() - start) * 1000)
"""

WRITE_COMMON = """
from gpu_governance_runtime.common import metrics
from gpu_governance_runtime.contract import SHARE_METRICS
def one():
    metrics.publish("GpuGovernance/Reclaim", {"Pool": "p", "Share": "s"}, {m: (3, "Count") for m in SHARE_METRICS})
"""
WRITE_POWERTOOLS = """
from aws_lambda_powertools import Metrics
from gpu_governance_runtime.contract import SHARE_METRICS
emf = Metrics(namespace="GpuGovernance/Reclaim")
def one():
    emf.add_dimension(name="Pool", value="p"); emf.add_dimension(name="Share", value="s")
    for m in SHARE_METRICS:
        emf.add_metric(name=m, unit="Count", value=3)
    emf.flush_metrics()
"""
WRITES = """
import contextlib, os, sys, time
sys.path[:0] = {path!r}
{setup}
with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
    one()
    start = time.perf_counter()
    for _ in range({count}):
        one()
    print((time.perf_counter() - start) / {count} * 1e6, file=sys.stderr)
"""


def stage(folder: Path, powertools: Path | None) -> Path:
    """The runtime package as the asset holds it, plus Powertools' packages when given."""
    shutil.copytree(RUNTIME, folder / RUNTIME.name, ignore=IGNORE)
    if powertools is not None:
        shutil.copytree(powertools / "aws_lambda_powertools", folder / "aws_lambda_powertools", ignore=IGNORE)
        # typing_extensions is a dependency the Lambda Python runtime does not ship; jmespath comes with boto3.
        shutil.copy(powertools / "typing_extensions.py", folder / "typing_extensions.py")
    return folder


def zipped(folder: Path) -> tuple[int, int]:
    """(bytes on disk, bytes of the deflated zip) of a staged folder."""
    buffer, raw = io.BytesIO(), 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                raw += path.stat().st_size
                archive.write(path, path.relative_to(folder))
    return raw, buffer.tell()


def import_ms(path: list[str], code: str, runs: int, *, bytecode: bool) -> list[float]:
    env = {**os.environ, "PYTHONPATH": ""}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        subprocess.run(
            [sys.executable, "-c", TIMED.format(path=path, code=code)], env=env, check=True, capture_output=True
        )  # compile once
    return [
        float(
            subprocess.run(
                [sys.executable, "-c", TIMED.format(path=path, code=code)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        for _ in range(runs)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--powertools", type=Path, required=True, help="a folder Powertools was pip-installed into (--target)"
    )
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    version = next(
        p.name.removesuffix(".dist-info").split("-")[1]
        for p in args.powertools.glob("aws_lambda_powertools-*.dist-info")
    )
    with tempfile.TemporaryDirectory() as tmp:
        own = stage(Path(tmp) / "own", None)
        bundled = stage(Path(tmp) / "bundled", args.powertools)
        print(f"Python {sys.version.split()[0]}, Powertools {version}, {args.runs} fresh interpreters each\n")
        print("| import after boto3 | median (ms) | min (ms) | max (ms) |")
        print("| --- | --- | --- | --- |")
        for name, path, code in (
            ("common (log, metrics, clients)", [str(own)], COMMON),
            ("Powertools Logger + Metrics, created", [str(bundled)], POWERTOOLS),
        ):
            for bytecode in (False, True):
                times = import_ms(path, code, args.runs, bytecode=bytecode)
                label = f"{name}, {'with bytecode' if bytecode else 'as bundled (no bytecode)'}"
                print(f"| {label} | {statistics.median(times):.1f} | {min(times):.1f} | {max(times):.1f} |")
        print("\n| one reclaim share document (2 dimensions, 8 metrics) to stdout | µs per document |")
        print("| --- | --- |")
        for name, path, setup in (
            ("common.metrics.publish", [str(own)], WRITE_COMMON),
            ("Powertools Metrics add_dimension/add_metric/flush_metrics", [str(bundled)], WRITE_POWERTOOLS),
        ):
            result = subprocess.run(
                [sys.executable, "-c", WRITES.format(path=path, setup=setup, count=20000)],
                check=True,
                capture_output=True,
                text=True,
            )
            print(f"| {name} | {float(result.stderr.strip().splitlines()[-1]):.1f} |")
        sample = (
            f"import sys; sys.path[:0] = {[str(bundled)]!r}\nfrom aws_lambda_powertools import Metrics\n"
            "emf = Metrics(namespace='GpuGovernance/Reclaim'); emf.add_dimension(name='Pool', value='p')\n"
            "emf.add_metric(name='PoolErrors', unit='Count', value=1); emf.flush_metrics()"
        )
        written = subprocess.run(
            [sys.executable, "-c", sample],
            env={**os.environ, "POWERTOOLS_SERVICE_NAME": "reclaim"},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        print(f"\nPowertools' PoolErrors document with POWERTOOLS_SERVICE_NAME=reclaim set:\n\n    {written}")
        print("\n| function asset (staged as runtime_asset.py does, without the policy) | files (KB) | zip (KB) |")
        print("| --- | --- | --- |")
        for name, folder in (("gpu_governance_runtime", own), ("with Powertools bundled", bundled)):
            for cache in folder.rglob("__pycache__"):
                shutil.rmtree(cache)
            raw, packed = zipped(folder)
            print(f"| {name} | {raw / 1024:.0f} | {packed / 1024:.0f} |")


if __name__ == "__main__":
    main()
