"""The whole public API is importable from `constructs_lib`, and the docs import it from there."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import constructs_lib

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def defined_in() -> dict[str, str]:
    """Every public name and the module that defines it: the root's table and the backends' exports."""
    return {
        **{name: f"constructs_lib.{module}" for name, module in constructs_lib._MODULE_OF.items()},
        **constructs_lib._backend_exports(),
    }


def test_all_lists_every_lazy_name_once_and_sorted():
    assert constructs_lib.__all__ == sorted(set(constructs_lib.__all__), key=lambda n: (not n.isupper(), n))
    assert set(constructs_lib.__all__) == set(defined_in())
    # a backend's name is no name of the root's own table: one place for each
    assert not set(constructs_lib._MODULE_OF) & set(constructs_lib._backend_exports())


@pytest.mark.parametrize("name", constructs_lib.__all__)
def test_every_public_name_resolves_to_its_definition(name):
    module = importlib.import_module(defined_in()[name])
    assert getattr(constructs_lib, name) is getattr(module, name)


def test_every_backend_exports_its_pool_class_and_construct():
    from constructs_lib.backends import BACKENDS

    for backend in BACKENDS.values():
        assert backend.exports["pool"] == (backend.pool.__name__,), backend.name
        assert getattr(constructs_lib, backend.pool.__name__) is backend.pool
        assert backend.exports["construct"], backend.name


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        constructs_lib.NoSuchThing  # noqa: B018


def test_type_checking_imports_match_the_lazy_table():
    tree = ast.parse(Path(constructs_lib.__file__).read_text())
    (block,) = (node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {alias.name: node.module for node in block.body for alias in node.names}
    assert imported == dict(constructs_lib._MODULE_OF)


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python(?: \w+)?\n(.*?)```", path.read_text(), re.S)


def library_imports(path: Path) -> list[str]:
    return [
        statement
        for block in python_blocks(path)
        for statement in re.findall(r"^from constructs_lib[.\w]* import [^\n(]+(?:\([^)]*\))?", block, re.M)
    ]


def test_docs_import_from_the_package_root_and_the_imports_work():
    statements = {str(path.relative_to(ROOT)): library_imports(path) for path in DOCUMENTS}
    assert sum(map(len, statements.values())) >= 6  # README, capacity, delivery, reclaim, slurm, governance-checks
    for document, imports in statements.items():
        for statement in imports:
            assert statement.startswith("from constructs_lib import "), f"{document}: {statement}"
            exec(statement, {})  # noqa: S102  every name it imports exists


FIRST_IMPORT = """
import importlib, json, pkgutil, sys
import constructs_lib
names = sorted(m.name for m in pkgutil.walk_packages(constructs_lib.__path__, "constructs_lib.") if not m.name.endswith(".__main__"))
failures = {}
for name in names:
    for loaded in [m for m in sys.modules if m.startswith("constructs_lib.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as error:
        failures[name] = repr(error)
print(json.dumps([len(names), failures]))
"""


def test_every_module_imports_first_in_a_fresh_package():
    # The package root imports nothing, so no import order hides a cycle between submodules.
    result = subprocess.run(
        [sys.executable, "-c", FIRST_IMPORT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")])},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    count, failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert count > 30
    assert failures == {}
