"""The probe framework of make verify-live, offline: the dry run calls nothing, every undo step
runs whatever the probe did, verdicts map to rows and exit codes, probes are found by module,
and every register row that no page proves names a probe that exists."""

from __future__ import annotations

import argparse
import importlib
import io
import re
import textwrap
import types
import uuid

import pytest

from tests.aws_model import register
from tests.live import framework, probes, verify_live
from tests.live.framework import (
    EXIT_CLEANUP,
    EXIT_FAIL,
    EXIT_INCONCLUSIVE,
    EXIT_PASS,
    EXIT_USAGE,
    FAIL,
    INCONCLUSIVE,
    PASS,
    Catalogue,
    Context,
    Probe,
    Result,
    Verdict,
)


def _probe(name="p", row="batch-iam.x", run=None, needs=()):
    return Probe(
        name=name,
        row=row,
        does="does a thing",
        passes_when="it works",
        needs=needs,
        cost=lambda args: "nothing",
        run=run or (lambda context, cleanup: framework.passed("fine")),
    )


def _context(**args):
    def refuse(service, role):
        raise AssertionError(f"no AWS call expected ({service} as {role})")

    return Context(argparse.Namespace(**args), "111122223333", "aws", "us-east-1", refuse)


def test_a_dry_run_prints_every_probe_its_row_cost_and_inputs_and_calls_nothing():
    out = io.StringIO()

    def no_aws(args):
        raise AssertionError("a dry run builds no AWS context")

    assert verify_live.main(["--queue", "q", "--team-a", "a"], out=out, context=no_aws) == EXIT_PASS
    text = out.getvalue()
    catalogue = framework.discover(probes)
    assert catalogue.probes
    for probe in catalogue.probes:
        block = text.split(f"{probe.row}  {probe.name}\n", 1)[1].split("\n\n", 1)[0]
        assert f"does:   {probe.does}" in block and f"passes: {probe.passes_when}" in block
        assert re.search(r"cost:   \S", block), probe.name
        if probe.needs:
            assert "needs:" in block
    assert "(missing: --image" in text  # what a run would lack is said before anything runs


def test_every_probe_states_a_cost_bound_from_any_command_line():
    catalogue = framework.discover(probes)
    empty = argparse.Namespace(**{o.dest: o.default for o in catalogue.options})
    for probe in catalogue.probes:
        assert probe.cost(empty).strip(), probe.name


def test_undo_steps_run_last_first_even_when_the_probe_raises_and_a_step_fails():
    done = []

    def run(context, cleanup):
        cleanup.add("first", lambda: done.append("first"))
        cleanup.add("second", lambda: (_ for _ in ()).throw(RuntimeError("throttled")))
        cleanup.add("third", lambda: done.append("third"))
        raise TimeoutError("no answer")

    result = framework.run_one(_probe(run=run), _context())
    assert done == ["third", "first"]
    assert result.verdict == Verdict(INCONCLUSIVE, "raised TimeoutError: no answer")
    assert result.cleanup_failures == ("second: throttled",)
    assert framework.exit_code([result]) == EXIT_CLEANUP


def test_undo_steps_run_after_a_verdict_too():
    done = []

    def run(context, cleanup):
        cleanup.add("terminate", lambda: done.append("terminated"))
        return framework.failed("hole")

    assert framework.run_one(_probe(run=run), _context()).verdict.outcome == FAIL and done == ["terminated"]


def test_a_probe_without_its_inputs_is_inconclusive_and_does_nothing():
    def run(context, cleanup):
        raise AssertionError("must not run")

    result = framework.run_one(_probe(run=run, needs=("--team-b",)), _context(team_b=None))
    assert result.verdict == Verdict(INCONCLUSIVE, "not run: needs --team-b")


def _result(outcome, row="batch-iam.x", cleanup=()):
    return Result(_probe(row=row), Verdict(outcome, ""), cleanup)


