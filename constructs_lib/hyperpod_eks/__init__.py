"""The old import path of the SageMaker HyperPod on EKS construct, kept so existing apps keep
working: it is ``constructs_lib.backends.hyperpod_eks``'s (import it from ``constructs_lib``)."""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from constructs_lib.backends.hyperpod_eks.construct import HyperPodEksGovernance, HyperPodEksGovernanceProps

__all__ = ["HyperPodEksGovernance", "HyperPodEksGovernanceProps"]
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, ".backends.hyperpod_eks.construct"))
