"""The governance model: one declaration of the organisation used by the file loader, by the
constructs' typed props, by the compiled controller policy and by the CLI.

Every model object is a frozen pydantic model built with keyword arguments only. Field-level
checks (types, ranges, patterns) live on the fields; checks that need the whole organisation
(references between teams, accounts and pools, backend limits) live in ``check_organisation``.
Both report every problem at once as a :class:`GovernanceError`.
"""

from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from constructs_lib.backends import backend_of, backends_where
from constructs_lib.backends.base import MIG_PROFILES
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.core.wording import listed
from gpu_governance_runtime.contract import (
    DEFAULT_REBORROW_BACKOFF_S,
    SharingStrategy,
    borrow_ceiling,
)
from gpu_governance_runtime.limits import TRAINING_INSTANCE_GPUS

from .base import (
    DEFAULT_BOOTSTRAP_QUALIFIER,
    HYPERPOD_TEAM_NAME,
    MAX_BORROW_LIMIT,
    MAX_HYPERPOD_BORROW_LIMIT,
    MAX_PRIORITY_CLASSES,
    UNLIMITED,
    AccountId,
    AlertTarget,
    BootstrapQualifier,
    ComputeEnvironmentArn,
    CostCentre,
    Count,
    DnsLabel,
    Ec2InstanceType,
    EksClusterName,
    EmailAddress,
    HyperPodClusterArn,
    HyperPodClusterName,
    InstanceGroupName,
    OrganizationId,
    PermissionSetName,
    PrincipalArn,
    QueueName,
    Region,
    SageMakerInstanceType,
    TeamName,
    UsdAmount,
    _Frozen,
    _OrganisationProblems,
    account_of,
    aws_partition,
    closest_setting,
    governance_error_from,
    identity_center_role_patterns,
    library_role,
    path_of,
    team_name_scopes,
    without_settings,
)
from .capacity import CapacityWindow, check_windows
from .instance_types import check_instance_types, known
from .quota import QuotaEntry, ResourceQuota, gpus_of, instance_quota, whole_instances
from .run_limits import MAX_RUN_DESCRIPTION, MaxRunMinutes, UserLimits
from .slurm import slurm_problems

# --- sharing ----------------------------------------------------------------------------------


def _preset_may_supply(field: str):
    """A preset fills ``field`` in, so files may leave it out; the model still insists on one of
    the two after the preset is applied."""

    def drop_from_required(schema: dict[str, Any]) -> None:
        schema["required"] = [name for name in schema.get("required", []) if name != field]

    return drop_from_required


class SharingPolicy(_Frozen):
    """How a team's capacity is shared. ``borrow_limit`` is a percent of the team's own quota
    (per instance type) that it may borrow on top, or ``"unlimited"``; only with lend-and-borrow.
    ``lending_limit`` (Kueue's ``lendingLimit``) is the percent of its quota it lends at most while
    idle; the rest is held for it. Unset: it lends all of its idle quota."""

    model_config = ConfigDict(json_schema_extra=_preset_may_supply("strategy"))

    strategy: SharingStrategy
    borrow_limit: Annotated[int, Field(ge=0, le=MAX_BORROW_LIMIT)] | Literal["unlimited"] | None = None
    in_share_preemption: bool = False
    lending_limit: Annotated[int, Field(ge=0, le=100)] | None = Field(
        default=None,
        description="Percent (0-100) of the team's quota, per instance type, it lends at most while idle; unset: all of it. "
        "Only for lend and lend_and_borrow",
    )

    @model_validator(mode="after")
    def _borrow_limit_needs_lend_and_borrow(self) -> SharingPolicy:
        if self.strategy is SharingStrategy.RESERVE and self.lending_limit is not None:
            raise ValueError(
                "lending_limit is only allowed with strategy lend or lend_and_borrow: reserve lends nothing"
            )
        if self.strategy is SharingStrategy.LEND_AND_BORROW and self.borrow_limit is None:
            raise ValueError(
                "lend_and_borrow needs a borrow_limit (percent of the team's quota, 0-10000, or 'unlimited')"
            )
        if self.strategy is not SharingStrategy.LEND_AND_BORROW and self.borrow_limit is not None:
            raise ValueError(f"borrow_limit is only allowed with strategy lend_and_borrow, not {self.strategy.value}")
        return self

    @property
    def lends(self) -> bool:
        return self.strategy is not SharingStrategy.RESERVE

    @property
    def borrows(self) -> bool:
        return self.strategy is SharingStrategy.LEND_AND_BORROW

    @property
    def borrows_without_limit(self) -> bool:
        return self.borrow_limit == UNLIMITED

    @property
    def borrow_percent(self) -> int | None:
        """``borrow_limit`` as the contract encodes it: a percent, or None when the team borrows
        without limit or does not borrow (the policy document's ``borrow_limit``; Batch's -1 is
        translated from it). The one translation of the file's ``"unlimited"``."""
        return None if self.borrows_without_limit else self.borrow_limit

    def borrow_ceiling(self, quota: int) -> int | None:
        """Most instances a team with ``quota`` can hold by borrowing; None when unlimited."""
        return borrow_ceiling(self.strategy, quota, self.borrow_percent)


class Preset(str, enum.Enum):
    """The three scenarios of the AWS Batch quota management launch."""

    BACKGROUND = "background"  # checkpointing work: borrows idle capacity, accepts preemption
    STEADY = "steady"  # lends idle capacity, never borrows, so never reclaimed; prefers waiting
    CRITICAL = "critical"  # reserved capacity, neither lends nor borrows, starts at once

    @property
    def sharing(self) -> SharingPolicy:
        return PRESET_SHARING[self]


PRESET_SHARING: Mapping[Preset, SharingPolicy] = {
    # "As much as allowed": double its quota by default, finite so that one team cannot take a
    # whole pool; override with borrow_limit (or "unlimited").
    Preset.BACKGROUND: SharingPolicy(
        strategy=SharingStrategy.LEND_AND_BORROW, borrow_limit=100, in_share_preemption=True
    ),
    Preset.STEADY: SharingPolicy(strategy=SharingStrategy.LEND, in_share_preemption=False),
    # "Immediate start without interruption" read as promises against other teams: nothing is lent,
    # so nothing is reclaimed; in-share preemption lets its most urgent job start at once inside its
    # own reservation, interrupting only the team's strictly lower-priority work (docs/governance-file.md).
    Preset.CRITICAL: SharingPolicy(strategy=SharingStrategy.RESERVE, in_share_preemption=True),
}


# --- organisation -----------------------------------------------------------------------------


class Account(_Frozen):
    """An AWS account and the region the library deploys to there."""

    account_id: AccountId
    region: Region


class PriorityClass(_Frozen):
    """A priority class shared by every backend. Higher weight is more urgent (HyperPod weight
    0-100; AWS Batch scheduling priority uses the same number)."""

    name: DnsLabel
    weight: Annotated[int, Field(ge=0, le=100)]
    max_run_minutes: MaxRunMinutes | None = Field(default=None, description=MAX_RUN_DESCRIPTION)


class PodSecurityLevel(str, enum.Enum):
    """The Pod Security Standards levels a team's pods may be held to (privileged is not offered:
    a tenant pod that may escape to the node reaches every other tenant on it)."""

    BASELINE = "baseline"  # no host namespaces, host paths, privileged or extra capabilities
    RESTRICTED = "restricted"  # baseline, and non-root, no privilege escalation, drop ALL, seccomp


class KubernetesTenancy(_Frozen):
    """What a team gets beyond its compute quota on one HyperPod EKS cluster."""

    pod_security: PodSecurityLevel = Field(
        default=PodSecurityLevel.BASELINE,
        description="Pod Security Standards level enforced on the team's pods: baseline or restricted",
    )

    gpu_quota: Count | None = Field(
        default=None, description="Kubernetes ResourceQuota on requests.nvidia.com/gpu in the team's namespace"
    )
    dedicated_instance_groups: tuple[InstanceGroupName, ...] = Field(
        default=(), description="Instance groups whose nodes only this team's pods may use, and its pods only those"
    )
    priority_classes: tuple[DnsLabel, ...] | None = Field(
        default=None,
        description="The declared priority classes the team's workloads may name (Kueue label "
        "kueue.x-k8s.io/priority-class: <class>-priority); default every declared class. An admission policy refuses the others",
    )

    def granted_priority_classes(self, declared: Sequence[PriorityClass]) -> tuple[str, ...]:
        """The class names the team may use: those it is granted, every declared one by default."""
        return self.priority_classes if self.priority_classes is not None else tuple(p.name for p in declared)


