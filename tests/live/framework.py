"""The probe framework of ``make verify-live``: what a probe is, how one runs, and how the runner
turns their verdicts into lines and an exit code.

A probe checks one behaviour of AWS that a row of the register (docs/aws-behaviour.md) states
without a page to prove it (status undocumented or contradicted), in a sandbox account:

- it names its row (``row``) and is named by it (the row's probe field: ``verify-live: <name>``);
- dry by default: the runner prints what each probe would do (``does``), what counts as a pass
  (``passes_when``) and its cost bound (``cost``), and calls nothing in AWS; ``--act`` runs them;
- self-cleaning: whatever a probe creates or changes it undoes through the :class:`Cleanup` it is
  given (``cleanup.add``) as soon as it has made it, and the runner runs every undo step, last
  first, after the probe returns or raises; an undo step that fails is reported on its own line
  and makes the exit code 4 (something may still be running or changed);
- one verdict: pass (AWS behaves as the row says), fail (it does not: the row, and what relies on
  it, must change), inconclusive (the probe could not tell: a missing input, no capacity, an
  unexpected error). A probe that raises is inconclusive, with the error.

Probes live in modules of the ``tests.live.probes`` package, each exposing ``PROBES`` (a list of
:class:`Probe`) and, when it needs command-line inputs of its own, ``OPTIONS`` (a list of
:class:`Option`); a module whose name starts with ``_`` holds shared helpers and is not scanned.
Adding a probe is adding a module: the runner (``tests/live/verify_live.py``) finds it.

Exit codes: 0 every probe passed (a dry run: nothing was wrong with the command line);
1 a probe failed; 2 the command line is wrong (an unknown option, probe or row); 3 a probe was
inconclusive and none failed; 4 an undo step failed (look at the lines marked ``CLEANUP``).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TextIO

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
_SEVERITY = {PASS: 0, INCONCLUSIVE: 1, FAIL: 2}
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_CLEANUP = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Verdict:
    outcome: str  # PASS, FAIL or INCONCLUSIVE
    detail: str


def passed(detail: str) -> Verdict:
    return Verdict(PASS, detail)


def failed(detail: str) -> Verdict:
    return Verdict(FAIL, detail)


def inconclusive(detail: str) -> Verdict:
    return Verdict(INCONCLUSIVE, detail)


@dataclass(frozen=True)
class Option:
    """A command-line input some probe needs (``--team-a``); probes name it in ``needs``."""

    flag: str
    help: str
    type: Callable[[str], Any] = str
    default: Any = None

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


class Cleanup:
    """The undo steps of one probe, run last-first by the runner, each attempted even when an
    earlier one failed."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, Callable[[], object]]] = []

    def add(self, what: str, step: Callable[[], object]) -> None:
        self._steps.append((what, step))

    def run(self) -> list[str]:
        """Runs every step; returns ``"<what>: <error>"`` for each that failed."""
        failures = []
        while self._steps:
            what, step = self._steps.pop()
            try:
                step()
            except Exception as error:  # noqa: BLE001  every step is attempted; each failure reported
                failures.append(f"{what}: {error}")
        return failures


def run_command(argv: Sequence[str], stdin: str | None = None) -> str:
    """A command's standard output (``kubectl``, through the caller's kubeconfig); one that fails
    or takes more than two minutes raises, with its standard error."""
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=120, check=True)
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"{' '.join(argv[:3])} ...: {error.stderr.strip() or error}") from None
    return done.stdout


@dataclass
class Context:
    """What a running probe may use: the command line's values, the sandbox account, clients
    acting as the caller (``role=None``) or as a role the caller may assume, and commands run as
    the caller (``command``: argv and standard input -> standard output)."""

    args: argparse.Namespace
    account: str
    partition: str
    region: str
    client: Callable[[str, str | None], Any]  # (service, role ARN or None) -> a boto3 client
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    command: Callable[[Sequence[str], str | None], str] = run_command

    def arn(self, service: str, resource: str, *, region: bool = True) -> str:
        return f"arn:{self.partition}:{service}:{self.region if region else ''}:{self.account}:{resource}"

    def team_role(self, team: str, kind: str) -> str:
        """A team's role (``constructs_lib.tenancy``: path ``/gpu-governance/``, name ``<team>-gpu-<kind>``)."""
        return self.arn("iam", f"role/gpu-governance/{team}-gpu-{kind}", region=False)


@dataclass(frozen=True)
class Probe:
    name: str  # the register's `verify-live: <name>`
    row: str  # the register row it checks
    does: str  # what it does in AWS, for the dry run
    passes_when: str  # what AWS must do for a pass: what the row says
    needs: tuple[str, ...]  # option flags it cannot run without
    cost: Callable[[argparse.Namespace], str]  # its cost bound, from the command line
    run: Callable[[Context, Cleanup], Verdict]