@pytest.mark.parametrize(
    ("outcomes", "code"),
    [
        ([PASS, PASS], EXIT_PASS),
        ([PASS, INCONCLUSIVE], EXIT_INCONCLUSIVE),
        ([INCONCLUSIVE, FAIL, PASS], EXIT_FAIL),
        ([], EXIT_PASS),
    ],
)
def test_exit_codes(outcomes, code):
    assert framework.exit_code([_result(o) for o in outcomes]) == code


def test_a_failed_undo_step_outranks_every_verdict():
    assert framework.exit_code([_result(FAIL), _result(PASS, cleanup=("x: y",))]) == EXIT_CLEANUP


def test_each_row_gets_the_worst_verdict_of_its_probes_and_one_line():
    results = [
        _result(PASS, "batch-iam.a"),
        _result(FAIL, "batch-iam.a"),
        _result(PASS, "batch-iam.a"),
        _result(INCONCLUSIVE, "batch-iam.b"),
        _result(PASS, "batch-iam.b"),
        _result(PASS, "batch-iam.c"),
    ]
    assert framework.by_row(results) == {"batch-iam.a": FAIL, "batch-iam.b": INCONCLUSIVE, "batch-iam.c": PASS}
    out = io.StringIO()
    assert framework.summary(results, out) == EXIT_FAIL
    assert out.getvalue().splitlines()[-3:] == ["batch-iam.a  fail", "batch-iam.b  inconclusive", "batch-iam.c  pass"]


def test_act_prints_one_line_per_probe_with_its_row_and_marks_failed_undo_steps():
    def leaky(context, cleanup):
        cleanup.add("terminate service job j-1", lambda: (_ for _ in ()).throw(RuntimeError("denied")))
        return framework.passed("refused as it should be")

    out = io.StringIO()
    results = framework.act([_probe("one", run=leaky), _probe("two")], _context(), out)
    lines = [line for line in out.getvalue().splitlines() if "running" not in line]
    assert lines == [
        "batch-iam.x  one  pass  refused as it should be",
        "batch-iam.x  one  CLEANUP FAILED  terminate service job j-1: denied",
        "batch-iam.x  two  pass  fine",
    ]
    assert framework.exit_code(results) == EXIT_CLEANUP


def test_unknown_probe_or_row_is_a_usage_error(capsys):
    assert verify_live.main(["--only", "no-such-probe"], out=io.StringIO()) == EXIT_USAGE
    assert "no probe or row named ['no-such-probe']" in capsys.readouterr().err


def test_only_selects_by_probe_name_or_row():
    catalogue = Catalogue((_probe("a", "batch-iam.r1"), _probe("b", "batch-iam.r2"), _probe("c", "batch-iam.r2")))
    assert [p.name for p in framework.select(catalogue, ["batch-iam.r2"])] == ["b", "c"]
    assert [p.name for p in framework.select(catalogue, ["a"])] == ["a"]
    assert len(framework.select(catalogue, [])) == 3


def _package(tmp_path, monkeypatch, modules: dict[str, str]) -> types.ModuleType:
    """A package of probe modules on sys.path, as tests/live/probes is (a fresh name each call)."""
    name = f"extra_probes_{uuid.uuid4().hex}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


_AREA = """
    from tests.live.framework import Option, Probe, passed
    OPTIONS = [Option("--block-environment", "{help}")]
    PROBES = [Probe(name="{name}", row="batch-ce.x", does="d", passes_when="p", needs=("--block-environment",),
                    cost=lambda args: "c", run=lambda context, cleanup: passed("ok"))]
"""


def _area(name="block-update", help="the block's compute environment", options=True):
    source = _AREA.format(name=name, help=help)
    return source if options else source.replace(source.splitlines()[2], "")