class PermissionSetMember(_Frozen):
    """People who sign in through IAM Identity Center: the permission set assigned to them in an
    account. They act as the role Identity Center creates for it there, whose name ends in a
    suffix that changes whenever the role is re-created, so the library admits them by pattern
    (``identity_center_role_patterns``) rather than by an exact ARN."""

    name: PermissionSetName = Field(description="The permission set's name (1-32 of letters, digits and _+=,.@-)")
    account: str | None = Field(
        default=None, description="Name of the consumer account it is assigned in (default: the team's account)"
    )


class LimitPeriod(str, enum.Enum):
    """The calendar period a GPU-hour limit counts over; usage starts again from 0 at its start (UTC)."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"


MAX_GPU_HOURS = 10_000_000


class GpuHourLimit(_Frozen):
    """A hard limit on the GPU hours a team's jobs use per period: once reached, no new job of the
    team starts until the next period (docs/governance-file.md, GPU-hour limits)."""

    hours: Annotated[int, Field(ge=1, le=MAX_GPU_HOURS)] = Field(
        description=f"GPU hours per period (1-{MAX_GPU_HOURS})"
    )
    period: LimitPeriod = Field(description="day, week or month: when the count starts again from 0")


class Team(_Frozen):
    """A team: where it lives, who acts for it, how much it is guaranteed and how it shares.

    Give a ``preset`` (background, steady, critical) and override what you need in ``sharing``,
    or give ``sharing`` in full. ``quotas`` maps a pool name to ``{instance type: count}`` or
    ``{instance type: {accelerators: N, ...}}`` (:class:`ResourceQuota`).
    ``fair_share_weight`` (1-100, higher gets more) orders borrowers and fair-share queues.
    """

    model_config = ConfigDict(json_schema_extra=_preset_may_supply("sharing"))

    name: TeamName
    account: str | None = Field(
        default=None, description="Name of the consumer account the team works from (required in a governance file)"
    )
    preset: Preset | None = None
    sharing: SharingPolicy
    fair_share_weight: Annotated[int, Field(ge=1, le=100)] = 10
    members: tuple[PrincipalArn, ...] = Field(
        default=(), description="IAM role or user ARNs allowed to act for the team (no wildcards)"
    )
    permission_sets: tuple[PermissionSetMember, ...] = Field(
        default=(), description="IAM Identity Center permission sets whose users act for the team, each in its account"
    )
    quotas: dict[str, dict[str, QuotaEntry]] = Field(
        default_factory=dict,
        description="Pool name -> {instance type: instances, or {instances|accelerators|accelerator_partition: N, "
        "vcpu, memory_gib, borrow_accelerators}} (docs/governance-file.md, Quotas in GPUs)",
    )
    kubernetes: dict[str, KubernetesTenancy] = Field(
        default_factory=dict, description="HyperPod EKS pool name -> the team's extra settings on that cluster"
    )
    owner: EmailAddress | None = Field(
        default=None,
        description="Email address of the team's owner: the team's alarms and budget notifications go there",
    )
    cost_centre: CostCentre | None = Field(
        default=None,
        description="Cost centre charged for the team: the gpu-governance:cost-centre tag on its resources",
    )
    monthly_budget_usd: UsdAmount | None = Field(
        default=None,
        description="Monthly AWS Budgets budget (USD) of the cost tagged with the team; none unless declared",
    )
    paused: bool = Field(
        default=False,
        description="No new job of the team starts on any backend; running jobs finish. `gpu-governance team pause|resume` sets it",
    )
    gpu_hour_limit: GpuHourLimit | None = Field(
        default=None,
        description="Hard limit on the team's GPU hours per day, week or month: once reached no new job of the team starts until the next period",
    )
    max_run_minutes: MaxRunMinutes | None = Field(default=None, description=MAX_RUN_DESCRIPTION)
    user_limits: UserLimits | None = Field(
        default=None,
        description="What each member of the team may run at once, in every pool of the team where the backend sees the "
        "member (Slurm); validate says where it does not (docs/governance-file.md, Per-user limits)",
    )
    slurm_gid: Annotated[int, Field(ge=1_000, le=2_147_483_647)] | None = Field(
        default=None,
        description="OS group id of the team's group gg-<team> on Slurm pools; allocated from a hash of its name unless declared",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        try:
            preset = Preset(data["preset"])
        except ValueError:
            return data  # the field check reports the bad preset
        overrides = data.get("sharing") or {}
        if isinstance(overrides, SharingPolicy):
            return data
        if not isinstance(overrides, dict):
            return data  # the field check reports the bad type
        merged = preset.sharing.model_dump(mode="json", exclude_none=True)
        if overrides.get("strategy") not in (None, preset.sharing.strategy, preset.sharing.strategy.value):
            merged.pop("borrow_limit", None)  # reported as a contradiction below, not twice
        merged.update(overrides)
        return {**data, "sharing": merged}

    @model_validator(mode="after")
    def _preset_is_honoured(self) -> Team:
        if self.preset is not None and self.sharing.strategy is not self.preset.sharing.strategy:
            raise ValueError(
                f"preset {self.preset.value} means strategy {self.preset.sharing.strategy.value}, "
                f"not {self.sharing.strategy.value}; drop the preset or the strategy override"
            )
        return self


class _Pool(_Frozen):
    name: QueueName
    capacity: dict[str, Count] = Field(min_length=1, description="Instance type -> instances in the pool")
    max_run_minutes: MaxRunMinutes | None = Field(default=None, description=MAX_RUN_DESCRIPTION)


YEAR_SECONDS = 365 * 86_400
# A lender waits up to a tick plus the grace for what it is guaranteed: an hour at most keeps that a
# wait, not a loan of the guarantee.
MAX_GRACE_SECONDS = 3_600


class ReclaimSettings(_Frozen):
    """How the reclaim controller (and ``gpu-governance simulate``) treats a pool's jobs that cannot
    checkpoint (docs/reclaim.md, Anti-thrash)."""

    reborrow_backoff_seconds: Annotated[int, Field(ge=0, le=YEAR_SECONDS)] = Field(
        default=DEFAULT_REBORROW_BACKOFF_S,
        description="A reclaimed job borrows again only this long after its requeue, doubled per reclaim (0-31536000 s; "
        "a year: it restarts only inside its team's quota)",
    )
    borrow_horizon_seconds: Annotated[int, Field(ge=60, le=YEAR_SECONDS)] | None = Field(
        default=None,
        description="Only jobs declaring a maximum run time of at most this (Slurm --time, Batch timeout) borrow; unset: any job",
    )
    grace_seconds: Annotated[int, Field(ge=0, le=MAX_GRACE_SECONDS)] = Field(
        default=0,
        description=f"A preempted job keeps running this long before it is stopped, to checkpoint (Slurm QoS GraceTime; 0-{MAX_GRACE_SECONDS} s: "
        "the lender waits as long); 0: stopped at once",
    )


class _ReclaimedPool(_Pool):
    """A pool the reclaim controller governs (HyperPod EKS reclaims natively, with Kueue)."""

    reclaim: ReclaimSettings = Field(default_factory=ReclaimSettings)


class BatchQuotaSharePool(_ReclaimedPool):
    """An AWS Batch quota-management job queue for SageMaker training jobs."""

    backend: Literal["batch_quota_share"] = "batch_quota_share"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    runnable_timeout_minutes: Annotated[int, Field(ge=10, le=1440)] | None = Field(
        default=None,
        description="Cancel jobs RUNNABLE longer than this (10-1440 min); unset keeps waiting jobs",
    )


class BatchFairSharePool(_ReclaimedPool):
    """An AWS Batch fair-share job queue over existing EC2 or EKS compute environments."""

    backend: Literal["batch_fair_share"] = "batch_fair_share"
    capacity: dict[Ec2InstanceType, Count] = Field(min_length=1)
    compute_environments: tuple[ComputeEnvironmentArn, ...] = Field(min_length=1, max_length=3)
    share_decay_seconds: Annotated[int, Field(ge=0, le=604800)] = 3600
    compute_reservation: Annotated[int, Field(ge=0, le=99)] = 0
    queue_priority: Annotated[int, Field(ge=0, le=1000)] = 10


class HyperPodEksPool(_Pool):
    """A SageMaker HyperPod cluster orchestrated by EKS (task governance)."""

    backend: Literal["hyperpod_eks"] = "hyperpod_eks"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    cluster_arn: HyperPodClusterArn
    eks_cluster_name: EksClusterName
    # Kubernetes objects are checked against this version's schema and applied with kubectl
    # 1.33, which supports clusters one minor version either side.
    kubernetes_version: Literal["1.32", "1.33", "1.34"] = "1.33"
    cluster_name: HyperPodClusterName | None = Field(
        default=None,
        description="The HyperPod cluster's name; needed where a Unified Studio project connects to the cluster",
    )
    fair_share: bool = Field(default=True, description="Teams borrow idle compute by fair-share weight, not first come")
    idle_resource_sharing: bool = Field(default=True, description="Teams may lend and borrow idle compute at all")
    gpus_per_instance: dict[SageMakerInstanceType, Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=dict,
        description="GPUs of one instance per type: Kueue counts GPUs, usage is reported in instances (docs/chargeback.md)",
    )


# What SSM Run Command targets: an EC2 instance (HyperPod nodes are) or a managed instance.
SsmTargetId = Annotated[str, StringConstraints(pattern=r"^(i-[0-9a-f]{8,17}|mi-[0-9a-f]{17})$")]


class SlurmHeadNode(_Frozen):
    """The cluster's head (controller) node, where the reclaim controller reads accounting and
    requeues jobs through SSM Run Command (docs/slurm.md)."""

    instance_id: SsmTargetId = Field(description="The head node's SSM target id (i-...)")
    instance_type: SageMakerInstanceType | None = Field(
        default=None, description="The instance type the pool's partitions hold (default: the pool's only one)"
    )


class HyperPodSlurmPool(_ReclaimedPool):
    """A SageMaker HyperPod cluster orchestrated by Slurm."""

    backend: Literal["hyperpod_slurm"] = "hyperpod_slurm"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    cluster_name: HyperPodClusterName
    cluster_arn: HyperPodClusterArn | None = Field(
        default=None,
        description="Needed by capacity windows that feed its instance groups (IAM names the cluster by ARN)",
    )
    gpus_per_instance: dict[SageMakerInstanceType, Annotated[int, Field(ge=1, le=64)]] = Field(default_factory=dict)
    head_node: SlurmHeadNode | None = Field(
        default=None,
        description="The head node: with it the reclaim controller governs the pool (without it, Slurm alone does)",
    )

    @model_validator(mode="after")
    def _head_node_type(self) -> HyperPodSlurmPool:
        if self.head_node is not None:
            if self.head_node.instance_type is None and len(self.capacity) > 1:
                raise ValueError(
                    f"head_node.instance_type is missing: the pool holds several types, give one of {sorted(self.capacity)}"
                )
            if self.head_node.instance_type is not None and self.head_node.instance_type not in self.capacity:
                raise ValueError(
                    f"head_node.instance_type {self.head_node.instance_type!r} is not in the pool: give one of {sorted(self.capacity)}"
                )
        return self

    @property
    def reclaimed_instance_type(self) -> str | None:
        """The instance type the reclaim controller counts on this cluster (with a head node)."""
        if self.head_node is None:
            return None
        return self.head_node.instance_type or next(iter(self.capacity))


Pool = Annotated[
    BatchQuotaSharePool | BatchFairSharePool | HyperPodEksPool | HyperPodSlurmPool,
    Field(discriminator="backend"),
]
AnyPool = BatchQuotaSharePool | BatchFairSharePool | HyperPodEksPool | HyperPodSlurmPool


def members_in_account(team: Team, account_id: str) -> tuple[str, ...]:
    """The team's members of ``account_id``: on a cluster there they get the team's access entry
    themselves; members elsewhere reach it through the team's submission role."""
    return tuple(arn for arn in team.members if account_of(arn) == account_id)


