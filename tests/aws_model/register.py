"""The register of AWS behaviour (docs/aws-behaviour.md) read into rows, and the checks its tests
(tests/aws_model/test_register.py) run on the repository: every row complete, every ``[aws: <id>]``
citation naming a row, every file a row names citing it back, and the models in this folder
naming a row for each AWS operation they play and holding no AWS page address of their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "aws-behaviour.md"
FIELDS = ("status", "page", "quote", "relied on by", "model", "tested by", "probe", "if AWS does otherwise")
STATUSES = ("documented", "undocumented", "contradicted")
NONE = "-"
ROW_ID = r"[a-z0-9-]+\.[a-z0-9][a-z0-9-]*"
# A citation beside the code that relies on a row: `[aws: ` + the row id + `]`
CITATION = re.compile(rf"\[aws: ({ROW_ID})\]")
# A section heading declares the prefixes of its rows: ## Batch: job queues ... (`batch.*`)
SECTION = re.compile(r"^## .*?((?:`[a-z0-9-]+\.\*`(?:, )?)+)\)\s*$")
HEADING = re.compile(rf"^### ({ROW_ID}): (\S.*)$")
CELL = re.compile(r"^\| ([^|]+?) \| (.*) \|$")
PATH = re.compile(r"`([^`]+)`")
# A probe: the name of a `make verify-live` probe, or "none: " and why either answer is safe.
PROBE = re.compile(r"^`verify-live: ([a-z0-9-]+)`|^none: \S")
# Where citations may stand (the library, the controllers, the tests, the docs).
CITED_IN = ("constructs_lib", "lambda", "tests", "docs", "README.md", "benchmarks")
# Addresses of AWS's own documentation: in a model they stand only in a row.
AWS_PAGE = re.compile(r"https?://(?:docs\.aws\.amazon\.com|docs\.amazonaws\.cn|aws\.amazon\.com)/\S*")


@dataclass(frozen=True)
class Row:
    id: str
    what: str
    section: str  # the prefix its section heading declares (``batch``)
    line: int
    fields: dict[str, str]

    @property
    def status(self) -> str:
        return self.fields.get("status", "")

    def paths(self, field: str) -> list[str]:
        """The repository paths a field names (backticked; ``path::test`` gives the path)."""
        value = self.fields.get(field, NONE)
        return [] if value == NONE else [p.split("::", 1)[0] for p in PATH.findall(value)]


class RegisterError(ValueError):
    pass


def parse(text: str) -> list[Row]:
    """The rows of the page, in order. A malformed row (a table line that is not a field, a row
    outside a section) raises: the page is the register, and a row nobody can read is no row."""
    rows: list[Row] = []
    prefixes: tuple[str, ...] = ()
    current: tuple[str, str, int, dict[str, str]] | None = None
    in_fence = False

    def close() -> None:
        nonlocal current
        if current is not None:
            row_id, what, line, fields = current
            rows.append(Row(row_id, what, row_id.split(".", 1)[0], line, fields))
        current = None

    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if line.startswith("## "):
            close()
            section = SECTION.match(line)
            prefixes = tuple(p.strip("`.*") for p in re.findall(r"`[a-z0-9-]+\.\*`", line)) if section else ()
            continue
        heading = HEADING.match(line)
        if heading:
            close()
            row_id = heading[1]
            if row_id.split(".", 1)[0] not in prefixes:
                raise RegisterError(
                    f"docs/aws-behaviour.md:{number}: row {row_id} stands outside its section"
                    f" ({', '.join(p + '.*' for p in prefixes) or 'no section'}) - move it under the heading of `{row_id.split('.', 1)[0]}.*`"
                )
            current = (row_id, heading[2], number, {})
            continue
        if current is not None and line.startswith("|"):
            cell = CELL.match(line)
            if cell is None:
                raise RegisterError(f"docs/aws-behaviour.md:{number}: not a `| field | value |` line: {line!r}")
            name, value = cell[1].strip(), cell[2].strip()
            if (name, value) in (("field", "value"), ("---", "---")):
                continue
            if name in current[3]:
                raise RegisterError(f"docs/aws-behaviour.md:{number}: row {current[0]} has `{name}` twice")
            current[3][name] = value
        elif current is not None and line.startswith("#"):
            close()
    close()
    return rows


def rows() -> list[Row]:
    return parse(PAGE.read_text())


def problems(rows: Iterable[Row], root: Path = ROOT) -> Iterator[str]:
    """What is wrong with each row, one line each: fields, status, probe, and the files it names
    (each must exist, and each file under ``relied on by`` and ``model`` must cite the row)."""
    seen: set[str] = set()
    for row in rows:
        where = f"docs/aws-behaviour.md:{row.line}: {row.id}"
        if row.id in seen:
            yield f"{where}: the id is used twice - row ids are unique"
        seen.add(row.id)
        if tuple(row.fields) != FIELDS:
            yield f"{where}: fields {list(row.fields)} - every row has, in order, {list(FIELDS)}"
            continue
        empty = [name for name, value in row.fields.items() if not value]
        if empty:
            yield f"{where}: empty {empty} - write `-` where a field does not apply"
        if row.status not in STATUSES:
            yield f"{where}: status ({row.status}) - one of {', '.join(STATUSES)}"
        documented = row.status == "documented"
        if row.fields["page"] == NONE and row.status != "undocumented":
            yield f"{where}: page (-) - a {row.status} row names the page that says it"
        if row.fields["page"] != NONE and not all(p.startswith("https://") for p in row.fields["page"].split(", ")):
            yield f"{where}: page ({row.fields['page']}) - https addresses, separated by `, `"
        if row.status != "undocumented" and not row.fields["quote"].startswith('"'):
            yield f"{where}: quote ({row.fields['quote'][:40]}) - a {row.status} row quotes its page in double quotes"
        probe = row.fields["probe"]
        if documented and probe != NONE:
            yield f"{where}: probe ({probe}) - a documented row needs none (-)"
        named = PROBE.match(probe)
        if not documented and not named:
            yield (
                f"{where}: probe ({probe}) - an {row.status} row names its probe as `verify-live: <name>`"
                " or says `none: ` and why the design is safe whichever way AWS behaves"
            )
        elif (
            named
            and named[1]
            and not any(f'"{named[1]}"' in f.read_text() for f in (root / "tests" / "live").rglob("*.py"))
        ):
            yield f"{where}: probe verify-live: {named[1]} is not a probe of tests/live/ - name one `make verify-live` runs"
        if row.paths("relied on by") == [] and row.paths("model") == []:
            yield f"{where}: nothing relies on it - name the code under `relied on by` or the model under `model`"
        if row.paths("tested by") == []:
            yield f"{where}: tested by (-) - name the test that would fail if the code stopped relying on it correctly"
        for field in ("relied on by", "model", "tested by"):
            for path in row.paths(field):
                file = root / path
                if not file.is_file():
                    yield f"{where}: {field} names {path}, which does not exist"
                elif field != "tested by" and f"[aws: {row.id}]" not in file.read_text():
                    yield f"{where}: {field} names {path}, which does not cite it - add `[aws: {row.id}]` beside the code"
        for test in PATH.findall(row.fields["tested by"]):
            path, _, name = test.partition("::")
            file = root / path
            if name and file.is_file() and not re.search(rf"def {re.escape(name.split('[')[0])}\(", file.read_text()):
                yield f"{where}: tested by names {test}, and {path} has no such test"


def citations(root: Path = ROOT) -> Iterator[tuple[str, int, str]]:
    """Every ``[aws: <id>]`` in the library, the controllers, the tests and the docs: (file, line, id)."""
    for top in CITED_IN:
        base = root / top
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for file in files:
            if file.suffix not in (".py", ".md", ".sh", ".yaml", ".json") or not file.is_file():
                continue
            for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
                for match in CITATION.finditer(line):
                    yield str(file.relative_to(root)), number, match[1]


def model_files(root: Path = ROOT) -> list[Path]:
    """The models of AWS and the scenarios that drive them (not their tests, not this module)."""
    here = root / "tests" / "aws_model"
    return [f for f in sorted(here.glob("*.py")) if not f.name.startswith("test_") and f.name not in ("register.py",)]


# The services whose operations the models play: a method named after one of their operations
# (``submit_job``, ``_put_item``) is a rule of AWS and cites its row.
MODELLED_SERVICES = ("batch", "ssm", "ec2", "ecs", "sagemaker", "dynamodb", "events", "lambda", "cloudwatch")


def operation_names() -> frozenset[str]:
    import botocore.session
    from botocore import xform_name

    session = botocore.session.get_session()
    return frozenset(
        xform_name(name) for service in MODELLED_SERVICES for name in session.get_service_model(service).operation_names
    )


def uncited_operations(file: Path, operations: frozenset[str]) -> Iterator[str]:
    """Methods of ``file``'s classes that play an AWS operation and cite no row."""
    import ast

    source = file.read_text()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for method in node.body:
            # boto3's methods take keywords only; a dispatched handler takes the whole ``request``. A method
            # with other positional parameters (``create_table(name, *, key)``) sets the model up.
            positional = [a.arg for a in method.args.args[1:]] if isinstance(method, ast.FunctionDef) else []
            if (
                isinstance(method, ast.FunctionDef)
                and method.name.lstrip("_") in operations
                and positional in ([], ["request"])
            ) and not CITATION.search(ast.get_source_segment(source, method) or ""):
                yield f"{file.name}:{method.lineno}: {node.name}.{method.name} plays an AWS operation and cites no row"
