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
    ("constructs",),  # the backends' constructs (the "construct" role) and what they share
    ("batch", "hyperpod_eks", "slurm"),  # the constructs' old import paths: re-exports, kept for apps that use them
    ("member",),
    ("controllers",),
    ("organisation",),
    ("deployment",),
    ("simulator",),
    ("cli",),
)
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}
# A backend's package (constructs_lib/backends/<name>/) is a column through the layers: its
# descriptor (the package's __init__) sits with the registry, each other module in the layer of
# its role, the same name in every backend's package. No backend imports another's package.
ROLES = {
    "plan": "model",  # what the pool means in its scheduler (names, the plan), pure
    "kubernetes": "model",  # the Kubernetes objects the pool's teams get, pure
    "construct": "constructs",  # the construct that deploys one pool, and its props
    "member": "member",  # the members' submission helpers
    "sdk": "member",
}
# Modules of backends/ that are no backend's: what several backends' constructs share.
SHARED = {"backends.batch_queue": "constructs"}
MODEL_ORDER = (
    "base",
    ("instance_types", "quota"),
    "capacity",
    "organisation",
    ("loader", "policy", "props"),
    ("explain", "edit"),
)
MODEL_RANK = {m: r for r, ms in enumerate(MODEL_ORDER) for m in ((ms,) if isinstance(ms, str) else ms)}
BACKENDS = sorted(p.name for p in (PACKAGE / "backends").iterdir() if (p / "__init__.py").is_file())


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


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
            # `from <package> import x` imports the module x where x is one, else from the package.
            targets = [f"{target}.{a.name}" if _is_module(f"{target}.{a.name}") else target for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found += [(t, node.lineno, id(node) in typing_only) for t in targets if t.startswith("constructs_lib.")]
    return found


def _within(module: str) -> str:
    """``module`` below ``constructs_lib.`` (``backends.hyperpod_eks.construct``), or "" for the root."""
    return module.partition(".")[2]


def _layer(module: str) -> str:
    """The layer (a name of LAYERS) of a module of the package, by its dotted name."""
    inner = _within(module)
    parts = inner.split(".")
    if inner in SHARED:
        return SHARED[inner]
    if parts[0] == "backends" and len(parts) > 2 and parts[1] in BACKENDS:
        return ROLES[parts[2]]
    return parts[0]


def _backend(module: str) -> str | None:
    """The backend whose package holds ``module``, if one does."""
    parts = _within(module).split(".")
    return parts[1] if parts[0] == "backends" and len(parts) > 1 and parts[1] in BACKENDS else None


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.name != "__init__.py")


def test_the_layers_name_every_package():
    packages = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in SOURCES}
    assert packages <= set(RANK), "a new package or module needs a place in docs/architecture.md's layers"
    for path in SOURCES:
        assert _layer(_dotted(path)) in RANK, (
            f"{path.relative_to(PACKAGE)} has no layer: a new role of a backend's module?"
        )


def _wrong_way(path: Path, source: str) -> list[str]:
    module = _dotted(path)
    own, own_backend = _layer(module), _backend(module)
    wrong = []
    for target, line, _typing_only in _imports(path, source):
        if not _within(target):
            continue
        other, other_backend = _layer(target), _backend(target)
        if other_backend and own_backend and other_backend != own_backend:
            wrong.append(f"line {line}: {target} (backend {other_backend}) from backend {own_backend}")
        elif other != own and RANK[other] >= RANK[own]:
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
        ("nag/cfn.py", "from constructs_lib.backends.batch_queue import TEAM_TAG\n"),  # the pack on a construct module
        (
            "backends/batch_quota_share/construct.py",
            "from constructs_lib.backends.hyperpod_slurm.plan import slurm_plan\n",
        ),  # another backend
        ("backends/hyperpod_eks/__init__.py", "from . import construct\n"),  # a descriptor on its own construct
        ("model/organisation.py", "from constructs_lib.backends.hyperpod_eks import construct\n"),
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