# A root, OU or account id (the AWS::Organizations::Policy TargetIds pattern).
OrganisationTargetId = Annotated[
    str, StringConstraints(pattern=r"^(r-[0-9a-z]{4,32}|[0-9]{12}|ou-[0-9a-z]{4,32}-[a-z0-9]{8,32})$")
]
# A role ARN without wildcards, or an IAM Identity Center role whose random suffix is "*". Which
# accounts may hold one (the capacity and management accounts) is checked with the organisation.
ExemptPrincipalArn = Annotated[
    str,
    StringConstraints(
        pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/(aws-reserved/sso\.amazonaws\.com/([a-z0-9-]+/)?"
        r"AWSReservedSSO_[A-Za-z0-9_+=,.@-]{1,32}_(\*|[0-9a-f]{16})|[A-Za-z0-9+=,.@_/-]{1,512})$",
    ),
]
TagEnforcedFor = Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]+:([a-z0-9-]+|ALL_SUPPORTED)$", max_length=128)]


class Guardrails(_Frozen):
    """Organisation guardrails, deployed only when declared: service control policies that leave
    buying capacity and changing quotas to the platform's roles, and a tag policy for the team tag.
    Deployed to the management (or delegated administrator) account; see docs/delivery.md."""

    management_account: Account
    target_ids: tuple[OrganisationTargetId, ...] = Field(
        min_length=1, description="Root, OU or account ids the policies attach to"
    )
    exempt_principals: tuple[ExemptPrincipalArn, ...] = Field(
        default=(),
        description="Further roles (e.g. break-glass) exempt from the service control policy: role ARNs in the capacity or "
        "management account, no wildcards except the random suffix of an IAM Identity Center role",
    )
    cdk_bootstrap_qualifier: BootstrapQualifier = Field(
        default=DEFAULT_BOOTSTRAP_QUALIFIER,
        description="CDK bootstrap qualifier of the capacity account: its CloudFormation execution role may change quotas",
    )
    tag_enforced_for: tuple[TagEnforcedFor, ...] = Field(
        default=(),
        description="Resource types ('service:type' or 'service:ALL_SUPPORTED') where a wrong team tag is refused, not only reported",
    )

    @model_validator(mode="after")
    def _no_duplicate_targets(self) -> Guardrails:
        repeated = sorted({t for t in self.target_ids if self.target_ids.count(t) > 1})
        if repeated:
            raise ValueError(f"target_ids must be unique; repeated: {repeated}")
        return self


# The repository name pattern of the ECR API (2-256 characters), in an ARN without wildcards.
_ECR_REPOSITORY_NAME = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
_ECR_REPOSITORY_ARN = re.compile(
    rf"arn:aws[a-z-]*:ecr:[a-z]{{2}}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]:[0-9]{{12}}:repository/(?P<name>{_ECR_REPOSITORY_NAME})"
)


def _ecr_repository_arn(value: str) -> str:
    found = _ECR_REPOSITORY_ARN.fullmatch(value)
    if not found or not 2 <= len(found.group("name")) <= 256:
        raise ValueError(
            "an ECR repository ARN without wildcards, arn:aws:ecr:<region>:<account id>:repository/<name>; "
            "the name of 2-256 lowercase letters and digits separated by '.', '_', '__', '-' or '/'"
        )
    return value


EcrRepositoryArn = Annotated[str, AfterValidator(_ecr_repository_arn)]


# --- projects (collaboration, not security: docs/unified-studio.md) ----------------------------

# The AWS::DataZone::* CloudFormation schemas' own patterns.
DataZoneDomainId = Annotated[str, StringConstraints(pattern=r"^dzd[-_][a-zA-Z0-9_-]{1,36}$")]
DataZoneDomainUnitId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]+$", max_length=256)]
DataZoneId = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9_-]{1,36}$")]  # project, project profile
# DataZone project and domain unit names allow [\w -]; here, as every other name, ASCII without spaces.
ProjectName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=64)]
DomainUnitName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=128)]


PROJECT_OWNER, PROJECT_CONTRIBUTOR = "PROJECT_OWNER", "PROJECT_CONTRIBUTOR"
"""Unified Studio designations of a project's owner and of its members."""


class DomainUnitGrantPolicy(str, enum.Enum):
    """DataZone policies a principal may get on the project's domain unit. They act inside Unified
    Studio only (who may create projects or add members there); none of them is an IAM permission."""

    ADD_TO_PROJECT_MEMBER_POOL = "add_to_project_member_pool"
    CREATE_PROJECT = "create_project"
    OVERRIDE_PROJECT_OWNERS = "override_project_owners"


class DomainUnitGrant(_Frozen):
    policy: DomainUnitGrantPolicy
    principal: PrincipalArn = Field(description="IAM role or user ARN (a Unified Studio IAM user profile)")
    include_child_domain_units: bool = False


class NewDomainUnit(_Frozen):
    name: DomainUnitName
    parent_domain_unit_id: DataZoneDomainUnitId


