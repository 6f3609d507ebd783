"""The register of AWS behaviour (docs/aws-behaviour.md, read by tests/aws_model/register.py):
every row complete, every citation naming a row, every file a row names citing it back, and no
rule of a model without its row. The checks are shown to fail on what they are meant to catch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.aws_model import register

CITE = "[aws: "  # built up in the tests below, so this file cites no row it does not mean


def _row(row_id: str = "batch.example", **fields: str) -> str:
    values = {
        "status": "documented",
        "page": "https://docs.example.com/batch/API_SubmitJob.html",
        "quote": '"the page\'s words"',
        "relied on by": "`lib.py`",
        "model": "-",
        "tested by": "`test_lib.py::test_it`",
        "probe": "-",
        "if AWS does otherwise": "the test fails",
        **{k.replace("_", " "): v for k, v in fields.items()},
    }
    table = "".join(f"| {k} | {v} |\n" for k, v in values.items() if v is not None)
    return f"### {row_id}: what the code relies on\n\n| field | value |\n| --- | --- |\n{table}\n"


def _page(*rows: str) -> str:
    return "# The register\n\n## Batch (`batch.*`)\n\n" + "".join(rows) + "## SSM (`ssm.*`)\n"


def _tree(tmp_path: Path, row_id: str = "batch.example") -> Path:
    (tmp_path / "lib.py").write_text(f"x = 1  # {CITE}{row_id}]\n")
    (tmp_path / "test_lib.py").write_text("def test_it():\n    assert True\n")
    return tmp_path


# --- the register as it stands ---------------------------------------------------------------------


def test_every_row_of_the_register_is_complete_and_cited_by_what_it_names():
    rows = register.rows()
    assert len(rows) >= 30  # the page is read (a parser that found nothing would pass the next line)
    assert list(register.problems(rows)) == []


def test_every_citation_in_the_repository_names_a_row():
    ids = {row.id for row in register.rows()}
    cited = list(register.citations())
    assert len(cited) >= 30
    assert [f"{file}:{line}: {CITE}{row_id}] names no row" for file, line, row_id in cited if row_id not in ids] == []


def test_no_model_holds_an_aws_page_address_of_its_own():
    """A model's rule names its row; the page's address and words stand in the row only."""
    here = Path(register.__file__).parent
    found = [
        f"{f.name}:{n}: {m[0]}"
        for f in sorted(here.glob("*.py"))
        for n, line in enumerate(f.read_text().splitlines(), 1)
        for m in register.AWS_PAGE.finditer(line)
    ]
    assert found == []


def test_every_aws_operation_a_model_plays_cites_its_row():
    operations = register.operation_names()
    assert {"submit_job", "cancel_command", "put_item", "describe_instances"} <= operations
    files = register.model_files()
    assert {f.name for f in files} >= {"batch.py", "ssm.py", "dynamodb.py", "ec2.py", "hyperpod_slurm.py"}
    assert [problem for f in files for problem in register.uncited_operations(f, operations)] == []


# --- the checks catch what they are for --------------------------------------------------------------


def test_a_complete_row_whose_files_cite_it_has_no_problem(tmp_path):
    assert list(register.problems(register.parse(_page(_row())), root=_tree(tmp_path))) == []


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"probe": None}, "every row has, in order"),
        ({"status": "probably"}, "status (probably) - one of documented, undocumented, contradicted"),
        ({"quote": "the page's words"}, "quotes its page in double quotes"),
        ({"page": "-"}, "names the page that says it"),
        ({"page": "docs.aws.amazon.com/x"}, "https addresses"),
        ({"probe": "`verify-live: x`"}, "a documented row needs none"),
        ({"status": "undocumented", "quote": "-"}, "names its probe as `verify-live: <name>`"),
        ({"status": "contradicted", "probe": "we hope"}, "names its probe"),
        (
            {"status": "undocumented", "quote": "-", "probe": "`verify-live: no-such-probe`"},
            "is not a probe of tests/live/",
        ),
        ({"relied_on_by": "-"}, "nothing relies on it"),
        ({"tested_by": "-"}, "tested by (-)"),
        ({"relied_on_by": "`gone.py`"}, "names gone.py, which does not exist"),
        ({"tested_by": "`test_lib.py::test_other`"}, "test_lib.py has no such test"),
        ({"model": "`test_lib.py`"}, "names test_lib.py, which does not cite it"),
        ({"if_AWS_does_otherwise": ""}, "empty ['if AWS does otherwise']"),
    ],
)
def test_a_row_that_breaks_a_rule_is_named_with_what_is_allowed(tmp_path, fields, expected):
    found = list(register.problems(register.parse(_page(_row(**fields))), root=_tree(tmp_path)))
    assert any(expected in problem for problem in found), found
    assert all(problem.startswith("docs/aws-behaviour.md:5: batch.example: ") for problem in found), found


def test_an_undocumented_row_may_name_a_probe_of_verify_live(tmp_path):
    (_tree(tmp_path) / "tests" / "live").mkdir(parents=True)
    (tmp_path / "tests" / "live" / "verify_live.py").write_text('PROBES = {"batch-disabled-share": None}\n')
    row = _row(status="undocumented", page="-", quote="-", probe="`verify-live: batch-disabled-share`")
    assert list(register.problems(register.parse(_page(row)), root=tmp_path)) == []


def test_an_undocumented_row_may_say_why_either_answer_is_safe_instead_of_a_probe(tmp_path):
    row = _row(status="undocumented", page="-", quote="-", probe="none: the controller reads it back either way")
    assert list(register.problems(register.parse(_page(row)), root=_tree(tmp_path))) == []


def test_a_row_id_used_twice_is_named(tmp_path):
    found = list(register.problems(register.parse(_page(_row(), _row())), root=_tree(tmp_path)))
    assert any("the id is used twice" in problem for problem in found)


def test_a_row_outside_its_section_or_a_broken_table_line_is_refused():
    with pytest.raises(register.RegisterError, match=r"row ssm\.example stands outside its section \(batch\.\*\)"):
        register.parse(_page(_row("ssm.example")))
    with pytest.raises(register.RegisterError, match="not a `| field | value |` line"):
        register.parse(_page(_row().replace("| status | documented |", "| status | documented")))


def test_an_example_in_a_fenced_block_is_no_row():
    assert register.parse("## Batch (`batch.*`)\n\n```text\n" + _row("batch.fenced") + "```\n") == []


def test_a_citation_of_a_missing_row_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(f"relies on {CITE}batch.no-such-row] here\n")
    assert list(register.citations(tmp_path)) == [("docs/page.md", 1, "batch.no-such-row")]


def test_a_modelled_operation_without_its_row_is_found(tmp_path):
    model = tmp_path / "fake.py"
    model.write_text(
        "class FakeBatch:\n"
        "    def submit_job(self, **request):\n        return {}\n"
        f"    def terminate_job(self, **request):\n        # {CITE}batch.terminate-job]\n        return {{}}\n"
        "    def advance(self, seconds):\n        pass\n"
    )
    found = list(register.uncited_operations(model, register.operation_names()))
    assert found == ["fake.py:2: FakeBatch.submit_job plays an AWS operation and cites no row"]
