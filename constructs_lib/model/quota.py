"""A team's quota of one instance type in one pool, in the unit it was declared in, and its one
translation into the whole instances the planner, the simulator, Batch and Slurm count.

A quota entry is either a count of instances (``ml.p5.48xlarge: 2``) or a :class:`ResourceQuota`
(``ml.p5.48xlarge: {accelerators: 12, borrow_accelerators: 8}``), the shape of SageMaker's
``ComputeQuotaResourceConfig`` (``Count``, ``Accelerators``, ``VCpu``, ``MemoryInGiB``,
``AcceleratorPartition``; https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ComputeQuotaResourceConfig.html).
The absolute borrow limit sits in the entry because the only API that takes one,
``ResourceSharingConfig.AbsoluteBorrowLimits``, takes it per instance type of one cluster
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceSharingConfig.html); a
team-wide number in ``sharing`` would be ambiguous across pools and instance types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, StringConstraints, model_validator

from .base import Count, _Frozen

# SageMaker's AcceleratorsAmount / InstanceCount / AcceleratorPartitionConfigCountInteger maximum.
MAX_RESOURCE_AMOUNT = 10_000_000
# The shape of botocore's MIGProfileType; the profiles themselves are checked against its
# enumeration (backends.base.MIG_PROFILES) with the other organisation checks.
MigProfile = Annotated[str, StringConstraints(pattern=r"^mig-[0-9]+g\.[0-9]+gb$", max_length=32)]
Amount = Annotated[int, Field(ge=1, le=MAX_RESOURCE_AMOUNT)]
Fraction = Annotated[float, Field(gt=0, le=MAX_RESOURCE_AMOUNT)]


class AcceleratorPartition(_Frozen):
    """Multi-Instance GPU partitions of one profile (SageMaker ``AcceleratorPartitionConfig``)."""

    type: MigProfile = Field(description="MIG profile, e.g. mig-1g.10gb (botocore MIGProfileType)")
    count: Amount


class ResourceQuota(_Frozen):
    """One instance type's quota in a unit other than a bare instance count: ``instances``, or
    ``accelerators`` (GPUs), or ``accelerator_partition`` (MIG, HyperPod EKS only); ``vcpu`` and
    ``memory_gib`` refine an accelerator quota on HyperPod EKS (unset: SageMaker derives them from the
    accelerators' share of the instance). ``borrow_accelerators`` is an absolute borrow limit: GPUs
    of this type the team may borrow on top, whatever its percent ``sharing.borrow_limit`` says."""

    instances: Count | None = None
    accelerators: Amount | None = None
    vcpu: Fraction | None = None
    memory_gib: Fraction | None = None
    accelerator_partition: AcceleratorPartition | None = None
    borrow_accelerators: Annotated[int, Field(ge=0, le=MAX_RESOURCE_AMOUNT)] | None = None

    @model_validator(mode="after")
    def _one_unit(self) -> ResourceQuota:
        given = [
            name for name in ("instances", "accelerators", "accelerator_partition") if getattr(self, name) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of instances, accelerators, accelerator_partition, not {given or 'none'}"
            )
        if self.instances is not None and (self.vcpu is not None or self.memory_gib is not None):
            raise ValueError(
                "vcpu and memory_gib refine an accelerators or accelerator_partition quota; whole instances include theirs"
            )
        return self

    @property
    def part_instance(self) -> bool:
        """Only SageMaker task governance takes it: vCPU, memory or MIG partitions."""
        return self.vcpu is not None or self.memory_gib is not None or self.accelerator_partition is not None

    def declared(self) -> str:
        """The entry as the governance file says it, for explain and audit."""
        if self.instances is not None:
            amount = f"{self.instances} instances"
        elif self.accelerators is not None:
            amount = f"{self.accelerators} GPUs"
        else:
            amount = f"{self.accelerator_partition.count} x {self.accelerator_partition.type}"
        extras = [
            f"{self.vcpu:g} vCPU" if self.vcpu is not None else "",
            f"{self.memory_gib:g} GiB" if self.memory_gib is not None else "",
        ]
        return " + ".join([amount, *filter(None, extras)])


QuotaEntry = Count | ResourceQuota


def gpus_of(pool: Any, instance_type: str) -> int | None:
    """GPUs of one instance as the pool declares them; Batch pools declare none (their capacity
    limits count instances: https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaShareCapacityLimit.html)."""
    return getattr(pool, "gpus_per_instance", {}).get(instance_type)


def whole_instances(entry: QuotaEntry, gpus: int | None) -> int:
    """The whole instances an entry guarantees. Exact wherever ``check_pool_teams`` lets an entry
    through, except on HyperPod EKS, whose task governance enforces part-instance amounts itself:
    there the count is the whole instances the amount covers (12 GPUs of 8-GPU instances: 1)."""
    if isinstance(entry, int):
        return entry
    if entry.instances is not None:
        return entry.instances
    if entry.accelerators is not None and gpus:
        return entry.accelerators // gpus
    return 0  # MIG partitions: no whole instance


def instance_quota(team: Any, pool: Any) -> dict[str, int]:
    """The team's quota in ``pool`` in whole instances per type: what the policy document (and so
    the reclaim planner, the capacity controller and the simulator), Batch and Slurm read."""
    return {t: whole_instances(entry, gpus_of(pool, t)) for t, entry in team.quotas[pool.name].items()}


def borrow_instances(team: Any, pool: Any) -> dict[str, int]:
    """The absolute borrow limits of the team in ``pool`` in whole instances per type (only the
    types that declare one); ``check_pool_teams`` keeps them whole outside HyperPod EKS."""
    return {
        t: entry.borrow_accelerators // gpus_of(pool, t)
        for t, entry in team.quotas[pool.name].items()
        if isinstance(entry, ResourceQuota) and entry.borrow_accelerators is not None and gpus_of(pool, t)
    }


def declared(entries: Mapping[str, QuotaEntry]) -> str:
    """A pool's quota entries in their declared units: ``12 GPUs x ml.p5.48xlarge, 2 x ml.g5.xlarge``."""
    return ", ".join(
        f"{e} x {t}" if isinstance(e, int) else f"{e.declared()} x {t}" for t, e in sorted(entries.items())
    )
