"""Teams as the governance file declares them: how each shares its capacity (a preset or its
own sharing policy), its accounts, members and permission sets, its quotas per pool, its
Kubernetes settings and its GPU-hour limit."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from gpu_governance_runtime.contract import (
    SharingStrategy,
    borrow_ceiling,
)

from .base import (
    MAX_BORROW_LIMIT,
    UNLIMITED,
    AccountId,
    CostCentre,
    Count,
    DnsLabel,
    EmailAddress,
    InstanceGroupName,
    PermissionSetName,
    PrincipalArn,
    Region,
    TeamName,
    UsdAmount,
    _Frozen,
    account_of,
)
from .quota import QuotaEntry
from .run_limits import MAX_RUN_DESCRIPTION, MaxRunMinutes, UserLimits

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


def members_in_account(team: Team, account_id: str) -> tuple[str, ...]:
    """The team's members of ``account_id``: on a cluster there they get the team's access entry
    themselves; members elsewhere reach it through the team's submission role."""
    return tuple(arn for arn in team.members if account_of(arn) == account_id)
