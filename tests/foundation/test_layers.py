"""The one-way import rule of docs/architecture.md, read from the source: a package imports only
from the layers below it, never from a layer above and never from another backend's package;
inside the model, each module only from those before it. Imports under ``if TYPE_CHECKING:``
count as well: an annotation is an arrow too, and one may point either way only inside one
layer. A backend's modules are loaded by role (``Backend.part("audit")``): that is an arrow too,
from the caller to the role's layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from constructs_lib.backends.base import PARTS

PACKAGE = Path(__file__).resolve().parents[2] / "constructs_lib"

# Bottom up, each a tuple of dotted prefixes below constructs_lib (a module's layer is its
# longest prefix's). Packages in one tuple are siblings: they must not import each other.
LAYERS = (
    ("core",),
    ("model.base", "model.quota", "model.pools", "model.run_limits"),  # what every pool is made of
    # the registry, the descriptor and each backend's declaration (and pool class); the registry of capacity kinds
    ("backends", "capacity_kinds"),
    ("model",),
    ("nag",),
    ("tenancy",),
    ("constructs",),  # the backends' constructs (their "construct" module) and what they share
    ("batch", "hyperpod_eks", "slurm"),  # the constructs' old import paths: re-exports, kept for apps that use them
    ("member",),
    ("controllers",),
    ("organisation",),
    ("deployment",),
    ("simulator",),
    ("cli",),
)
RANK = {prefix: rank for rank, prefixes in enumerate(LAYERS) for prefix in prefixes}
# A backend's package (constructs_lib/backends/<name>/) is a column through the layers: its
# declaration (the package's __init__) sits with the registry, each module named for a part
# (backends/base.py PARTS) in the layer of the code that loads it, and any other module of its own
# in the lowest layer its imports allow. No backend imports another's package.
ROLES = {
    "checks": "model",  # model/organisation.py asks it
    "construct": "constructs",  # deployment builds with it
    "kueue": "tenancy",  # the names of a team's Kueue objects (a Kubernetes tenancy's): the simulator's Kueue importer asks it
    "reclaim": "controllers",  # the reclaim controller and the capacity stack ask it
    "member": "member",  # constructs_lib.member re-exports it
    "discovery": "member",  # member/discovery.py asks it
    "audit": "organisation",  # organisation/audit.py asks it
    "status": "cli",  # cli/status.py asks it
    "submit": "cli",  # cli/member.py asks it
    "command": "cli",  # cli/main.py adds its commands
}
# Modules of backends/ that are no backend's: what several backends' constructs share.
SHARED = {"backends.batch_queue": "constructs"}
MODEL_ORDER = (
    "base",
    "run_limits",
    ("instance_types", "quota", "pools"),
    ("capacity", "teams"),
    ("guardrails", "projects", "pool_checks"),
    "principals",
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
    """(imported module, line, under TYPE_CHECKING) for every constructs_lib import in a file, and
    every backend module it loads by role (``.part("audit")``, as ``constructs_lib.backends.*.audit``)."""
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
        elif _loads_part(node):
            targets = [f"constructs_lib.backends.*.{node.args[0].value}"]
        else:
            continue
        found += [(t, node.lineno, id(node) in typing_only) for t in targets if t.startswith("constructs_lib.")]
    return found


def _loads_part(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "part"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
    )


def _within(module: str) -> str:
    """``module`` below ``constructs_lib.`` (``backends.hyperpod_eks.construct``), or "" for the root."""
    return module.partition(".")[2]


def _backend(module: str) -> str | None:
    """The backend whose package holds ``module``, if one does (``*``: any backend's, by role)."""
    parts = _within(module).split(".")
    in_one = parts[0] == "backends" and len(parts) > 1 and (parts[1] in BACKENDS or parts[1] == "*")
    return parts[1] if in_one else None


def _prefix_layer(inner: str) -> str:
    parts = inner.split(".")
    return next(".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in RANK)


def _helper_layers() -> dict[str, str]:
    """The layer of each module of a backend's package that is neither its declaration nor a part:
    the highest layer it imports from (its own package's helpers included), else the lowest."""
    helpers = {
        _dotted(path): path
        for backend in BACKENDS
        for path in (PACKAGE / "backends" / backend).glob("*.py")
        if path.stem not in ROLES and path.name != "__init__.py"
    }
    layers = dict.fromkeys(helpers, LAYERS[0][0])
    changed = True
    while changed:  # a helper importing a helper takes its layer: settle until nothing moves
        changed = False
        for module, path in helpers.items():
            imported = [_layer(target, layers) for target, _, _ in _imports(path, path.read_text()) if _within(target)]
            highest = max(imported, key=RANK.__getitem__, default=layers[module])
            if RANK[highest] > RANK[layers[module]]:
                layers[module], changed = highest, True
    return layers


def _layer(module: str, helpers: dict[str, str] | None = None) -> str:
    """The layer (a prefix of LAYERS) of a module of the package, by its dotted name."""
    inner = _within(module)
    parts = inner.split(".")
    if inner in SHARED:
        return SHARED[inner]
    if _backend(module) and len(parts) > 2:
        if parts[2] in ROLES:
            return ROLES[parts[2]]
        return (HELPERS if helpers is None else helpers)[module]
    return _prefix_layer(inner)


HELPERS = _helper_layers()
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.name != "__init__.py")


def test_the_layers_name_every_package_and_every_part():
    for path in SOURCES:
        assert _layer(_dotted(path)) in RANK, (
            f"{path.relative_to(PACKAGE)} has no layer in docs/architecture.md's layers"
        )
    assert set(ROLES) == set(PARTS), "a part of a backend needs the layer of the code that loads it"


def _top(layer: str) -> str:
    return layer.split(".")[0]


def _wrong_way(path: Path, source: str) -> list[str]:
    module = _dotted(path)
    own, own_backend = _layer(module), _backend(module)
    wrong = []
    for target, line, _typing_only in _imports(path, source):
        if not _within(target):
            continue
        other, other_backend = _layer(target), _backend(target)
        if other_backend not in (None, "*") and own_backend and other_backend != own_backend:
            wrong.append(f"line {line}: {target} (backend {other_backend}) from backend {own_backend}")
        elif RANK[other] > RANK[own] or (RANK[other] == RANK[own] and _top(other) != _top(own)):
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
        ("backends/hyperpod_eks/__init__.py", "from . import construct\n"),  # a declaration on its own construct
        ("backends/hyperpod_eks/__init__.py", "def f(b):\n    return b.part('audit')\n"),  # ... or a part, by role
        ("model/organisation.py", "def f(b):\n    return b.part('construct').build_pool\n"),  # the model on a construct
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


def test_a_backends_own_module_takes_the_layer_of_what_it_imports():
    assert (
        HELPERS["constructs_lib.backends.hyperpod_eks.pool"] == "model.base"
    )  # the pool class: beside the model's types
    # the team's Kubernetes objects, named as HyperPod names them: over the shared ones (tenancy.kubernetes)
    assert HELPERS["constructs_lib.backends.hyperpod_eks.kubernetes"] == "tenancy"