class UnifiedStudio(_Frozen):
    """Where a project lives in SageMaker Unified Studio: a domain, and either an existing project
    (``project_id``) or a new one, in an existing domain unit (``domain_unit_id``), a new one
    (``domain_unit``) or the domain's root unit."""

    domain_id: DataZoneDomainId
    project_id: DataZoneId | None = Field(
        default=None, description="An existing project: memberships and connections are added to it"
    )
    domain_unit_id: DataZoneDomainUnitId | None = Field(
        default=None, description="Existing domain unit the new project is created in"
    )
    domain_unit: NewDomainUnit | None = Field(default=None, description="A domain unit to create for the new project")
    project_profile_id: DataZoneId | None = Field(default=None, description="Project profile of the new project")
    policy_grants: tuple[DomainUnitGrant, ...] = Field(
        default=(), description="DataZone policy grants on the project's domain unit"
    )

    @model_validator(mode="after")
    def _one_place(self) -> UnifiedStudio:
        if self.domain_unit_id is not None and self.domain_unit is not None:
            raise ValueError("give domain_unit_id (an existing unit) or domain_unit (a new one), not both")
        if self.project_id is not None and (self.domain_unit_id or self.domain_unit or self.project_profile_id):
            raise ValueError(
                "project_id names an existing project: domain_unit_id, domain_unit and project_profile_id apply only to a project this library creates"
            )
        if self.policy_grants and self.domain_unit_id is None and self.domain_unit is None:
            raise ValueError("policy_grants apply to the project's domain unit: give domain_unit_id or domain_unit")
        return self


class Project(_Frozen):
    """People collaborating on ML work across teams. A project gives its members no access of
    its own: they act through the team roles, as members of a team (docs/unified-studio.md)."""

    name: ProjectName
    teams: tuple[TeamName, ...] = Field(
        min_length=1, description="Teams of the project; a team belongs to at most one project"
    )
    owner: PrincipalArn = Field(description="IAM role or user ARN that owns the project")
    members: tuple[PrincipalArn, ...] = Field(
        default=(), description="IAM role or user ARNs collaborating in the project (no access of their own)"
    )
    unified_studio: UnifiedStudio | None = Field(
        default=None, description="The project's SageMaker Unified Studio domain; none is created without it"
    )

    def designations(self) -> dict[str, str]:
        """Principal ARN -> Unified Studio designation: the owner owns, every other member contributes."""
        return {**{arn: PROJECT_CONTRIBUTOR for arn in self.members}, self.owner: PROJECT_OWNER}


# --- groups of teams (a capacity level above the team) -------------------------------------


class TeamGroup(_Frozen):
    """Teams that share a capacity guarantee first among themselves, then with the rest (a Kueue
    cohort, a Slurm parent account, a Run:ai department). Not a :class:`Project`: a project is who
    collaborates (and may span departments), a group is whose capacity is pooled; a team may be in
    one of each, independently (docs/governance-file.md, Groups)."""

    name: TeamName
    teams: tuple[TeamName, ...] = Field(
        min_length=1, description="Teams of the group; a team belongs to at most one group"
    )
    quotas: dict[str, dict[str, Count]] = Field(
        default_factory=dict,
        description="Pool name -> {instance type: instances} the group is guaranteed and holds at most, its teams together; "
        "at least the sum of its teams' quotas there. A pool without one: the group's teams share there as teams outside a group",
    )


class GovernanceModel(_Frozen):
    """The whole organisation: accounts, priority classes, capacity pools and teams."""

    version: Literal[1] = 1
    organisation: DnsLabel = Field(description="Short name used in stack and resource names")
    capacity_account: Account
    consumer_accounts: dict[DnsLabel, Account] = Field(min_length=1)
    platform_admins: tuple[PrincipalArn, ...] = Field(
        min_length=1,
        description="Roles or users of the capacity account that administer the platform (key and cluster admins)",
    )
    organization_id: OrganizationId | None = Field(
        default=None,
        description="AWS Organizations id (o-...); when given, cross-account trust requires aws:PrincipalOrgID",
    )
    external_accounts: tuple[AccountId, ...] = Field(
        default=(),
        description="Accounts outside this organisation's declared accounts whose principals may still be team members "
        "(explicit opt-in; their trust carries no aws:PrincipalOrgID condition)",
    )
    priority_classes: tuple[PriorityClass, ...] = Field(min_length=1, max_length=MAX_PRIORITY_CLASSES)
    pools: tuple[Pool, ...] = Field(min_length=1)
    teams: tuple[Team, ...] = Field(min_length=1)
    capacity_windows: tuple[CapacityWindow, ...] = ()
    projects: tuple[Project, ...] = Field(
        default=(), description="Projects grouping teams, optionally in SageMaker Unified Studio"
    )
    groups: tuple[TeamGroup, ...] = Field(
        default=(),
        description="Groups of teams (departments) with a quota above their teams' (docs/governance-file.md, Groups)",
    )
    guardrails: Guardrails | None = Field(
        default=None, description="Organisation guardrails; none are deployed unless declared"
    )
    reclaim_mode: Literal["dry_run", "act"] = Field(
        default="dry_run",
        description="dry_run: the reclaim controller only records what it would preempt; act: it preempts (docs/reclaim.md)",
    )
    guard_mode: Literal["dry_run", "act"] = Field(
        default="dry_run",
        description="dry_run: the submission guard only records and reports the service jobs it would stop; act: it stops "
        "them (docs/security.md)",
    )
    shared_image_repositories: tuple[EcrRepositoryArn, ...] = Field(
        default=(),
        max_length=20,
        description="ECR repositories of shared base images (ARNs, no wildcards) every team's training jobs may pull from; a "
        "repository in another account must also allow the teams' execution roles in its repository policy",
    )
    alerts: tuple[AlertTarget, ...] = Field(
        default=(),
        description="Where platform alerts go: email addresses (subscribed to the controllers' alarm topics, and told of "
        "budgets) and existing SNS topic ARNs in the capacity account's region (alarms publish to them; e.g. AWS Chatbot)",
    )
    allow_unlisted_instance_types: tuple[
        Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9.-]*\.[a-z0-9]+$", max_length=40)], ...
    ] = Field(
        default=(),
        max_length=20,
        description="Instance types to accept although the installed botocore's service models do not list them (a type "
        "newer than botocore); every other type must be one the EC2 or SageMaker API lists",
    )
    stack_layout: Literal["single", "per_team"] = Field(
        default="single",
        description="single: every capacity-account resource in one stack (about 20 teams fit); per_team: shared "
        "resources in the capacity stack and each team's in a stack of its own (docs/architecture.md). Changing it "
        "moves resources between stacks, so choose once",
    )

    @model_validator(mode="after")
    def _organisation_is_consistent(self) -> GovernanceModel:
        problems = check_organisation(self)
        if problems:
            # Not a ValueError inside pydantic's machinery: raised as is, with every problem.
            raise _OrganisationProblems(problems)
        return self

    @classmethod
    def from_dict(cls, data: Any) -> GovernanceModel:
        """Build and check a model from plain data (parsed YAML or JSON)."""
        if not isinstance(data, dict):
            raise GovernanceError(
                [
                    Problem(
                        path="",
                        wrong="not a mapping",
                        value=type(data).__name__,
                        allowed="a mapping of governance settings",
                    )
                ]
            )
        keys = [key for key in data if not isinstance(key, str)]
        if keys:  # keyword arguments must be text; YAML turns `on:` or `1:` into True or 1
            raise GovernanceError(
                [
                    Problem(
                        path="",
                        wrong="a setting name is not text",
                        value=keys[0],
                        allowed="setting names as text; quote the key",
                    )
                ]
            )
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            # Unknown settings must not hide the checks across the file, which run only on a
            # model whose every field is valid: validate again without them and report both.
            first = governance_error_from(error, cls).problems
            problems = list(first)
            errors = error.errors(include_url=False)
            unknown = [item["loc"] for item in errors if item["type"] == "extra_forbidden"]
            missing = {path_of(item["loc"]) for item in errors if item["type"] == "missing"}
            # a misspelt required setting (`capcity`) is read under its right name the second time
            renamed = {
                loc: close
                for loc in unknown
                if (close := closest_setting(cls, loc)) and path_of((*loc[:-1], close)) in missing
            }
            # "capacity: missing" beside "capcity: ... did you mean capacity?" says nothing more
            moved = {path_of((*loc[:-1], close)) for loc, close in renamed.items()}
            problems = [p for p in problems if not (p.wrong == "missing" and p.path in moved)]
            if unknown:
                # what the objects holding them say without them is a guess: left out (a misspelt
                # `quota` would add "teams[0].quotas: no quota in any pool")
                holders = tuple(f"{path_of(loc[:-1])}." if len(loc) > 1 else "" for loc in unknown)
                try:
                    cls.model_validate(without_settings(data, unknown, renamed))
                except ValidationError as again:
                    problems += governance_error_from(again, cls).problems
                except _OrganisationProblems as again:
                    problems += again.problems
                kept = {str(p): p for p in problems if p in first or not _under(p.path, holders)}
                problems = list(kept.values())
            raise GovernanceError(problems) from None
        except _OrganisationProblems as error:
            raise GovernanceError(error.problems) from None

    def pool(self, name: str) -> AnyPool:
        return next(p for p in self.pools if p.name == name)

    def teams_in(self, pool_name: str) -> tuple[Team, ...]:
        """Teams with a quota in the pool, in declaration order."""
        return tuple(t for t in self.teams if pool_name in t.quotas)

    def member_principals(self, team: Team) -> tuple[str, ...]:
        """Who may act for ``team``: its members' ARNs, then the role ARN patterns of its
        permission sets (an undeclared account's permission sets are left out: validation
        reports them)."""
        patterns = []
        for permission_set in team.permission_sets:
            account = self.consumer_accounts.get(permission_set.account or team.account or "")
            if account is not None:
                patterns += identity_center_role_patterns(
                    account.account_id, permission_set.name, aws_partition(account.region)
                )
        return (*team.members, *patterns)

    def teams_of_account(self, account_name: str) -> tuple[Team, ...]:
        return tuple(t for t in self.teams if t.account == account_name)

    def group_of(self, team_name: str) -> TeamGroup | None:
        return next((g for g in self.groups if team_name in g.teams), None)

    def members_quota(self, group: TeamGroup, pool_name: str) -> dict[str, int]:
        """The sum of the quotas of ``group``'s teams in a pool, per instance type."""
        total: dict[str, int] = {}
        for team in self.teams:
            if team.name in group.teams and pool_name in team.quotas:
                for instance_type, count in instance_quota(
                    team, self.pool(pool_name)
                ).items():  # a GPU quota in whole instances
                    total[instance_type] = total.get(instance_type, 0) + count
        return total

    def project_of(self, team_name: str) -> Project | None:
        return next((p for p in self.projects if team_name in p.teams), None)

    def hyperpod_pools_of(self, project: Project) -> tuple[AnyPool, ...]:
        """The HyperPod pools (clusters) the project's teams have a quota in, in pool order."""
        used = {pool for team in self.teams if team.name in project.teams for pool in team.quotas}
        return tuple(p for p in self.pools if p.name in used and backend_of(p).family == "hyperpod")


