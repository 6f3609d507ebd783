"""A backend is its packages (issue 42): ``constructs_lib/backends/<name>/`` and the runtime's
``gpu_governance_runtime/backends/<name>``. No other file of the library or the runtime names it:
not its name (as a string, or a contract constant that is it or a group holding it), not a module
of its packages (imported, relative or absolute, or spelt as a string), not a public name it
exports (its construct, props or pool class). The rest asks the registry, and a new backend adds
its packages, one line to the list of packages, and its docs.

Beside a backend's packages only the list of packages names it, and, for the four backends that
had them before issue 42, the old import paths apps may use (thin re-exports)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import pytest

from constructs_lib.backends import BACKENDS
from gpu_governance_runtime import contract
from gpu_governance_runtime.backends import BACKENDS as RUNTIME_BACKENDS

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "constructs_lib"
RUNTIME = ROOT / "lambda" / "gpu_governance_runtime"
SOURCES = sorted([*LIBRARY.rglob("*.py"), *RUNTIME.rglob("*.py")])

# The lists of packages, one per side: the registries that import them.
LISTS = ("constructs_lib/backends/__init__.py", "lambda/gpu_governance_runtime/backends/__init__.py")
# The runtime's contract names the backends until they are declared in the runtime's packages.
CONTRACT = "lambda/gpu_governance_runtime/contract.py"
# The old import paths of the constructs (docs/architecture.md, "Adding a backend"), kept as re-exports.
LEGACY = {
    "constructs_lib/batch/__init__.py": ("batch_quota_share", "batch_fair_share"),
    "constructs_lib/hyperpod_eks/__init__.py": ("hyperpod_eks",),
    "constructs_lib/slurm/__init__.py": ("hyperpod_slurm",),
}


def owned_by(name: str) -> tuple[str, ...]:
    """The files and folders (relative to the repository) that are the backend's."""
    return (f"constructs_lib/backends/{name}/", f"lambda/gpu_governance_runtime/backends/{name}")


def may_name(path: str, name: str) -> bool:
    return path.startswith(owned_by(name)) or path in LISTS or path == CONTRACT or name in LEGACY.get(path, ())


def _constants(name: str) -> set[str]:
    """The contract's constants that are the backend, or a group of backends holding it (not all of them)."""
    return {
        constant
        for constant, value in vars(contract).items()
        if constant.isupper()
        and constant != "BACKENDS"
        and (value == name or (isinstance(value, tuple) and name in value and set(value) <= set(contract.BACKENDS)))
    }