def test_a_module_added_to_the_package_is_found_with_its_options(tmp_path, monkeypatch):
    """Another area adds a probe by adding a module: nothing else changes."""
    package = _package(
        tmp_path, monkeypatch, {"blocks": _area(), "_shared": "raise AssertionError('helpers are not scanned')"}
    )
    catalogue = framework.discover(package)
    assert [p.name for p in catalogue.probes] == ["block-update"]
    assert [o.flag for o in catalogue.options] == ["--block-environment"]


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        ({"one": _area("x"), "two": _area("x")}, r"probes named twice: \['x'\]"),
        ({"one": _area(options=False)}, r"need options no module declares: \['--block-environment'\]"),
        ({"one": _area("x"), "two": _area("y", help="another meaning")}, "--block-environment is declared twice"),
    ],
    ids=["probe-named-twice", "undeclared-option", "option-with-two-meanings"],
)
def test_discovery_refuses_what_would_make_the_register_or_the_command_line_ambiguous(
    tmp_path, monkeypatch, modules, message
):
    with pytest.raises(ValueError, match=message):
        framework.discover(_package(tmp_path, monkeypatch, modules))


# --- the register ------------------------------------------------------------------------------

_PROBE_NAME = re.compile(r"`verify-live: ([a-z0-9-]+)`")


def unprobed_rows(rows: list[register.Row], catalogue: Catalogue) -> list[str]:
    """Rows no page proves whose probe field names a probe that does not exist, or no probe and no
    reason why none is needed (``none: ...``)."""
    names = {p.name for p in catalogue.probes}
    problems = []
    for row in rows:
        if row.status not in ("undocumented", "contradicted"):
            continue
        probe = row.fields.get("probe", "-")
        named = _PROBE_NAME.findall(probe)
        if not named and not probe.startswith("none: "):
            problems.append(f"{row.id}: names no probe ({probe})")
        problems += [f"{row.id}: verify-live has no probe {name}" for name in named if name not in names]
    return problems


def test_every_register_row_no_page_proves_names_a_probe_that_exists():
    assert unprobed_rows(register.rows(), framework.discover(probes)) == []


def test_each_probe_checks_a_row_of_the_register_that_names_it():
    rows = {row.id: row for row in register.rows()}
    for probe in framework.discover(probes).probes:
        assert probe.row in rows, f"{probe.name}: no row {probe.row} in docs/aws-behaviour.md"
        row = rows[probe.row]
        assert probe.name in _PROBE_NAME.findall(row.fields["probe"]) or row.status == "documented", (
            f"{probe.row} does not name its probe {probe.name}"
        )


def test_the_register_check_finds_a_row_whose_probe_is_missing():
    text = textwrap.dedent(
        """
        ```text
        ### batch-iam.example: a fenced example is no row

        | status | undocumented |
        | probe | `verify-live: nowhere` |
        ```

        ## Batch: IAM and tagging (`batch-iam.*`)

        ### batch-iam.a: one

        | field | value |
        | --- | --- |
        | status | undocumented |
        | probe | `verify-live: tagged-submission`, `verify-live: gone` |

        ### batch-iam.b: two

        | field | value |
        | --- | --- |
        | status | contradicted |
        | probe | - |

        ### batch-iam.c: three

        | field | value |
        | --- | --- |
        | status | documented |
        | probe | - |
        """
    )
    catalogue = Catalogue((_probe("tagged-submission"),))
    assert unprobed_rows(register.parse(text), catalogue) == [
        "batch-iam.a: verify-live has no probe gone",
        "batch-iam.b: names no probe (-)",
    ]


def test_the_live_verification_table_of_the_security_page_names_every_probe_beside_its_row():
    """docs/security.md says what each probe's pass and fail mean: a probe missing there is one
    whose failure nobody can act on."""
    page = (register.ROOT / "docs" / "security.md").read_text()
    table = page.split("## Live verification", 1)[1].split("\n## ", 1)[0].splitlines()
    missing = [
        f"{probe.row}: {probe.name}"
        for probe in framework.discover(probes).probes
        if not any(line.startswith(f"| `{probe.row}`: ") and f"`{probe.name}`" in line for line in table)
    ]
    assert missing == []
