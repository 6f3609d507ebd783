"""The Lambda runtime's backend registry (issue 27, item 1, runtime side): what each controller
does with a pool of each backend is declared once, in ``gpu_governance_runtime/backends/<name>/``,
and no other runtime module compares ``pool.backend`` with a backend's name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from constructs_lib import backends as library
from gpu_governance_runtime import contract
from gpu_governance_runtime.backends import BACKENDS, backend_of, backends_where

RUNTIME = Path(__file__).resolve().parents[2] / "lambda" / "gpu_governance_runtime"
DECLARED_IN = ("contract.py", "backends/")  # the names, and the backends' own declarations

# The contract's names of the backends (and of any group of them), spelt as constants or as strings:
# derived from the contract, so a new backend is covered without touching this test.
_NAMES = sorted(
    name
    for name, value in vars(contract).items()
    if name != "BACKENDS"
    and (value in contract.BACKENDS or (isinstance(value, tuple) and value and set(value) <= set(contract.BACKENDS)))
)
_NAMING = re.compile(rf"\b({'|'.join(_NAMES)})\b|[\"']({'|'.join(map(re.escape, contract.BACKENDS))})[\"']")


def _names_a_backend(source: str) -> list[str]:
    return [m.group(0) for m in _NAMING.finditer(source)]


def test_the_rule_sees_a_backend_named_as_a_constant_or_a_string():
    assert set(_NAMES) >= {
        "BATCH_QUOTA_SHARE",
        "BATCH_FAIR_SHARE",
        "HYPERPOD_EKS",
        "HYPERPOD_SLURM",
        "HYPERPOD_BACKENDS",
    }
    assert _names_a_backend("if pool.backend == HYPERPOD_EKS:\n") == ["HYPERPOD_EKS"]
    assert _names_a_backend("x = pool.backend in ('batch_fair_share',)\n") == ["'batch_fair_share'"]
    assert _names_a_backend("from ..contract import BACKENDS\nimport backends.kueue_usage\n") == []


def test_outside_the_registry_no_runtime_module_names_a_backend():
    naming = {
        module: found
        for path in sorted(RUNTIME.rglob("*.py"))
        if not (module := path.relative_to(RUNTIME).as_posix()).startswith(DECLARED_IN)
        and (found := _names_a_backend(path.read_text()))
    }
    assert naming == {}, "ask gpu_governance_runtime.backends (backend_of, backends_where) instead of naming a backend"


def test_the_registry_lists_the_contracts_backends_in_its_order():
    assert tuple(BACKENDS) == contract.BACKENDS
    assert all(b.name == name for name, b in BACKENDS.items())
    assert backend_of(contract.HYPERPOD_EKS) is BACKENDS[contract.HYPERPOD_EKS]


@pytest.mark.parametrize("name", contract.BACKENDS)
def test_a_reclaim_target_either_takes_an_adapter_or_only_observes_usage(name):
    backend = BACKENDS[name]
    # exactly one of the two, and a pool without an adapter says why (the handler's error names it)
    assert (backend.reclaim_adapter is None) is (backend.observe_usage is not None)
    assert bool(backend.why_no_adapter) is (backend.reclaim_adapter is None)


def test_the_runtime_registry_agrees_with_the_librarys():
    # what the library deploys for a backend (permissions, targets, switches) is what the runtime does there
    assert backends_where(lambda b: b.gpu_hour_limits is not None) == library.backends_where(
        lambda b: bool(b.gpu_hour_switch)
    )
    assert backends_where(lambda b: b.observe_usage is not None) == library.backends_where(
        lambda b: not b.preemptions_seen
    )
    assert backends_where(lambda b: b.usage_from_accounting is not None) == library.backends_where(
        lambda b: b.reached_on_head_node
    )
    assert backends_where(lambda b: b.drains_on_head_node) == library.backends_where(lambda b: b.drains_on_head_node)
    for name, backend in BACKENDS.items():
        raised = {backend.quota_raised_by} - {None}
        assert raised == set(library.BACKENDS[name].quota_raises), name


def test_the_capacity_function_loads_no_reclaim_adapter_through_the_registry():
    # Both handlers ask the registry; the reclaim side of a declaration loads only when the reclaim
    # function calls it, so the capacity function's cold start reads none of reclaim's modules and
    # none of the backends' adapters, observers and switches (only their declarations and base.py).
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, gpu_governance_runtime.capacity.handler\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('gpu_governance_runtime.'))))",
        ],
        env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": str(RUNTIME.parent)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    declarations = {"gpu_governance_runtime.backends", "gpu_governance_runtime.backends.base"}
    declarations |= {f"gpu_governance_runtime.backends.{name}" for name in BACKENDS}
    reclaim_side = [
        module
        for module in loaded
        if module.startswith("gpu_governance_runtime.reclaim")
        or (module.startswith("gpu_governance_runtime.backends") and module not in declarations)
    ]
    assert reclaim_side == []
    assert declarations <= set(loaded)  # it did ask the registry