# --- whole-organisation checks ----------------------------------------------------------------


def check_organisation(model: GovernanceModel) -> list[Problem]:
    """Every cross-reference and backend limit that a deploy would otherwise trip over."""
    problems: list[Problem] = []
    _duplicates([p.name for p in model.priority_classes], "priority_classes", problems)
    _duplicates([p.name for p in model.pools], "pools", problems)
    _duplicates([t.name.lower() for t in model.teams], "teams", problems, "team names must differ (ignoring case)")
    problems += check_name_scopes(model)

    pools = {p.name: p for p in model.pools}
    for name in model.consumer_accounts:
        # The account's stack holds its teams' policies only: without a team it is empty, which
        # CloudFormation refuses ("Resources section must exist and be non-empty").
        if not model.teams_of_account(name):
            problems.append(
                Problem(
                    path=f"consumer_accounts.{name}",
                    wrong="no team's account: its stack would be empty, which CloudFormation refuses",
                    value=name,
                    allowed="the account of at least one team (teams[].account); otherwise remove it "
                    "(and destroy its stack if it was deployed)",
                )
            )
    for index, team in enumerate(model.teams):
        path = f"teams[{index}]"
        if team.account not in model.consumer_accounts:
            problems.append(
                Problem(
                    path=f"{path}.account",
                    wrong="undeclared account" if team.account else "missing",
                    value=team.account,
                    allowed=f"one of {sorted(model.consumer_accounts)}",
                )
            )
        if not team.quotas:
            problems.append(
                Problem(
                    path=f"{path}.quotas",
                    wrong="team has no quota in any pool",
                    value={},
                    allowed=f"at least one of {sorted(pools)}",
                )
            )
        if not team.members and not team.permission_sets:
            problems.append(
                Problem(
                    path=f"{path}.members",
                    wrong="nobody may act for the team",
                    value=[],
                    allowed="at least one IAM role or user ARN, or a permission_sets entry",
                )
            )
        for member_index, permission_set in enumerate(team.permission_sets):
            if permission_set.account is not None and permission_set.account not in model.consumer_accounts:
                problems.append(
                    Problem(
                        path=f"{path}.permission_sets[{member_index}].account",
                        wrong="undeclared account",
                        value=permission_set.account,
                        allowed=f"one of {sorted(model.consumer_accounts)}",
                    )
                )
        for pool_name in team.quotas:
            if pool_name not in pools:
                problems.append(
                    Problem(
                        path=f"{path}.quotas.{pool_name}",
                        wrong="undeclared pool",
                        value=pool_name,
                        allowed=f"one of {sorted(pools)}",
                    )
                )
        for pool_name in team.kubernetes:
            if (
                pool_name not in team.quotas
                or pools.get(pool_name) is None
                or not backend_of(pools[pool_name]).kubernetes_tenancy
            ):
                kubernetes_pools = sorted(
                    p for p in team.quotas if p in pools and backend_of(pools[p]).kubernetes_tenancy
                )
                problems.append(
                    Problem(
                        path=f"{path}.kubernetes.{pool_name}",
                        wrong=f"not a {' or '.join(backends_where(lambda b: b.kubernetes_tenancy))} pool the team has a quota in",
                        value=pool_name,
                        allowed=f"one of {kubernetes_pools}",
                    )
                )
            declared = [c.name for c in model.priority_classes]
            for class_index, name in enumerate(team.kubernetes[pool_name].priority_classes or ()):
                if name not in declared:
                    problems.append(
                        Problem(
                            path=f"{path}.kubernetes.{pool_name}.priority_classes[{class_index}]",
                            wrong="undeclared priority class",
                            value=name,
                            allowed=f"one of {declared}",
                        )
                    )
    for pool_index, pool in enumerate(model.pools):
        members = [(f"teams[{i}]", t) for i, t in enumerate(model.teams) if pool.name in t.quotas]
        problems += check_pool_teams(pool, members, f"pools[{pool_index}]")
    problems += _raised_part_instance_quotas(model)
    if not problems:  # the Slurm names are derived from a model whose references hold
        for pool in model.pools:
            if backend_of(pool).slurm_accounts:
                # Organisation-wide findings come once however many Slurm pools repeat them.
                problems += [p for p in slurm_problems(model, pool.name) if p not in problems]
    problems += check_windows(model)
    problems += check_instance_types(model)
    problems += check_projects(model)
    problems += check_groups(model)
    problems += check_principals(model)
    problems += check_alert_topics(model)
    return problems


def _raised_part_instance_quotas(model: GovernanceModel) -> list[Problem]:
    """The capacity controller raises a HyperPod EKS compute quota by rewriting its resources as
    instance counts (gpu_governance_runtime/capacity/shares.py): a team whose quota there is in GPUs,
    vCPU, memory or MIG partitions would lose it while its window runs."""
    problems = []
    teams = {team.name: index for index, team in enumerate(model.teams)}
    pools = {pool.name: pool for pool in model.pools}
    for window in model.capacity_windows:
        pool = pools.get(getattr(window.feeds, "pool", None) or "")
        if pool is None or not backend_of(pool).part_instance_quotas or window.team not in teams:
            continue
        team = model.teams[teams[window.team]]
        for instance_type, entry in team.quotas.get(pool.name, {}).items():
            if isinstance(entry, ResourceQuota) and entry.instances is None:
                problems.append(
                    Problem(
                        path=f"teams[{teams[window.team]}].quotas.{pool.name}.{instance_type}",
                        wrong=f"capacity window {window.name} raises this compute quota in whole instances, which would replace it",
                        value=entry.declared(),
                        allowed="instances: N while a capacity window feeds the team on this pool",
                    )
                )
    return problems


