"""The mutation catalogue: plausible bugs planted one at a time in a copy of the tree, each with the
tests that must catch it (issue 39). `make mutants`, or

    python benchmarks/mutants.py [-j N] [--catalogue benchmarks/mutants.toml] [--only ID ...] [--no-baseline]

Each mutant in the catalogue (TOML, one ``[[mutant]]`` table each) is an exact-text patch:

    [[mutant]]
    id = "copy-through-retrying-client"            # unique, kebab-case
    area = "reclaim"                               # reclaim, grace, gpu-hours, capacity, guard, ...
    file = "lambda/gpu_governance_runtime/backends/batch_fair_share.py"
    old = "submit=clients.batch_submit"            # must occur exactly once in the file
    new = "submit=clients.batch"
    why = "a stopped job's copy goes through the retrying client: a lost answer makes two copies"
    tests = ["tests/aws_model/test_scenarios.py::test_reclaim_with_faults_loses_no_job"]

A patch of several hunks in one file gives ``old`` and ``new`` as lists of the same length (a
block moved: its removal and its insertion). A mutant whose ``old`` text (each hunk's) no longer
occurs exactly once is **stale** (the code moved on: rewrite
its patch); a selection naming a test that does not exist is **broken**. Neither is skipped quietly.
The working tree is never touched: ``-j N`` workers each copy the tree to a temporary directory once
and apply, run and undo one mutant at a time there (pytest's ``pythonpath`` makes the copy's code the
one imported; the script checks it). Before the mutants, each distinct selection runs unmutated
(the baseline): a selection that fails without a mutant would "kill" every mutant.

A mutant is **killed** when its selection fails (pytest exits 1 or 2, or it runs past
``--timeout``), **survived** when it passes. A mutant written down as equivalent (``equivalent =
"why no test can tell it from the code"``) is listed, not run. Prints one line per mutant and the
score; exits 1 if any mutant survived, is stale or broken, or a baseline failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from queue import Queue

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "benchmarks" / "mutants.toml"
PYTHON = ROOT / ".venv" / "bin" / "python"
# Not copied: the environment, the CDK CLI, git's objects and what runs leave behind.
LEFT_OUT = (".venv", "node_modules", ".git", "cdk.out", ".pytest_cache", ".hypothesis", "__pycache__", "*.egg-info")
FIELDS = {"id", "area", "file", "old", "new", "why", "tests"}
KILLED_EXIT_CODES = (1, 2)  # tests failed; collection or import failed (the mutant broke the module)


@dataclass(frozen=True)
class Mutant:
    id: str
    area: str
    file: str
    old: tuple[str, ...]  # one per hunk
    new: tuple[str, ...]
    why: str
    tests: tuple[str, ...]
    equivalent: str = ""


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    verdict: str  # killed, survived, stale, broken, equivalent
    detail: str = ""
    seconds: float = 0.0


def load(path: Path) -> list[Mutant]:
    """The catalogue's mutants; a malformed entry stops the run, naming it."""
    entries = tomllib.loads(path.read_text()).get("mutant", [])
    mutants, seen = [], set()
    for n, entry in enumerate(entries):
        where = f"{path.name}: mutant {n + 1} ({entry.get('id', '?')})"
        missing, unknown = FIELDS - set(entry), set(entry) - FIELDS - {"equivalent"}
        if missing or unknown:
            raise SystemExit(
                f"{where}: missing {sorted(missing)}, unknown {sorted(unknown)} - each has {sorted(FIELDS)}"
            )
        if entry["id"] in seen:
            raise SystemExit(f"{where}: id used twice")
        if not entry["tests"]:
            raise SystemExit(f"{where}: tests ([]) - name the tests that must catch it")
        old, new = ([entry[k]] if isinstance(entry[k], str) else entry[k] for k in ("old", "new"))
        if len(old) != len(new) or not old:
            raise SystemExit(f"{where}: old and new - one text each, or lists of the same length (one per hunk)")
        seen.add(entry["id"])
        mutants.append(Mutant(**{**entry, "old": tuple(old), "new": tuple(new), "tests": tuple(entry["tests"])}))
    return mutants


def check(mutant: Mutant, root: Path = ROOT) -> Outcome | None:
    """Stale (its patch no longer applies exactly once) or broken (a test it names does not exist); None if runnable."""
    source = root / mutant.file
    text = source.read_text() if source.is_file() else None
    for hunk, old in enumerate(mutant.old, 1):
        found = -1 if text is None else text.count(old)
        if found != 1:
            where = "no such file" if found < 0 else f"old text of hunk {hunk} found {found} times"
            return Outcome(mutant, "stale", f"{mutant.file}: {where} - rewrite the patch")
    for test in mutant.tests:
        path, _, name = test.partition("::")
        file = root / path
        if not file.is_file() or (name and not re.search(rf"def {re.escape(name.split('[')[0])}\(", file.read_text())):
            return Outcome(mutant, "broken", f"selection names {test}, which does not exist")
    return None


