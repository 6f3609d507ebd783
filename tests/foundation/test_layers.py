"""The one-way import rule of docs/architecture.md, read from the source: a package imports only
from the layers below it, never from a layer above and never from a sibling backend; inside the
model, each module only from those before it. Imports under ``if TYPE_CHECKING:`` count as
well: an annotation is an arrow too, and one may point either way only inside one layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "constructs_lib"

# Bottom up. Packages in one tuple are siblings: they must not import each other.
LAYERS = (
    ("core",),
    ("backends",),
    ("model",),
    ("nag",),
    ("tenancy",),
    ("batch", "hyperpod_eks", "slurm"),
    ("member",),
    ("controllers",),
    ("organisation",),
    ("deployment",),
    ("simulator",),
    ("cli",),
)
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}
MODEL_ORDER = (
    "base",
    ("instance_types", "quota", "run_limits"),
    ("capacity", "slurm"),
    "organisation",
    ("loader", "policy", "props"),
    ("explain", "edit"),
)
MODEL_RANK = {m: r for r, ms in enumerate(MODEL_ORDER) for m in ((ms,) if isinstance(ms, str) else ms)}


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, source: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, under TYPE_CHECKING) for every constructs_lib import in a file."""
    tree = ast.parse(source)
    module = _dotted(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for statement in block.body
        for node in ast.walk(statement)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from <package> import x` imports the module x; `from .m import x` imports from m.
            targets = (
                [target] if node.module and target != "constructs_lib" else [f"{target}.{a.name}" for a in node.names]
            )
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found += [(t, node.lineno, id(node) in typing_only) for t in targets if t.startswith("constructs_lib.")]
    return found


def _top(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.name != "__init__.py")


def test_the_layers_name_every_package():
    packages = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in SOURCES}
    assert packages == set(RANK), "a new package or module needs a place in docs/architecture.md's layers"


def _wrong_way(path: Path, source: str) -> list[str]:
    own = _top(_dotted(path))
    wrong = []
    for target, line, _typing_only in _imports(path, source):
        other = _top(target)
        if other == own or other == "":
            continue
        if RANK[other] >= RANK[own]:
            wrong.append(f"line {line}: {target} ({other}, layer {RANK[other]}) from layer {RANK[own]}")
    return wrong


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_one_way(path: Path):
    assert _wrong_way(path, path.read_text()) == []


@pytest.mark.parametrize("path", sorted((PACKAGE / "model").glob("*.py")), ids=lambda p: p.name)
def test_the_model_builds_bottom_up(path: Path):
    if path.name == "__init__.py":
        return
    own = MODEL_RANK[path.stem]
    wrong = [
        f"line {line}: {target}"
        for target, line, _typing_only in _imports(path, path.read_text())
        if target.startswith("constructs_lib.model.") and MODEL_RANK[target.split(".")[2]] >= own
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("nag/cfn.py", "from constructs_lib.batch import TEAM_TAG\n"),  # the pack on a construct module
        ("batch/queues.py", "from constructs_lib.slurm import slurm_plan\n"),  # a sibling backend
        ("model/base.py", "def f():\n    from ..tenancy import TeamTenancy\n"),  # upward, relative, in a function
        ("core/placement.py", "from constructs_lib import model\n"),  # core on the model
        (
            "core/chargeback.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from constructs_lib.model import Team\n",
        ),  # type-only, upward
    ],
)
def test_the_rule_refuses_a_wrong_way_import(module: str, source: str):
    assert _wrong_way(PACKAGE / module, source) != []