def check_name_scopes(model: GovernanceModel) -> list[Problem]:
    """No name scope derived from a team's name covers another team's, in any case: training-job
    names and their log streams, secrets, discovery parameters and HyperPod namespaces are granted
    by name (no tags there), so ``AWSBatch<team>`` or ``<team>-x`` beside ``<team>`` would reach
    the other team's. One problem per later team of a clashing pair, naming both scopes.

    Scopes are literals with at most a trailing ``*`` (``scopes_overlap``): sorted by literal, an
    open scope overlaps exactly the run of literals that start with it, so a pass over the sorted
    list finds every clash without comparing every pair (organisations have hundreds of teams)."""
    entries = sorted(
        (pattern.lower().rstrip("*"), pattern.endswith("*"), index, order, what, pattern)
        for index, team in enumerate(model.teams)
        for order, (what, pattern) in enumerate(
            (w, p) for w, ps in team_name_scopes(model.organisation, team.name).items() for p in ps
        )
    )
    literals = [entry[0] for entry in entries]
    clashes: dict[
        int, tuple[int, int, str, str, str]
    ] = {}  # later team -> (earlier team, order, what, its pattern, the earlier's)
    for literal, is_open, index, order, what, pattern in entries:
        position = bisect.bisect_left(literals, literal)
        while position < len(entries) and (
            literals[position].startswith(literal) if is_open else literals[position] == literal
        ):
            _, _, other, other_order, other_what, other_pattern = entries[position]
            position += 1
            if other == index or model.teams[other].name.lower() == model.teams[index].name.lower():
                continue  # the duplicate check names equal names
            clash = (
                (other, order, what, pattern, other_pattern)
                if index > other
                else (index, other_order, other_what, other_pattern, pattern)
            )
            later = max(index, other)
            clashes[later] = min(clashes.get(later, clash), clash)
    return [
        Problem(
            path=f"teams[{later}].name",
            wrong=f"its {what} scope '{mine}' overlaps team {model.teams[earlier].name}'s '{theirs}'",
            value=model.teams[later].name,
            allowed="a name whose derived names (docs/security.md) no other team's name covers, ignoring case",
        )
        for later, (earlier, _, what, mine, theirs) in sorted(clashes.items())
    ]


def check_projects(model: GovernanceModel) -> list[Problem]:
    """Projects name declared teams, each team at most once, and a project in Unified Studio
    names every cluster it connects to."""
    problems: list[Problem] = []
    _duplicates(
        [p.name.lower() for p in model.projects], "projects", problems, "project names must differ (ignoring case)"
    )
    teams, owner = {t.name for t in model.teams}, {}
    for index, project in enumerate(model.projects):
        for t, team in enumerate(project.teams):
            path = f"projects[{index}].teams[{t}]"
            if team not in teams:
                problems.append(
                    Problem(path=path, wrong="undeclared team", value=team, allowed=f"one of {sorted(teams)}")
                )
            elif owner.setdefault(team, project.name) != project.name:
                problems.append(
                    Problem(
                        path=path,
                        wrong=f"already in project {owner[team]}",
                        value=team,
                        allowed="a team of no other project",
                    )
                )
        if project.unified_studio is None:
            continue
        for pool in model.hyperpod_pools_of(project):
            if pool.cluster_name is None:  # only hyperpod_eks pools may lack it
                pool_index = model.pools.index(pool)
                problems.append(
                    Problem(
                        path=f"projects[{index}].unified_studio",
                        wrong=f"the project connects to pool {pool.name}, whose HyperPod cluster name is not declared",
                        value=pool.cluster_arn,
                        allowed=f"pools[{pool_index}].cluster_name set to the cluster's name",
                    )
                )
    return problems


def check_groups(model: GovernanceModel) -> list[Problem]:
    """Groups name declared teams, each team at most once, under a name no team has (on Slurm both
    become accounts of one tree); a group quota covers its teams' quotas (it is what they share, so
    it cannot promise less than each of them is promised) and, with every team outside a group,
    fits the pool: a guarantee the pool cannot hold is refused, not silently weakened."""
    problems: list[Problem] = []
    _duplicates([g.name.lower() for g in model.groups], "groups", problems, "group names must differ (ignoring case)")
    teams = {t.name: t for t in model.teams}
    team_names = {name.lower() for name in teams}
    pools = {p.name: p for p in model.pools}
    owner: dict[str, str] = {}
    for index, group in enumerate(model.groups):
        path = f"groups[{index}]"
        if group.name.lower() in team_names:
            problems.append(
                Problem(
                    path=f"{path}.name",
                    wrong="also a team's name",
                    value=group.name,
                    allowed="a name no team has (ignoring case)",
                )
            )
        for t, team in enumerate(group.teams):
            if team not in teams:
                problems.append(
                    Problem(
                        path=f"{path}.teams[{t}]",
                        wrong="undeclared team",
                        value=team,
                        allowed=f"one of {sorted(teams)}",
                    )
                )
            elif owner.setdefault(team, group.name) != group.name:
                problems.append(
                    Problem(
                        path=f"{path}.teams[{t}]",
                        wrong=f"already in group {owner[team]}",
                        value=team,
                        allowed="a team of no other group",
                    )
                )
        for pool_name, quota in group.quotas.items():
            qpath = f"{path}.quotas.{pool_name}"
            if pool_name not in pools:
                problems.append(
                    Problem(path=qpath, wrong="undeclared pool", value=pool_name, allowed=f"one of {sorted(pools)}")
                )
                continue
            for instance_type, count in quota.items():
                if instance_type not in pools[pool_name].capacity:
                    problems.append(
                        Problem(
                            path=f"{qpath}.{instance_type}",
                            wrong="pool has no capacity of this instance type",
                            value=instance_type,
                            allowed=f"one of {sorted(pools[pool_name].capacity)}",
                        )
                    )
                    continue
                members = model.members_quota(group, pool_name).get(instance_type, 0)
                if count < members:
                    problems.append(
                        Problem(
                            path=f"{qpath}.{instance_type}",
                            wrong=f"less than its teams' quotas together ({members})",
                            value=count,
                            allowed=f"at least {members}, or smaller team quotas",
                        )
                    )
            for instance_type, members in model.members_quota(group, pool_name).items():
                if instance_type not in quota:
                    problems.append(
                        Problem(
                            path=qpath,
                            wrong=f"no quota of {instance_type}, which its teams hold ({members})",
                            value=sorted(quota),
                            allowed=f"a quota for every instance type its teams have in pool {pool_name}",
                        )
                    )
    if problems:
        return problems
    for pool_index, pool in enumerate(model.pools):
        for instance_type, capacity in pool.capacity.items():
            bounded = [g for g in model.groups if pool.name in g.quotas]
            if not bounded:
                continue  # the team quotas alone, which check_pool_teams checks
            grouped = sum(g.quotas[pool.name].get(instance_type, 0) for g in bounded)
            inside = {name for g in bounded for name in g.teams}
            alone = sum(
                instance_quota(t, pool).get(instance_type, 0)
                for t in model.teams
                if t.name not in inside and pool.name in t.quotas
            )
            if grouped + alone > capacity:
                problems.append(
                    Problem(
                        path=f"pools[{pool_index}].capacity.{instance_type}",
                        wrong=f"groups and teams outside groups are guaranteed {grouped + alone} instances but the pool has fewer",
                        value=capacity,
                        allowed=f"at least {grouped + alone}, or smaller group quotas",
                    )
                )
    return problems


def check_alert_topics(model: GovernanceModel) -> list[Problem]:
    """CloudWatch alarms publish only to topics of their own region."""
    region = model.capacity_account.region
    return [
        Problem(
            path=f"alerts[{i}]",
            wrong="SNS topic in another region than the alarms",
            value=target,
            allowed=f"a topic in {region} (the capacity account's region)",
        )
        for i, target in enumerate(model.alerts)
        if target.startswith("arn:") and target.split(":")[3] != region
    ]


