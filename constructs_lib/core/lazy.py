"""Packages whose names load on first use (PEP 562): importing a pure submodule of a package
(``tenancy``'s names, a backend's pure modules) must not start aws_cdk through the package's
``__init__``, or the commands that synthesize nothing would pay for it."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

# What the [cdk] extra installs; the member install (the CLI, the submission helpers) needs none.
CDK_MODULES = frozenset({"aws_cdk", "constructs", "cdk_nag", "jsii"})


def public_order(name: str) -> tuple[bool, str]:
    """How ``__all__`` is sorted: constants first, then the rest by name."""
    return (not name.isupper(), name)


def lazy_exports(
    package: str, defined_in: Mapping[str, str], more: Callable[[], Mapping[str, str]] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, given each public name's module, relative
    to ``package`` (``"setup"``; ``".backends.x"`` is a sibling package's). ``more``, called once
    when a name is not in ``defined_in`` (or on ``__all__``), adds names whose modules are known
    only then (the backends' exports), each with its module's full name. ``__all__`` is
    ``defined_in``'s names and those, sorted by :func:`public_order`."""
    modules = {name: importlib.util.resolve_name(f".{module}", package) for name, module in defined_in.items()}
    found: list[Mapping[str, str]] = []

    def table() -> Mapping[str, str]:
        if more is not None and not found:
            found.append(more())
        return {**(found[0] if found else {}), **modules}

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            return sorted(table(), key=public_order)
        module = modules.get(name) or table().get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            value = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as error:
            # the light (member) install has no CDK: say which extra brings it, not just "No module named aws_cdk"
            if (error.name or "").split(".")[0] not in CDK_MODULES:
                raise
            raise ModuleNotFoundError(
                f"{package}.{name} builds CDK constructs: install the [cdk] extra "
                f"(pip install 'cdk-gpu-governance[cdk]'); {error.name} is missing",
                name=error.name,
            ) from error
        setattr(sys.modules[package], name, value)  # resolved once; later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table()})

    return __getattr__, __dir__
