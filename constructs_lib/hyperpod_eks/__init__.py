"""SageMaker HyperPod on EKS: task governance (scheduler config, compute quotas) and tenant
isolation (namespaces, RBAC, access entries, pod identity, admission, dedicated nodes).
``kubernetes`` (the objects applied per team) is pure Python; the construct loads on first use."""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from .governance import HyperPodEksGovernance, HyperPodEksGovernanceProps

__all__ = ["HyperPodEksGovernance", "HyperPodEksGovernanceProps"]
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "governance"))