def check_principals(model: GovernanceModel) -> list[Problem]:
    """Who may act where: admins only from the capacity account, members only from declared
    accounts, exemptions only in the platform's accounts, and never a role the library creates."""
    problems: list[Problem] = []
    capacity = model.capacity_account.account_id
    declared = {capacity, *(account.account_id for account in model.consumer_accounts.values())}
    for index, account_id in enumerate(model.external_accounts):
        if account_id in declared:
            problems.append(
                Problem(
                    path=f"external_accounts[{index}]",
                    wrong="already a declared account",
                    value=account_id,
                    allowed="an account that is neither the capacity account nor a consumer account",
                )
            )
    checked: list[tuple[str, str, set[str], str]] = [
        (
            f"platform_admins[{i}]",
            arn,
            {capacity},
            f"a role or user of the capacity account {capacity}: admins hold every tenant key, cluster and guardrail exemption",
        )
        for i, arn in enumerate(model.platform_admins)
    ]
    member_accounts = declared | set(model.external_accounts)
    checked += [
        (
            f"teams[{t}].members[{m}]",
            arn,
            member_accounts,
            "an account of capacity_account or consumer_accounts, or one listed in external_accounts",
        )
        for t, team in enumerate(model.teams)
        for m, arn in enumerate(team.members)
    ]
    for p, project in enumerate(model.projects):
        people = [
            (f"projects[{p}].owner", project.owner),
            *((f"projects[{p}].members[{m}]", arn) for m, arn in enumerate(project.members)),
        ]
        if project.unified_studio is not None:
            people += [
                (f"projects[{p}].unified_studio.policy_grants[{g}].principal", grant.principal)
                for g, grant in enumerate(project.unified_studio.policy_grants)
            ]
        checked += [
            (
                path,
                arn,
                member_accounts,
                "an account of capacity_account or consumer_accounts, or one listed in external_accounts",
            )
            for path, arn in people
        ]
    problems += _principal_problems(model, checked)
    problems += _shared_member_roles(model)
    problems += _overlapping_identity_center_members(model)
    if model.guardrails is not None:
        problems += check_exemptions(model, model.guardrails)
    return problems


def _shared_member_roles(model: GovernanceModel) -> list[Problem]:
    """An IAM role listed among the members of two teams: whoever can act as it (every member of a
    Unified Studio project, for a project's role) gets both teams' roles, keys, buckets and jobs,
    so the teams are no longer apart. A person in two teams is listed by a role of their own per
    team (docs/unified-studio.md). Role names are unique per account ignoring case (and path)."""
    listings: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for t, team in enumerate(model.teams):
        for m, arn in enumerate(team.members):
            kind, _, path_and_name = arn.split(":", 5)[-1].partition("/")
            if kind == "role":
                role = (account_of(arn), path_and_name.rsplit("/", 1)[-1].lower())
                listings.setdefault(role, []).append((f"teams[{t}].members[{m}]", team.name, arn))
    problems = []
    for holders in listings.values():
        teams = sorted({team for _, team, _ in holders})
        if len(teams) > 1:
            for path, _, arn in holders:
                problems.append(
                    Problem(
                        path=path,
                        wrong=f"role is a member of teams {listed(teams)}",
                        value=arn,
                        allowed="a role of one team only: whoever acts as it (every member of a project, for a Unified Studio project role) "
                        "would get every team's access; list each person's own role in each team instead",
                    )
                )
    return problems


def _overlapping_identity_center_members(model: GovernanceModel) -> list[Problem]:
    """A team's permission set admits the roles Identity Center makes for it by the pattern
    ``AWSReservedSSO_<name>_*`` in its account, and that pattern also matches the role of another
    team's permission set there named the same or ``<name>_<more>`` (``ML`` admits ``ML_Research``),
    and any member ARN of another team it matches: those people would act for both teams."""
    admitted = []  # (path, team, permission set, account id, its role patterns)
    for t, team in enumerate(model.teams):
        for p, permission_set in enumerate(team.permission_sets):
            account = model.consumer_accounts.get(permission_set.account or team.account or "")
            if account is not None:
                patterns = identity_center_role_patterns(
                    account.account_id, permission_set.name, aws_partition(account.region)
                )
                admitted.append(
                    (
                        f"teams[{t}].permission_sets[{p}].name",
                        team.name,
                        permission_set.name,
                        account.account_id,
                        patterns,
                    )
                )
    # Every team's principals: its members, and a role Identity Center may make for each of its
    # permission sets (with and without a region in the path; any suffix stands for all).
    principals = [(team.name, arn, f"member {arn}") for team in model.teams for arn in team.members] + [
        (team, pattern.replace("*", "0123456789abcdef"), f"permission set {name}")
        for _, team, name, _, patterns in admitted
        for pattern in patterns
    ]
    problems = []
    for path, team, name, account, patterns in admitted:
        caught = sorted(
            {
                f"team {other}'s {what}"
                for other, arn, what in principals
                if other != team and any(fnmatchcase(arn, pattern) for pattern in patterns)
            }
        )
        if caught:
            problems.append(
                Problem(
                    path=path,
                    wrong=f"its Identity Center roles (AWSReservedSSO_{name}_* in account {account}) also match "
                    f"{listed(caught)}",
                    value=name,
                    allowed="a permission set named neither as another team's in that account nor as another's name "
                    "followed by '_': its users would act for both teams",
                )
            )
    return problems


def shared_account_warnings(model: GovernanceModel) -> list[str]:
    """What ``validate`` warns of: member roles of two teams in one account. IAM tells the teams
    apart by role ARN (the submission roles trust exact ARNs), but whether one team's member can
    become the other's is for that account's IAM, which the library neither writes nor reads: a
    role whose trust policy names its account can be assumed by any principal there that an
    identity policy allows to (PowerUserAccess allows sts:AssumeRole on every role), and then acts
    for the role's team. Identity Center roles (``permission_sets``) and users are not counted:
    Identity Center alone assumes its roles, and nobody assumes a user."""
    roles: dict[str, dict[str, list[str]]] = {}  # account -> team -> its member roles' names
    first: dict[str, int] = {}  # account -> the first team with a member role there
    for t, team in enumerate(model.teams):
        for arn in team.members:
            kind, _, path = arn.split(":", 5)[-1].partition("/")
            if kind == "role" and not path.startswith("aws-reserved/"):
                roles.setdefault(account_of(arn), {}).setdefault(team.name, []).append(path.rsplit("/", 1)[-1])
                first.setdefault(account_of(arn), t)
    return [
        f"teams[{first[account]}].members: member roles of {len(teams)} teams in account {account}: "
        f"{listed([f'{team} ({listed(names)})' for team, names in teams.items()])} - IAM keeps these teams apart only "
        "as far as that account's own policies do: a member role whose trust policy names the account can be assumed "
        "by any principal there allowed sts:AssumeRole on it, another team's member included, who then acts for the "
        "role's team. Make each member role trust only its own people (an identity provider, or Identity Center "
        "through permission_sets), or give each team an account of its own"
        for account, teams in sorted(roles.items())
        if len(teams) > 1
    ]


def check_exemptions(model: GovernanceModel, guardrails: Guardrails) -> list[Problem]:
    """Guardrail exemptions must be roles of the platform's accounts (capacity, management), not
    roles a tenant can create in its own account, and not roles the library creates. Also used
    for guardrails handed to the construct apart from the model."""
    capacity, management = model.capacity_account.account_id, guardrails.management_account.account_id
    allowed = f"a role of the capacity ({capacity}) or management ({management}) account"
    return _principal_problems(
        model,
        [
            (f"guardrails.exempt_principals[{i}]", arn, {capacity, management}, allowed)
            for i, arn in enumerate(guardrails.exempt_principals)
        ],
    )


def _principal_problems(model: GovernanceModel, checked: list[tuple[str, str, set[str], str]]) -> list[Problem]:
    """``checked``: (path, principal ARN, the accounts it may belong to, what is allowed)."""
    problems: list[Problem] = []
    for path, arn, accounts, allowed in checked:
        if account_of(arn) not in accounts:
            problems.append(
                Problem(path=path, wrong=f"account {account_of(arn)} is not allowed here", value=arn, allowed=allowed)
            )
        reason = library_role(arn, model.organisation)
        if reason:
            problems.append(
                Problem(
                    path=path,
                    wrong=reason,
                    value=arn,
                    allowed="a role the platform or the team owns, not one this library creates",
                )
            )
    return problems


