"""A capacity kind is its modules (issue 42): ``constructs_lib/capacity_kinds/<name>.py`` in the
library and ``gpu_governance_runtime/planners/kinds/<name>.py`` in the runtime. No other file of
the library or the runtime names it: not its name (the window's ``market``), not the kind of an
offering it sells (a new reservation or an extension, compared or set as ``kind=``), not its
modules (imported, relative or absolute, or spelt as a string). The rest asks the registries
(``kind_of``, ``kind_named``, ``kind_of_offering``, ``KINDS``), and a new kind adds its two
modules, one line to each list and its docs (docs/architecture.md, "Adding a capacity kind")."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from constructs_lib.capacity_kinds import KINDS as LIBRARY_KINDS
from gpu_governance_runtime import contract
from gpu_governance_runtime.planners.kinds import KINDS as RUNTIME_KINDS, kind_of_offering
from gpu_governance_runtime.planners.offers import Offering
from tests.foundation.test_backend_ownership import LIBRARY, ROOT, SOURCES, _imported

LISTS = ("constructs_lib/capacity_kinds/__init__.py", "lambda/gpu_governance_runtime/planners/kinds/__init__.py")


def owned_by(name: str) -> tuple[str, ...]:
    """The kind's own modules (relative to the repository)."""
    return (f"constructs_lib/capacity_kinds/{name}.py", f"lambda/gpu_governance_runtime/planners/kinds/{name}.py")


def _compared_or_set(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are compared (alone or in a tuple, list or set) or given as ``kind=``."""
    found = set()
    for node in ast.walk(tree):
        operands = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.keyword) and node.arg == "kind":
            operands = [node.value]
        for operand in operands:
            items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            found |= {id(item) for item in items if isinstance(item, ast.Constant)}
    return found


def namings(path: Path, source: str, name: str, offering_kinds: tuple[str, ...]) -> list[str]:
    """Where ``source`` (the file at ``path``) names kind ``name``: ``line: how``."""
    tree = ast.parse(source)
    modules = (f"constructs_lib.capacity_kinds.{name}", f"gpu_governance_runtime.planners.kinds.{name}")
    spelt = re.compile(rf"\b(capacity_kinds|kinds)[./]{re.escape(name)}\b")
    found = [
        f"{line}: imports {target}"
        for target, line in _imported(path, tree)
        if any(target == m or target.startswith(f"{m}.") for m in modules)
    ]
    compared = _compared_or_set(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if node.value == name:
            found.append(f"{node.lineno}: the string {node.value!r}")
        elif node.value in offering_kinds and id(node) in compared:
            found.append(f"{node.lineno}: the offering kind {node.value!r}")
        elif spelt.search(node.value):
            found.append(f"{node.lineno}: a string naming its module")
    return sorted(set(found))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('if window.market == "training_plan": pass', ["1: the string 'training_plan'"]),
        ('m = {"market": "training_plan"}', ["1: the string 'training_plan'"]),
        ('ok = offering.kind in ("training_plan_extension", "x")', ["1: the offering kind 'training_plan_extension'"]),
        ('o = Offering(kind="training_plan_extension")', ["1: the offering kind 'training_plan_extension'"]),
        (
            "from gpu_governance_runtime.planners.kinds.training_plan import TRAINING_PLAN_COUNTS",
            ["1: imports gpu_governance_runtime.planners.kinds.training_plan.TRAINING_PLAN_COUNTS"],
        ),
        (
            "from ..capacity_kinds import training_plan",
            ["1: imports constructs_lib.capacity_kinds.training_plan"],
        ),
        ('importlib.import_module("constructs_lib.capacity_kinds.training_plan")', ["1: a string naming its module"]),
        # what asks the registry, and words for people, name nothing
        ("kind_of(window).label", []),
        ('"""A window bought as a training plan (training_plan)."""', []),
        ('result = {"training_plan_extension": 1}', []),
    ],
)
def test_the_rule_sees_every_way_of_naming_a_kind(source, expected):
    offering_kinds = RUNTIME_KINDS["training_plan"].offering_kinds
    assert namings(LIBRARY / "model" / "explain.py", source, "training_plan", offering_kinds) == expected


@pytest.mark.parametrize("name", list(RUNTIME_KINDS))
def test_no_file_but_its_modules_and_the_lists_names_a_kind(name):
    offering_kinds = RUNTIME_KINDS[name].offering_kinds
    found = {
        f"{path.relative_to(ROOT)}:{where}"
        for path in SOURCES
        if not str(path.relative_to(ROOT)).startswith(owned_by(name)) and str(path.relative_to(ROOT)) not in LISTS
        for where in namings(path, path.read_text(), name, offering_kinds)
    }
    assert sorted(found) == [], f"ask the registry of capacity kinds instead of naming {name}"


def test_both_sides_register_the_same_kinds_with_their_modules():
    assert list(LIBRARY_KINDS) == list(RUNTIME_KINDS)
    for name in RUNTIME_KINDS:
        assert all((ROOT / module).is_file() for module in owned_by(name)), name


def test_every_consumer_a_window_feeds_is_bought_as_exactly_one_kind():
    consumers = set(contract.CONSUMER_FIELDS)
    bought = [feed for kind in LIBRARY_KINDS.values() for feed in kind.feeds]
    assert sorted(bought) == sorted(consumers)


def test_offering_kinds_are_one_kinds_each():
    offering_kinds = [k for kind in RUNTIME_KINDS.values() for k in kind.offering_kinds]
    assert len(offering_kinds) == len(set(offering_kinds)) == 2 * len(RUNTIME_KINDS)


def test_an_offering_no_kind_sells_is_refused_by_name():
    """A ledger record whose offering kind no registered kind sells (written by hand, or by a kind
    since removed) is named with the kinds allowed, never a bare StopIteration from `usage report`."""
    now = datetime(2026, 12, 1, tzinfo=UTC)
    offering = Offering(
        id="cb-1", kind="capacity_block", instance_type="p5.48xlarge", count=1, availability_zone="us-east-1a",
        start=now, end=now, duration_hours=24, upfront_fee=Decimal(1),
    )  # fmt: skip
    with pytest.raises(
        ValueError, match=r"offering cb-1: kind 'capacity_block' is no capacity kind's - one of \['block'"
    ):
        kind_of_offering(offering)
    assert kind_of_offering(replace(offering, kind="block")).name == "capacity_block"