@dataclass(frozen=True)
class Result:
    probe: Probe
    verdict: Verdict
    cleanup_failures: tuple[str, ...] = ()


@dataclass(frozen=True)
class Catalogue:
    probes: tuple[Probe, ...]
    options: tuple[Option, ...] = field(default=())


def discover(package: ModuleType) -> Catalogue:
    """Every probe and option of ``package``'s modules (not those whose name starts with ``_``).
    Two probes of one name, or one flag declared twice with different help, is an error: the
    register names probes, and one flag means one thing."""
    probes: list[Probe] = []
    options: dict[str, Option] = {}
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        probes += getattr(module, "PROBES", [])
        for option in getattr(module, "OPTIONS", []):
            if options.setdefault(option.flag, option) != option:
                raise ValueError(f"{module.__name__}: option {option.flag} is declared twice, differently")
    names = [p.name for p in probes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"probes named twice: {twice}")
    missing = sorted({flag for p in probes for flag in p.needs} - set(options))
    if missing:
        raise ValueError(f"probes need options no module declares: {missing}")
    return Catalogue(tuple(probes), tuple(options.values()))


def select(catalogue: Catalogue, wanted: Sequence[str]) -> list[Probe]:
    """The probes named in ``wanted`` (by probe name or row id), or all; an unknown name raises."""
    if not wanted:
        return list(catalogue.probes)
    known = {p.name for p in catalogue.probes} | {p.row for p in catalogue.probes}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ValueError(f"--only: no probe or row named {unknown} - one of {sorted(known)}")
    return [p for p in catalogue.probes if p.name in wanted or p.row in wanted]


def missing_inputs(probe: Probe, args: argparse.Namespace) -> list[str]:
    return [flag for flag in probe.needs if getattr(args, Option(flag, "").dest, None) in (None, "")]


def plan(probes: Iterable[Probe], args: argparse.Namespace, out: TextIO) -> int:
    """The dry run: what each probe would do, when it passes, and what it may cost."""
    out.write("verify-live: dry run, nothing is called in AWS (add --act to run these probes)\n")
    for probe in probes:
        missing = missing_inputs(probe, args)
        out.write(f"\n{probe.row}  {probe.name}\n")
        out.write(f"  does:   {probe.does}\n")
        out.write(f"  passes: {probe.passes_when}\n")
        out.write(f"  cost:   {probe.cost(args)}\n")
        if probe.needs:
            out.write(f"  needs:  {', '.join(probe.needs)}")
            out.write(f" (missing: {', '.join(missing)}: it would be inconclusive)\n" if missing else "\n")
    return EXIT_PASS


def run_one(probe: Probe, context: Context) -> Result:
    missing = missing_inputs(probe, context.args)
    if missing:
        return Result(probe, inconclusive(f"not run: needs {', '.join(missing)}"))
    cleanup = Cleanup()
    try:
        verdict = probe.run(context, cleanup)
    except Exception as error:  # noqa: BLE001  a probe that raises could not tell
        verdict = inconclusive(f"raised {type(error).__name__}: {error}")
    finally:
        failures = cleanup.run()
    return Result(probe, verdict, tuple(failures))


def act(probes: Iterable[Probe], context: Context, out: TextIO) -> list[Result]:
    """Runs each probe and prints its line (and any failed undo step) as soon as it is done."""
    results = []
    for probe in probes:
        out.write(f"{probe.row}  {probe.name}: running (cost: {probe.cost(context.args)})\n")
        out.flush()
        result = run_one(probe, context)
        out.write(f"{probe.row}  {probe.name}  {result.verdict.outcome}  {result.verdict.detail}\n")
        for failure in result.cleanup_failures:
            out.write(f"{probe.row}  {probe.name}  CLEANUP FAILED  {failure}\n")
        results.append(result)
    return results


def by_row(results: Iterable[Result]) -> dict[str, str]:
    """Each row's verdict: the worst of its probes' (fail over inconclusive over pass)."""
    rows: dict[str, str] = {}
    for result in results:
        outcome = result.verdict.outcome
        if _SEVERITY[outcome] >= _SEVERITY[rows.get(result.probe.row, PASS)]:
            rows[result.probe.row] = outcome
    return rows


def summary(results: Sequence[Result], out: TextIO) -> int:
    """One line per register row, and the exit code."""
    out.write("\nrows:\n")
    for row, outcome in by_row(results).items():
        out.write(f"{row}  {outcome}\n")
    return exit_code(results)


def exit_code(results: Iterable[Result]) -> int:
    results = list(results)
    if any(r.cleanup_failures for r in results):
        return EXIT_CLEANUP
    outcomes = {r.verdict.outcome for r in results}
    return EXIT_FAIL if FAIL in outcomes else EXIT_INCONCLUSIVE if INCONCLUSIVE in outcomes else EXIT_PASS
