"""The mutation catalogue stays runnable between `make mutants` runs: a refactor that moves a
mutant's code (its exact text found no longer exactly once) or renames a test it names fails here,
in `make test`, instead of a stale mutant that `make mutants` only reports much later."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _mutants_module():
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "benchmarks" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutants", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_mutant_still_applies_exactly_once_and_names_tests_that_exist():
    mutants = _mutants_module()
    catalogue = mutants.load(ROOT / "benchmarks" / "mutants.toml")
    assert len(catalogue) >= 40  # issue 39: at least 40 across reclaim, capacity, guard and GPU hours
    assert {m.area for m in catalogue} >= {"reclaim", "capacity", "guard", "gpu-hours"}
    problems = [f"{o.mutant.id}: {o.verdict}: {o.detail}" for m in catalogue if (o := mutants.check(m, ROOT))]
    assert problems == []
