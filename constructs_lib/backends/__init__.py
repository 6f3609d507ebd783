"""The registry of execution backends: what the library knows about each, asked by name.

Nothing outside a backend's own modules compares ``pool.backend`` with a backend's name; it asks
``backend_of(pool)`` (or :data:`BACKENDS`) what that backend does. A new backend is one module
here declaring its :class:`Backend`, its construct package and its runtime adapter
(docs/architecture.md, "Adding a backend").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import batch_fair_share, batch_quota_share, eks_kueue, hyperpod_eks, hyperpod_slurm
from .base import Backend

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        batch_quota_share.BACKEND,
        batch_fair_share.BACKEND,
        hyperpod_eks.BACKEND,
        hyperpod_slurm.BACKEND,
        eks_kueue.BACKEND,
    )
}


def backend_of(pool: Any) -> Backend:
    """The descriptor of ``pool``'s backend (``pool`` is a model pool, or its backend's name)."""
    return BACKENDS[pool if isinstance(pool, str) else pool.backend]


def backends_where(test: Callable[[Backend], bool]) -> tuple[str, ...]:
    """The names of the backends ``test`` holds for, in the contract's order."""
    return tuple(name for name, b in BACKENDS.items() if test(b))


__all__ = ["BACKENDS", "Backend", "backend_of", "backends_where"]
