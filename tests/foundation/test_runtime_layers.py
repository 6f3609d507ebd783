"""The Lambda runtime's layers (docs/architecture.md, "The runtime's layers"), read from the source:
contract -> common -> planners -> policy -> adapters -> handlers. A module imports only from its
own layer or a layer below, the module graph has no cycle, and the controllers' packages meet
only in the shared modules: ``capacity`` and ``reclaim`` never import each other (both ask the
backend registry, ``backends/``, which declares what each backend's pools take of them), and the
folders import one way: no two top-level folders import each other. Every import counts, relative
or absolute, inside a function or under ``if TYPE_CHECKING:``."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "lambda" / "gpu_governance_runtime"

LAYER_NAMES = ("contract", "common", "planners", "policy", "adapters", "handlers")
# Every module's layer, by its path in the runtime package. A package's ``__init__`` sits in the
# lowest layer of what it re-exports.
LAYERS = {
    "contract": ("contract.py", "__init__.py"),
    # shared helpers that decide nothing: logging, metrics, retry settings, the Batch copy, what a
    # Batch job record says, the actions' ledger of the reclaim controller and the guard, the Slurm plan and its
    # head-node commands, request shapes, HyperPod groups, usage records, the cold-start API check, the capacity
    # market's shared rules, what it sells and holds (offers), the GPU-hour limit calendar,
    # finding a team's quota share or compute quota
    "common": (
        "common/__init__.py",
        "common/log.py",
        "common/metrics.py",
        "common/clients.py",
        "common/batch_copy.py",
        "common/action_ledger.py",
        "common/batch_jobs.py",
        "common/handler.py",
        "slurm/__init__.py",
        "slurm/plan.py",
        "slurm/render.py",
        "slurm/ssm.py",
        "request_shapes.py",
        "hyperpod_cluster.py",
        "usage.py",
        "api_check.py",
        "limits.py",
        "quotas.py",
        "capacity/__init__.py",
        "planners/__init__.py",
        "planners/market.py",
        "planners/offers.py",
        "reclaim/__init__.py",
        "guard/__init__.py",
    ),
    # pure decisions: no AWS call, no clock
    "planners": (
        "planners/reclaim.py",
        "planners/reclaim_rules.py",
        "planners/reclaim_state.py",
        "planners/capacity.py",
        "planners/window.py",
        "capacity/grid.py",
        "guard/checks.py",
        "guard/members.py",
    ),
    # what the controllers are told: the policy document, the guarantees the capacity controller raised
    "policy": ("policy.py", "raised_guarantees.py"),
    # what reads and changes AWS (ledgers, purchases, rotations, GPU-hour limits) for a handler, and
    # the backends' packages with their adapters and the registry that says which a pool's backend
    # takes (every module of backends/, BACKEND_LAYER: a new backend's runtime package needs no line here)
    "adapters": (
        "reclaim/gpu_hours.py",
        "reclaim/fair_share.py",
        "reclaim/reports.py",
        "reclaim/run_time.py",
        "capacity/ledger.py",
        "capacity/aws.py",
        "capacity/block_jobs.py",
        "capacity/chargeback.py",
        "capacity/consumers.py",
        "capacity/consumer_steps.py",
        "capacity/controller.py",
        "capacity/delivery.py",
        "capacity/fill.py",
        "capacity/hyperpod.py",
        "capacity/raised.py",
        "capacity/requests.py",
        "capacity/requeue.py",
        "capacity/rotation.py",
        "capacity/shares.py",
        "capacity/slurm_window.py",
        "capacity/spend.py",
    ),
    # the Lambda entry points: settings, events, clients, one run
    "handlers": ("reclaim/handler.py", "capacity/handler.py", "guard/handler.py", "dedicated_nodes.py"),
}
BACKEND_LAYER = "adapters"
RANK = {module: LAYER_NAMES.index(layer) for layer, modules in LAYERS.items() for module in modules}
for _path in (RUNTIME / "backends").rglob("*.py"):
    RANK.setdefault(_path.relative_to(RUNTIME).as_posix(), LAYER_NAMES.index(BACKEND_LAYER))
# Every module of planners/kinds/: each kind's market rules and its search, purchase and description, made through
# the clients of the CapacityMarket it is handed (it holds none), below the planner that asks its rules. A new kind's
# module needs no line here.
KIND_LAYER = "common"
for _path in (RUNTIME / "planners" / "kinds").rglob("*.py"):
    RANK.setdefault(_path.relative_to(RUNTIME).as_posix(), LAYER_NAMES.index(KIND_LAYER))
# The controllers' packages: siblings that meet only in the modules below them (the guard records its
# actions in the reclaim controller's ledger table through the same ``common/action_ledger.py``).
CONTROLLERS = ("capacity", "reclaim", "guard")


def _module(path: Path) -> str:
    return path.relative_to(RUNTIME).as_posix()


def _resolve(dotted: str) -> str | None:
    """The runtime file of a dotted module (``gpu_governance_runtime.x.y``), or None outside it."""
    parts = dotted.split(".")
    if parts[0] != "gpu_governance_runtime":
        return None
    inner = Path(*parts[1:]) if parts[1:] else Path()
    if (RUNTIME / inner).with_suffix(".py").is_file() and parts[1:]:
        return (inner.with_suffix(".py")).as_posix()
    return (inner / "__init__.py").as_posix()


def _imports(module: str, source: str) -> list[tuple[str, int]]:
    """(imported runtime module, line) for every import in a runtime file, wherever it stands."""
    package = ["gpu_governance_runtime", *Path(module).parent.parts]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            # `from .x import name`: the module x, or x.name when name is a module of package x
            for alias in node.names:
                candidate = _resolve(f"{target}.{alias.name}")
                if candidate and (RUNTIME / candidate).is_file():
                    found.append((candidate, node.lineno))
                elif (resolved := _resolve(target)) is not None:
                    found.append((resolved, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(r, node.lineno) for a in node.names if (r := _resolve(a.name)) is not None]
    return found


def _controller(module: str) -> str | None:
    top = module.split("/")[0]
    return top if top in CONTROLLERS else None


def _wrong_way(module: str, source: str) -> list[str]:
    wrong = []
    own = _controller(module)
    for target, line in _imports(module, source):
        if target == module:
            continue
        if RANK[target] > RANK[module]:
            wrong.append(f"line {line}: {target} ({LAYER_NAMES[RANK[target]]}) from {LAYER_NAMES[RANK[module]]}")
        other = _controller(target)
        if own and other and other != own:
            wrong.append(f"line {line}: {target} (the {other} controller's) from the {own} controller")
    return wrong


SOURCES = sorted(RUNTIME.rglob("*.py"))


def test_every_runtime_module_has_a_layer():
    modules = {_module(p) for p in SOURCES}
    assert modules - set(RANK) == set(), "a new runtime module needs a place in docs/architecture.md's runtime layers"
    assert set(RANK) - modules == set(), "a layer names a module that is gone"


@pytest.mark.parametrize("path", SOURCES, ids=_module)
def test_runtime_imports_run_one_way(path: Path):
    assert _wrong_way(_module(path), path.read_text()) == []


def _folder(module: str) -> str:
    """A module's place in the folder graph: its top-level folder, or, at the top, the module itself
    (a top-level module is a folder of one: ``contract.py`` under everything, ``dedicated_nodes.py``,
    a Lambda entry point the template names, over ``common``)."""
    return module.split("/")[0] if "/" in module else module


def two_way_folders(sources: dict[str, str]) -> list[str]:
    """Each pair of folders importing each other both ways, with one import line each way."""
    arrows: dict[tuple[str, str], str] = {}
    for module, source in sorted(sources.items()):
        for target, line in _imports(module, source):
            pair = (_folder(module), _folder(target))
            if pair[0] != pair[1]:
                arrows.setdefault(pair, f"{module}:{line} imports {target}")
    return [f"{a} <-> {b}: {arrows[a, b]}; {arrows[b, a]}" for a, b in sorted(arrows) if a < b and (b, a) in arrows]


def test_runtime_folders_import_one_way():
    assert two_way_folders({_module(p): p.read_text() for p in SOURCES}) == []


def test_the_folder_rule_sees_a_pair():
    found = two_way_folders(
        {"backends/base.py": "from ..reclaim import handler\n", "reclaim/handler.py": "from ..backends import base\n"}
    )
    assert found == [
        "backends <-> reclaim: backends/base.py:1 imports reclaim/handler.py; reclaim/handler.py:1 imports backends/base.py"
    ]


def test_the_runtime_has_no_import_cycle():
    graph = {_module(p): {t for t, _ in _imports(_module(p), p.read_text()) if t != _module(p)} for p in SOURCES}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        pytest.fail(f"import cycle: {' -> '.join(cycle.args[1])}")


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("policy.py", "from .backends.base import Adapter\n"),  # policy on an adapter
        ("planners/reclaim.py", "def f():\n    from ..policy import Policy\n"),  # upward, inside a function
        (
            "common/log.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..policy import Policy\n",
        ),  # type-only upward
        ("reclaim/handler.py", "from ..capacity import raised\n"),  # one controller on the other
        ("capacity/spend.py", "from gpu_governance_runtime.reclaim.gpu_hours import enforce\n"),  # the same, absolute
        ("contract.py", "import gpu_governance_runtime.common.log\n"),
    ],
)
def test_the_rule_refuses_a_wrong_way_import(module: str, source: str):
    assert _wrong_way(module, source) != []
