"""SageMaker HyperPod on EKS: task governance (scheduler config, compute quotas) and tenant
isolation (namespaces, RBAC, access entries, pod identity, admission, dedicated nodes)."""

from .governance import HyperPodEksGovernance

__all__ = ["HyperPodEksGovernance"]