@contextmanager
def tree_copy() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        copy = Path(tmp) / "tree"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*LEFT_OUT), symlinks=True)
        imported = subprocess.run(
            [
                PYTHON,
                "-c",
                "import constructs_lib, gpu_governance_runtime as g; print(constructs_lib.__file__, g.__file__)",
            ],
            cwd=copy,
            env=_environment(copy),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if not all(Path(p).is_relative_to(copy) for p in imported):
            raise SystemExit(
                f"the copy's tests would import {imported}, not the copy's code: mutants would run on the tree"
            )
        yield copy


def pytest(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[int | None, str, float]:
    """Run ``tests`` in ``copy``: (exit code or None on timeout, the output's tail, seconds)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [PYTHON, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
            cwd=copy,
            env=_environment(copy),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None, "timed out", time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    # what failed: the first test, and the error that failed it (an invariant a scenario found broken, ...)
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    raised = [line[1:].strip() for line in lines if re.match(r"E\s+\S*(Error|Broken|Exception)\b", line)]
    said = " - ".join([*failed[:1], *raised[:1]]) or (lines[-1:] or [""])[0]
    return done.returncode, said[:400], time.perf_counter() - started


def _environment(copy: Path) -> dict[str, str]:
    """The caller's environment, with the copy's code first on the path."""
    return {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "PYTHONPATH": f"{copy}:{copy / 'lambda'}",
        "AWS_DEFAULT_REGION": "us-east-1",
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }


def run(mutant: Mutant, copy: Path, timeout: float) -> Outcome:
    source = copy / mutant.file
    original = mutated = source.read_text()
    for old, new in zip(mutant.old, mutant.new, strict=True):
        mutated = mutated.replace(old, new, 1)
    source.write_text(mutated)
    try:
        code, tail, seconds = pytest(copy, mutant.tests, timeout)
    finally:
        source.write_text(original)
    if code is None or code in KILLED_EXIT_CODES:
        return Outcome(mutant, "killed", tail, seconds)
    if code == 0:
        return Outcome(mutant, "survived", "every test of its selection passed", seconds)
    return Outcome(mutant, "broken", f"pytest exited {code}: {tail}", seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalogue", type=Path, default=CATALOGUE)
    parser.add_argument(
        "-j", "--jobs", type=int, default=1, help="mutants run at once (default 1: the machine is shared)"
    )
    parser.add_argument("--only", nargs="+", metavar="ID", help="run these mutants only")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one selection may run")
    parser.add_argument("--no-baseline", action="store_true", help="do not run the selections unmutated first")
    arguments = parser.parse_args()
    mutants = load(arguments.catalogue)
    if arguments.only:
        unknown = set(arguments.only) - {m.id for m in mutants}
        if unknown:
            raise SystemExit(f"--only: no mutant {sorted(unknown)} in {arguments.catalogue.name}")
        mutants = [m for m in mutants if m.id in arguments.only]
    outcomes = [Outcome(m, "equivalent", m.equivalent) for m in mutants if m.equivalent]
    runnable = []
    for mutant in (m for m in mutants if not m.equivalent):
        problem = check(mutant)
        if problem is None:
            runnable.append(mutant)
        else:
            outcomes.append(problem)
            print(f"{problem.verdict.upper():9} {mutant.id}: {problem.detail}", flush=True)
    started = time.perf_counter()
    with ThreadPoolExecutor(max(1, arguments.jobs)) as pool, _copies(max(1, arguments.jobs)) as copies:

        def in_a_copy(call, *args):
            copy = copies.get()
            try:
                return call(copy, *args)
            finally:
                copies.put(copy)

        if not arguments.no_baseline:
            selections = sorted({m.tests for m in runnable})
            for tests, (code, tail, seconds) in zip(
                selections,
                pool.map(lambda t: in_a_copy(pytest, t, arguments.timeout), selections),
                strict=True,
            ):
                print(
                    f"baseline  {'passed' if code == 0 else 'FAILED'} in {seconds:.0f} s: {' '.join(tests)}", flush=True
                )
                if code != 0:
                    print(f"          {tail}\nA selection fails without any mutant: fix it first.", flush=True)
                    return 1
        for outcome in pool.map(lambda m: in_a_copy(lambda c: run(m, c, arguments.timeout)), runnable):
            outcomes.append(outcome)
            print(
                f"{outcome.verdict:9} {outcome.mutant.id} ({outcome.mutant.area}, {outcome.seconds:.0f} s): {outcome.detail}",
                flush=True,
            )
    counts = {
        v: sum(1 for o in outcomes if o.verdict == v) for v in ("killed", "survived", "stale", "broken", "equivalent")
    }
    tried = counts["killed"] + counts["survived"]
    print(
        f"\nscore: {counts['killed']} of {tried} mutants killed ({100 * counts['killed'] / max(tried, 1):.0f} %); "
        + ", ".join(f"{n} {v}" for v, n in counts.items() if v != "killed")
        + f"; {time.perf_counter() - started:.0f} s with -j {arguments.jobs}"
    )
    for area in sorted({o.mutant.area for o in outcomes}):
        mine = [o for o in outcomes if o.mutant.area == area]
        print(f"  {area}: {sum(o.verdict == 'killed' for o in mine)} of {len(mine)} killed")
    return 1 if counts["survived"] or counts["stale"] or counts["broken"] else 0


@contextmanager
def _copies(count: int) -> Iterator[Queue]:
    """``count`` copies of the tree, handed out one per running mutant."""
    with ExitStack() as stack:
        copies: Queue = Queue()
        for _ in range(count):
            copies.put(stack.enter_context(tree_copy()))
        yield copies


if __name__ == "__main__":
    sys.exit(main())