def check_pool_teams(pool: AnyPool, teams: Sequence[tuple[str, Team]], pool_path: str) -> list[Problem]:
    """What a backend would refuse about the teams of one pool; ``teams`` pairs each team with
    its path in the caller's input. Used by the organisation check and by the constructs."""
    backend = backend_of(pool)
    problems: list[Problem] = []
    for path, team in teams:
        qpath = f"{path}.quotas.{pool.name}"
        quota = team.quotas.get(pool.name)
        if quota is None:
            problems.append(
                Problem(
                    path=f"{path}.quotas",
                    wrong=f"no quota in pool {pool.name}",
                    value=sorted(team.quotas),
                    allowed=f"a quota keyed {pool.name!r}",
                )
            )
            continue
        for instance_type in quota:
            if instance_type not in pool.capacity:
                problems.append(
                    Problem(
                        path=f"{qpath}.{instance_type}",
                        wrong="pool has no capacity of this instance type",
                        value=instance_type,
                        allowed=f"one of {sorted(pool.capacity)}",
                    )
                )
        problems += _quota_unit_problems(pool, team, quota, qpath)
        if team.gpu_hour_limit and backend.gpu_hour_switch:
            # the reclaim controller counts GPU hours as instances x GPUs per instance (reclaim/gpu_hours.py): as
            # the pool declares them (HyperPod EKS, whose usage it reads in GPUs) or as SageMaker training types have them
            declares = hasattr(pool, "gpus_per_instance")
            for instance_type in sorted(
                t for t in pool.capacity if not (gpus_of(pool, t) if declares else TRAINING_INSTANCE_GPUS.get(t))
            ):
                problems.append(
                    Problem(
                        path=f"{path}.gpu_hour_limit",
                        wrong=f"counted in GPU hours, but the GPUs of one {instance_type} are not known"
                        + (" (the pool declares no gpus_per_instance for it)" if declares else ""),
                        value=pool.name,
                        allowed=f"set gpus_per_instance.{instance_type} on pool {pool.name}"
                        if declares
                        else f"pool capacity of GPU instance types: {', '.join(sorted(TRAINING_INSTANCE_GPUS))}",
                    )
                )
        if backend.max_quota_types is not None and len(quota) > backend.max_quota_types:
            problems.append(
                Problem(
                    path=qpath,
                    wrong=f"too many instance types for one {backend.quota_noun}",
                    value=len(quota),
                    allowed=f"at most {backend.max_quota_types}",
                )
            )
        if backend.family == "hyperpod":
            if not HYPERPOD_TEAM_NAME.fullmatch(team.name):
                problems.append(
                    Problem(
                        path=f"{path}.name",
                        wrong="not a HyperPod team name",
                        value=team.name,
                        allowed="a lowercase DNS label: a-z, 0-9 and '-', at most 40",
                    )
                )
            if team.sharing.borrows_without_limit:
                problems.append(
                    Problem(
                        path=f"{path}.sharing.borrow_limit",
                        wrong="HyperPod has no unlimited borrowing",
                        value=UNLIMITED,
                        allowed=f"a percent 1-{MAX_HYPERPOD_BORROW_LIMIT}",
                    )
                )
            elif (
                backend.bounds_borrow_limit
                and team.sharing.borrow_limit is not None
                and not 1 <= team.sharing.borrow_limit <= MAX_HYPERPOD_BORROW_LIMIT
            ):
                problems.append(
                    Problem(
                        path=f"{path}.sharing.borrow_limit",
                        wrong="outside HyperPod's documented borrow limit range",
                        value=team.sharing.borrow_limit,
                        allowed=f"a percent 1-{MAX_HYPERPOD_BORROW_LIMIT}",
                    )
                )
    if backend.kubernetes_tenancy:
        owners: dict[str, str] = {}
        for path, team in teams:
            for index, group in enumerate(
                team.kubernetes.get(pool.name, KubernetesTenancy()).dedicated_instance_groups
            ):
                if owners.setdefault(group, team.name) != team.name:
                    problems.append(
                        Problem(
                            path=f"{path}.kubernetes.{pool.name}.dedicated_instance_groups[{index}]",
                            wrong=f"already dedicated to team {owners[group]}",
                            value=group,
                            allowed="an instance group no other team has",
                        )
                    )
    if backend.max_teams_per_pool is not None and len(teams) > backend.max_teams_per_pool:
        problems.append(
            Problem(
                path=pool_path,
                wrong=backend.too_many_teams.format(pool=pool.name),
                value=len(teams),
                allowed=f"at most {backend.max_teams_per_pool}{backend.too_many_teams_advice}",
            )
        )
    for instance_type, capacity in pool.capacity.items():
        entries = [t.quotas[pool.name][instance_type] for _, t in teams if instance_type in t.quotas.get(pool.name, {})]
        gpus = gpus_of(pool, instance_type)
        if gpus and any(isinstance(e, ResourceQuota) and e.accelerators is not None for e in entries):
            # Part-instance GPU quotas (HyperPod EKS) add up in GPUs, as task governance counts them.
            guaranteed = sum(
                e.accelerators
                if isinstance(e, ResourceQuota) and e.accelerators is not None
                else whole_instances(e, gpus) * gpus
                for e in entries
            )
            if guaranteed > capacity * gpus:
                problems.append(
                    Problem(
                        path=f"{pool_path}.capacity.{instance_type}",
                        wrong=f"teams are guaranteed {guaranteed} GPUs but the pool has "
                        f"{capacity * gpus} ({gpus} per instance)",
                        value=capacity,
                        allowed=f"at least {-(-guaranteed // gpus)}, or smaller team quotas",
                    )
                )
            continue
        guaranteed = sum(whole_instances(e, gpus) for e in entries)
        if guaranteed > capacity:
            problems.append(
                Problem(
                    path=f"{pool_path}.capacity.{instance_type}",
                    wrong=f"teams are guaranteed {guaranteed} instances but the pool has fewer",
                    value=capacity,
                    allowed=f"at least {guaranteed}, or smaller team quotas",
                )
            )
    return problems


def _quota_unit_problems(pool: AnyPool, team: Team, quota: Mapping[str, QuotaEntry], qpath: str) -> list[Problem]:
    """What a backend cannot express of a quota declared in GPUs, vCPU, memory or MIG partitions, or
    of an absolute borrow limit. HyperPod EKS takes them all (ComputeQuotaResourceConfig,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ComputeQuotaResourceConfig.html); a
    Batch capacity limit counts instances of a type and its borrowLimit is a percent only
    (https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaShareResourceSharingConfiguration.html);
    Slurm quotas here are whole instance groups, its borrow QoS caps GPUs (GrpTRES=gres/gpu)."""
    problems: list[Problem] = []
    part_instance = backend_of(pool).part_instance_quotas
    for instance_type, entry in quota.items():
        if not isinstance(entry, ResourceQuota) or instance_type not in pool.capacity:
            continue
        path, gpus = f"{qpath}.{instance_type}", gpus_of(pool, instance_type)
        if entry.part_instance and not part_instance:
            problems.append(
                Problem(
                    path=path,
                    wrong=f"a {pool.backend} pool takes no vcpu, memory_gib or accelerator_partition",
                    value=entry.declared(),
                    allowed="instances or accelerators; part-instance resources only on hyperpod_eks pools",
                )
            )
        partition = entry.accelerator_partition
        if partition is not None and partition.type not in known(MIG_PROFILES):
            problems.append(
                Problem(
                    path=f"{path}.accelerator_partition.type",
                    wrong="not a MIG profile SageMaker knows",
                    value=partition.type,
                    allowed=f"one of {sorted(known(MIG_PROFILES))}",
                )
            )
        for field, amount in (("accelerators", entry.accelerators), ("borrow_accelerators", entry.borrow_accelerators)):
            if amount is None:
                continue
            if not gpus:
                problems.append(
                    Problem(
                        path=f"{path}.{field}",
                        wrong=f"the pool declares no gpus_per_instance for {instance_type}"
                        if hasattr(pool, "gpus_per_instance")
                        else f"a {pool.backend} pool counts whole instances (its capacity unit is the instance type)",
                        value=amount,
                        allowed=f"set gpus_per_instance.{instance_type} on pool {pool.name}"
                        if hasattr(pool, "gpus_per_instance")
                        else "instances: N",
                    )
                )
            elif amount % gpus and not part_instance:
                problems.append(
                    Problem(
                        path=f"{path}.{field}",
                        wrong=f"not whole {instance_type} instances ({gpus} GPUs each), which a {pool.backend} pool counts",
                        value=amount,
                        allowed=f"a multiple of {gpus}, e.g. {amount - amount % gpus or gpus} or {amount - amount % gpus + gpus}",
                    )
                )
        if entry.borrow_accelerators is not None and team.sharing.strategy is not SharingStrategy.LEND_AND_BORROW:
            problems.append(
                Problem(
                    path=f"{path}.borrow_accelerators",
                    wrong=f"only lend_and_borrow teams borrow, not {team.sharing.strategy.value}",
                    value=entry.borrow_accelerators,
                    allowed="drop it, or sharing.strategy lend_and_borrow",
                )
            )
    return problems


def _duplicates(names: list[str], path: str, problems: list[Problem], allowed: str = "names must be unique") -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            problems.append(Problem(path=f"{path}[{index}].name", wrong="duplicate name", value=name, allowed=allowed))
        seen.add(name)


def _under(path: str, holders: tuple[str, ...]) -> bool:
    """Whether ``path`` is inside one of ``holders`` (paths ending in a dot; "" is the whole file)."""
    return any(holder == "" or f"{path}.".startswith(holder) for holder in holders)