def _module(path: Path) -> str:
    """The dotted module of a library or runtime file."""
    parts = path.relative_to(ROOT if path.is_relative_to(LIBRARY) else RUNTIME.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, tree: ast.AST) -> list[tuple[str, int]]:
    """(module, line) of every import in a file, relative ones resolved; ``from m import x`` as m.x."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return found


def namings(path: Path, source: str, name: str) -> list[str]:
    """Where ``source`` (the file at ``path``) names backend ``name``: ``line: how``."""
    tree = ast.parse(source)
    packages = (f"constructs_lib.backends.{name}", f"gpu_governance_runtime.backends.{name}")
    spelt = re.compile(rf"\bbackends[./]{re.escape(name)}\b")
    constants = _constants(name)
    exported = {n for names in BACKENDS[name].exports.values() for n in names} if name in BACKENDS else set()
    found = [
        f"{line}: imports {target}"
        for target, line in _imported(path, tree)
        if any(target == p or target.startswith(f"{p}.") for p in packages)
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value == name:
                found.append(f"{node.lineno}: the string {node.value!r}")
            elif spelt.search(node.value):
                found.append(f"{node.lineno}: a string naming its package")
        elif isinstance(node, ast.Name) and node.id in constants | exported:
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in constants | exported:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (named := {a.name for a in node.names} & (constants | exported)):
            found.append(f"{node.lineno}: imports {', '.join(sorted(named))}")
    return sorted(set(found))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('if pool.backend == "hyperpod_eks": pass', ["1: the string 'hyperpod_eks'"]),
        ("from gpu_governance_runtime.contract import HYPERPOD_EKS", ["1: imports HYPERPOD_EKS"]),
        ("ok = pool.backend in contract.HYPERPOD_BACKENDS", ["1: .HYPERPOD_BACKENDS"]),
        (
            "from constructs_lib.backends.hyperpod_eks import kubernetes",
            ["1: imports constructs_lib.backends.hyperpod_eks.kubernetes"],
        ),
        (
            "from ..backends.hyperpod_eks.construct import X",
            ["1: imports constructs_lib.backends.hyperpod_eks.construct.X"],
        ),
        ('importlib.import_module("constructs_lib.backends.hyperpod_eks.status")', ["1: a string naming its package"]),
        ("def f(pool: HyperPodEksPool): pass", ["1: HyperPodEksPool"]),
        ("from constructs_lib import HyperPodEksGovernance", ["1: imports HyperPodEksGovernance"]),
        # what asks the registry, and words for people, name nothing
        ('backend_of(pool).part("status")', []),
        ('"""What HyperPod EKS pools (hyperpod_eks) take."""', []),
        ("from gpu_governance_runtime.contract import BACKENDS", []),
    ],
)
def test_the_rule_sees_every_way_of_naming_a_backend(source, expected):
    assert namings(LIBRARY / "model" / "explain.py", source, "hyperpod_eks") == expected


@pytest.mark.parametrize("name", list(BACKENDS))
def test_no_file_but_its_packages_and_the_list_names_a_backend(name):
    found = {
        f"{path.relative_to(ROOT)}:{where}"
        for path in SOURCES
        if not may_name(str(path.relative_to(ROOT)), name)
        for where in namings(path, path.read_text(), name)
    }
    assert sorted(found) == [], (
        f"ask constructs_lib.backends (backend_of, backends_where, .part) instead of naming {name}"
    )


@pytest.mark.parametrize("name", list(BACKENDS))
def test_a_backends_pool_class_and_its_discriminator_are_its_own(name):
    # pydantic needs one literal per pool class: the backend's name, in its own package
    pool = BACKENDS[name].pool
    assert pool.__module__ == f"constructs_lib.backends.{name}.pool"
    assert get_args(pool.model_fields["backend"].annotation) == (name,)
    assert pool.model_fields["backend"].default == name


def test_every_backend_of_the_registry_has_its_packages():
    for name in BACKENDS:
        library, runtime = owned_by(name)
        assert (ROOT / library / "__init__.py").is_file(), name
        assert (ROOT / runtime).with_suffix(".py").is_file() or (ROOT / runtime / "__init__.py").is_file(), name


# What reaches a pool (the protocols of the runtime's backends/base.py): a class with these methods
# is one backend's adapter, observer, GPU-hour switch or queue.
REACHES_A_POOL = ({"read", "preempt", "resume", "start"}, {"enabled", "set"}, {"queued", "terminate"}, {"observe"})


def _reaching_classes(source: str) -> list[str]:
    """The classes of a runtime file (protocols apart) that reach a pool."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
        and not any(isinstance(base, ast.Name) and base.id == "Protocol" for base in node.bases)
        and any(methods <= {n.name for n in node.body if isinstance(n, ast.FunctionDef)} for methods in REACHES_A_POOL)
    ]


def test_what_reaches_a_pool_is_in_its_backends_runtime_package():
    # a backend's adapter, usage observer and GPU-hour switch are its own (issue 42): none in reclaim/
    outside = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in RUNTIME.rglob("*.py")
        if not any(str(path.relative_to(ROOT)).startswith(f"{owned_by(b)[1]}/") for b in contract.BACKENDS)
        for name in _reaching_classes(path.read_text())
    }
    assert sorted(outside) == []
    # and what the runtime's declarations hand the reclaim controller is defined in their packages
    # (or below them all, in backends/: the Kueue usage tick both Kueue backends share)
    for name, backend in RUNTIME_BACKENDS.items():
        limits = backend.gpu_hour_limits
        given = [backend.reclaim_adapter, backend.observe_usage, backend.usage_from_accounting]
        given += [limits.switch, limits.in_use, limits.queue] if limits else []
        for function in filter(None, given):
            assert function.__module__.startswith(
                (f"gpu_governance_runtime.backends.{name}", "gpu_governance_runtime.backends.base")
            ), (name, function)


def test_the_rule_sees_a_class_that_reaches_a_pool():
    assert _reaching_classes("class A:\n    def enabled(self): ...\n    def set(self, on): ...\n") == ["A"]
    assert _reaching_classes("class S(Protocol):\n    def enabled(self): ...\n    def set(self, on): ...\n") == []
