"""The runtime's registry of execution backends: what each backend does in the Lambda runtime,
asked by name (the runtime side of ``constructs_lib.backends``).

No runtime module outside these backend packages compares ``pool.backend`` with a backend's name;
the handlers ask ``backend_of(pool)`` or ``backends_where(test)``. A new backend is one package here
(``backends/<name>/``) declaring its :class:`Backend` in its ``__init__`` and holding its adapter
and usage observer (docs/architecture.md, "Adding a backend"). A declaration imports its reclaim
adapter inside the function that builds it: the capacity function asks the registry too and loads
none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import batch_fair_share, batch_quota_share, eks_kueue, hyperpod_eks, hyperpod_slurm
from .base import Backend, GpuHourLimits, Invocation, ReclaimClients, UsageTick

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
    """The descriptor of ``pool``'s backend (``pool`` is a ``PoolPolicy``, or its backend's name)."""
    return BACKENDS[pool if isinstance(pool, str) else pool.backend]


def backends_where(test: Callable[[Backend], bool]) -> tuple[str, ...]:
    """The names of the backends ``test`` holds for, in the contract's order."""
    return tuple(name for name, b in BACKENDS.items() if test(b))


__all__ = [
    "BACKENDS",
    "Backend",
    "GpuHourLimits",
    "Invocation",
    "ReclaimClients",
    "UsageTick",
    "backend_of",
    "backends_where",
]
