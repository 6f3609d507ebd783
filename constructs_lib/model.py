"""The governance model: one declaration of the organisation used by the file loader, by the
constructs' typed props, by the compiled controller policy and by the CLI.

Every model object is a frozen pydantic model built with keyword arguments only. Field-level
checks (types, ranges, patterns) live on the fields; checks that need the whole organisation
(references between teams, accounts and pools, backend limits) live in ``check_organisation``.
Both report every problem at once as a :class:`GovernanceError`.
"""

from __future__ import annotations

import enum
import re
from decimal import Decimal
from typing import Annotated, Any, Literal, Mapping, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from gpu_governance_runtime.contract import (
    BACKENDS, BATCH_QUOTA_SHARE, HYPERPOD_BACKENDS, HYPERPOD_EKS, HYPERPOD_SLURM, SharingStrategy, borrow_ceiling,
)

from .errors import GovernanceError, Problem

# --- names and identifiers ------------------------------------------------------------------

# [0-9], not \d: \d also matches other scripts' digits (a full-width account id would validate).
AccountId = Annotated[str, StringConstraints(pattern=r"^[0-9]{12}$")]
Region = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]$", max_length=32)]
PrincipalArn = Annotated[
    str, StringConstraints(pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]{1,512}$")
]
OrganizationId = Annotated[str, StringConstraints(pattern=r"^o-[a-z0-9]{10,32}$")]
# The CDK bootstrap template's own pattern for a qualifier.
BootstrapQualifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,10}$")]
DEFAULT_BOOTSTRAP_QUALIFIER = "hnb659fds"
# Team names become Batch quota share and fair-share identifiers, IAM role names (64 max with
# the longest suffix we add) and KMS aliases: 40 of [A-Za-z0-9_-] fits all of them.
TEAM_NAME_MAX = 40
TeamName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=TEAM_NAME_MAX)]
# HyperPod team names (and the Kubernetes namespaces made from them) are DNS labels.
HYPERPOD_TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Batch job queue / service environment names.
# Pool names: Batch names the scheduling policy <pool>-quota-share, within 128 characters.
QueueName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=128 - len("-quota-share"))]
DnsLabel = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)]
# Instance types are short (ml.p4de.24xlarge); the cap keeps derived names within AWS limits.
SageMakerInstanceType = Annotated[str, StringConstraints(pattern=r"^ml\.[a-z0-9-]+\.[a-z0-9]+$", max_length=40)]
Ec2InstanceType = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", max_length=40)]
Count = Annotated[int, Field(ge=1, le=100_000)]
# Contacts for alerts and budgets: an email address, or an existing SNS topic (AWS Chatbot's
# Slack / Teams integrations subscribe to one) that the alarms also publish to.
EMAIL_PATTERN = r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}$"
SNS_TOPIC_ARN_PATTERN = r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$"
EmailAddress = Annotated[str, StringConstraints(pattern=EMAIL_PATTERN, max_length=254)]
AlertTarget = Annotated[str, StringConstraints(pattern=f"({EMAIL_PATTERN})|({SNS_TOPIC_ARN_PATTERN})", max_length=300)]
# A cost allocation tag value (the characters AWS tags allow).
CostCentre = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9 _.:/=+@-]{1,128}$")]
UsdAmount = Annotated[Decimal, Field(gt=0, max_digits=12, decimal_places=2)]

MAX_PRIORITY_CLASSES = 10  # HyperPod cluster scheduler config limit
MAX_SHARES_PER_QUOTA_QUEUE = 20  # AWS Batch: quota shares per job queue
MAX_LIMITS_PER_QUOTA_SHARE = 5  # AWS Batch: capacity limits per quota share
MAX_HYPERPOD_QUOTA_RESOURCES = 15  # SageMaker ComputeQuotaResources per compute quota
MAX_BORROW_LIMIT = 10_000  # percent; SageMaker BorrowLimit maximum (Batch has none)
MAX_HYPERPOD_BORROW_LIMIT = 500  # percent; the range SageMaker documents for HyperPod BorrowLimit
UNLIMITED: Literal["unlimited"] = "unlimited"


class _ReportingMeta(type(BaseModel)):  # pydantic's model metaclass, without a private import
    # Converting errors here rather than in __init__ matters: a custom __init__ would make
    # pydantic call it for nested models too, and nest one report inside another.
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as error:
            raise governance_error_from(error) from None
        except _OrganisationProblems as error:
            raise GovernanceError(error.problems) from None


class _Frozen(BaseModel, metaclass=_ReportingMeta):
    """Base for model objects: immutable, unknown keys rejected, errors as GovernanceError."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# --- sharing ----------------------------------------------------------------------------------


def _preset_may_supply(field: str):
    """A preset fills ``field`` in, so files may leave it out; the model still insists on one of
    the two after the preset is applied."""

    def drop_from_required(schema: dict[str, Any]) -> None:
        schema["required"] = [name for name in schema.get("required", []) if name != field]

    return drop_from_required


class SharingPolicy(_Frozen):
    """How a team's capacity is shared. ``borrow_limit`` is a percent of the team's own quota
    (per instance type) that it may borrow on top, or ``"unlimited"``; only with lend-and-borrow."""

    model_config = ConfigDict(json_schema_extra=_preset_may_supply("strategy"))

    strategy: SharingStrategy
    borrow_limit: Annotated[int, Field(ge=0, le=MAX_BORROW_LIMIT)] | Literal["unlimited"] | None = None
    in_share_preemption: bool = False

    @model_validator(mode="after")
    def _borrow_limit_needs_lend_and_borrow(self) -> "SharingPolicy":
        if self.strategy is SharingStrategy.LEND_AND_BORROW and self.borrow_limit is None:
            raise ValueError(
                "lend_and_borrow needs a borrow_limit (percent of the team's quota, 0-10000, "
                "or 'unlimited')"
            )
        if self.strategy is not SharingStrategy.LEND_AND_BORROW and self.borrow_limit is not None:
            raise ValueError(
                f"borrow_limit is only allowed with strategy lend_and_borrow, not {self.strategy.value}"
            )
        return self

    @property
    def lends(self) -> bool:
        return self.strategy is not SharingStrategy.RESERVE

    @property
    def borrows(self) -> bool:
        return self.strategy is SharingStrategy.LEND_AND_BORROW

    def borrow_ceiling(self, quota: int) -> int | None:
        """Most instances a team with ``quota`` can hold by borrowing; None when unlimited."""
        return borrow_ceiling(self.strategy, quota, None if self.borrow_limit == UNLIMITED else self.borrow_limit)


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
    # In-share preemption lets its most urgent job start at once inside its own reservation.
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


# SageMaker names a cluster and an instance group alike.
SAGEMAKER_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
InstanceGroupName = Annotated[str, StringConstraints(pattern=SAGEMAKER_NAME_PATTERN)]
HyperPodClusterName = Annotated[str, StringConstraints(pattern=SAGEMAKER_NAME_PATTERN)]
EksClusterName = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")]
ComputeEnvironmentArn = Annotated[
    str, StringConstraints(pattern=r"^arn:aws[a-z-]*:batch:[a-z0-9-]+:[0-9]{12}:compute-environment/[A-Za-z0-9_-]{1,128}$")
]


class PodSecurityLevel(str, enum.Enum):
    """The Pod Security Standards levels a team's pods may be held to (privileged is not offered:
    a tenant pod that may escape to the node reaches every other tenant on it)."""

    BASELINE = "baseline"  # no host namespaces, host paths, privileged or extra capabilities
    RESTRICTED = "restricted"  # baseline, and non-root, no privilege escalation, drop ALL, seccomp


class KubernetesTenancy(_Frozen):
    """What a team gets beyond its compute quota on one HyperPod EKS cluster."""

    pod_security: PodSecurityLevel = Field(
        default=PodSecurityLevel.BASELINE, description="Pod Security Standards level enforced on the team's pods: baseline or restricted"
    )

    gpu_quota: Count | None = Field(
        default=None, description="Kubernetes ResourceQuota on requests.nvidia.com/gpu in the team's namespace"
    )
    dedicated_instance_groups: tuple[InstanceGroupName, ...] = Field(
        default=(), description="Instance groups whose nodes only this team's pods may use, and its pods only those"
    )


class Team(_Frozen):
    """A team: where it lives, who acts for it, how much it is guaranteed and how it shares.

    Give a ``preset`` (background, steady, critical) and override what you need in ``sharing``,
    or give ``sharing`` in full. ``quotas`` maps a pool name to ``{instance type: count}``.
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
    quotas: dict[str, dict[str, Count]] = Field(default_factory=dict)
    kubernetes: dict[str, KubernetesTenancy] = Field(
        default_factory=dict, description="HyperPod EKS pool name -> the team's extra settings on that cluster"
    )
    owner: EmailAddress | None = Field(
        default=None, description="Email address of the team's owner: the team's alarms and budget notifications go there"
    )
    cost_centre: CostCentre | None = Field(
        default=None, description="Cost centre charged for the team: the gpu-governance:cost-centre tag on its resources"
    )
    monthly_budget_usd: UsdAmount | None = Field(
        default=None, description="Monthly AWS Budgets budget (USD) of the cost tagged with the team; none unless declared"
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
    def _preset_is_honoured(self) -> "Team":
        if self.preset is not None and self.sharing.strategy is not self.preset.sharing.strategy:
            raise ValueError(
                f"preset {self.preset.value} means strategy {self.preset.sharing.strategy.value}, "
                f"not {self.sharing.strategy.value}; drop the preset or the strategy override"
            )
        return self


class _Pool(_Frozen):
    name: QueueName
    capacity: dict[str, Count] = Field(min_length=1, description="Instance type -> instances in the pool")


class BatchQuotaSharePool(_Pool):
    """An AWS Batch quota-management job queue for SageMaker training jobs."""

    backend: Literal["batch_quota_share"] = "batch_quota_share"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    runnable_timeout_minutes: Annotated[int, Field(ge=10, le=1440)] | None = Field(
        default=None,
        description="Cancel jobs RUNNABLE longer than this (10-1440 min); unset keeps waiting jobs",
    )


class BatchFairSharePool(_Pool):
    """An AWS Batch fair-share job queue over existing EC2 or EKS compute environments."""

    backend: Literal["batch_fair_share"] = "batch_fair_share"
    capacity: dict[Ec2InstanceType, Count] = Field(min_length=1)
    compute_environments: tuple[ComputeEnvironmentArn, ...] = Field(min_length=1, max_length=3)
    share_decay_seconds: Annotated[int, Field(ge=0, le=604800)] = 3600
    compute_reservation: Annotated[int, Field(ge=0, le=99)] = 0
    queue_priority: Annotated[int, Field(ge=0, le=1000)] = 10


HyperPodClusterArn = Annotated[
    str, StringConstraints(pattern=r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/[a-z0-9]{12}$")
]


class HyperPodEksPool(_Pool):
    """A SageMaker HyperPod cluster orchestrated by EKS (task governance)."""

    backend: Literal["hyperpod_eks"] = "hyperpod_eks"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    cluster_arn: HyperPodClusterArn
    eks_cluster_name: EksClusterName
    # Kubernetes objects are checked against this version's schema and applied with kubectl
    # 1.33, which supports clusters one minor version either side.
    kubernetes_version: Literal["1.32", "1.33", "1.34"] = "1.33"
    fair_share: bool = Field(default=True, description="Teams borrow idle compute by fair-share weight, not first come")
    idle_resource_sharing: bool = Field(default=True, description="Teams may lend and borrow idle compute at all")


class HyperPodSlurmPool(_Pool):
    """A SageMaker HyperPod cluster orchestrated by Slurm."""

    backend: Literal["hyperpod_slurm"] = "hyperpod_slurm"
    capacity: dict[SageMakerInstanceType, Count] = Field(min_length=1)
    cluster_name: HyperPodClusterName
    cluster_arn: HyperPodClusterArn | None = Field(
        default=None, description="Needed by capacity windows that feed its instance groups (IAM names the cluster by ARN)"
    )
    gpus_per_instance: dict[SageMakerInstanceType, Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=dict
    )


Pool = Annotated[
    Union[BatchQuotaSharePool, BatchFairSharePool, HyperPodEksPool, HyperPodSlurmPool],
    Field(discriminator="backend"),
]
AnyPool = Union[BatchQuotaSharePool, BatchFairSharePool, HyperPodEksPool, HyperPodSlurmPool]


# --- roles the library creates -------------------------------------------------------------

ROLE_PATH = "/gpu-governance/"
"""The IAM path of every team role the library creates (submission, training, pods)."""
SUBMISSION_ROLE_SUFFIX, TRAINING_ROLE_SUFFIX, POD_ROLE_SUFFIX = "-gpu-submit", "-gpu-training", "-gpu-pods"
"""Team role names are ``<team><suffix>``; the suffixes also tell a library role from a member."""
_TEAM_ROLE_SUFFIXES = (SUBMISSION_ROLE_SUFFIX, TRAINING_ROLE_SUFFIX, POD_ROLE_SUFFIX)


def library_role(arn: str, organisation: str) -> str | None:
    """What ``arn`` is if it names a role this library (or the CDK deploying it) creates, else
    None. Such roles must never become a member, an admin or an exemption: another team's role
    or a controller would then act as a team or as the platform. Role names are unique ignoring
    case, so they are compared so."""
    kind, _, path_and_name = arn.split(":", 5)[-1].partition("/")
    if kind != "role":
        return None
    path_and_name = "/" + path_and_name.lower()
    name = path_and_name.rsplit("/", 1)[-1]
    if path_and_name.startswith(ROLE_PATH):
        return f"a role under the library's path {ROLE_PATH}"
    if name.endswith(_TEAM_ROLE_SUFFIXES):
        return f"named like a team role of the library (*{'/*'.join(_TEAM_ROLE_SUFFIXES)})"
    if name.startswith(f"{organisation}-capacity-".lower()):
        return f"named like a role of the capacity stack ({organisation}-capacity-*: the controllers)"
    if name.startswith("cdk-"):
        return "named like a CDK bootstrap role (cdk-*)"
    return None


def account_of(arn: str) -> str:
    return arn.split(":")[4]


# A root, OU or account id (the AWS::Organizations::Policy TargetIds pattern).
OrganisationTargetId = Annotated[str, StringConstraints(pattern=r"^(r-[0-9a-z]{4,32}|[0-9]{12}|ou-[0-9a-z]{4,32}-[a-z0-9]{8,32})$")]
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
    target_ids: tuple[OrganisationTargetId, ...] = Field(min_length=1, description="Root, OU or account ids the policies attach to")
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
        default=(), description="Resource types ('service:type' or 'service:ALL_SUPPORTED') where a wrong team tag is refused, not only reported"
    )

    @model_validator(mode="after")
    def _no_duplicate_targets(self) -> "Guardrails":
        repeated = sorted({t for t in self.target_ids if self.target_ids.count(t) > 1})
        if repeated:
            raise ValueError(f"target_ids must be unique; repeated: {repeated}")
        return self


class GovernanceModel(_Frozen):
    """The whole organisation: accounts, priority classes, capacity pools and teams."""

    version: Literal[1] = 1
    organisation: DnsLabel = Field(description="Short name used in stack and resource names")
    capacity_account: Account
    consumer_accounts: dict[DnsLabel, Account] = Field(min_length=1)
    platform_admins: tuple[PrincipalArn, ...] = Field(
        min_length=1, description="Roles or users of the capacity account that administer the platform (key and cluster admins)"
    )
    organization_id: OrganizationId | None = Field(
        default=None, description="AWS Organizations id (o-...); when given, cross-account trust requires aws:PrincipalOrgID"
    )
    external_accounts: tuple[AccountId, ...] = Field(
        default=(),
        description="Accounts outside this organisation's declared accounts whose principals may still be team members "
        "(explicit opt-in; their trust carries no aws:PrincipalOrgID condition)",
    )
    priority_classes: tuple[PriorityClass, ...] = Field(min_length=1, max_length=MAX_PRIORITY_CLASSES)
    pools: tuple[Pool, ...] = Field(min_length=1)
    teams: tuple[Team, ...] = Field(min_length=1)
    capacity_windows: tuple[capacity_model.CapacityWindow, ...] = ()
    guardrails: Guardrails | None = Field(default=None, description="Organisation guardrails; none are deployed unless declared")
    alerts: tuple[AlertTarget, ...] = Field(
        default=(),
        description="Where platform alerts go: email addresses (subscribed to the controllers' alarm topics, and told of "
        "budgets) and existing SNS topic ARNs in the capacity account's region (alarms publish to them; e.g. AWS Chatbot)",
    )
    stack_layout: Literal["single", "per_team"] = Field(
        default="single",
        description="single: every capacity-account resource in one stack (about 20 teams fit); per_team: shared "
        "resources in the capacity stack and each team's in a stack of its own (docs/architecture.md). Changing it "
        "moves resources between stacks, so choose once",
    )

    @model_validator(mode="after")
    def _organisation_is_consistent(self) -> "GovernanceModel":
        problems = check_organisation(self)
        if problems:
            # Not a ValueError inside pydantic's machinery: raised as is, with every problem.
            raise _OrganisationProblems(problems)
        return self

    @classmethod
    def from_dict(cls, data: Any) -> "GovernanceModel":
        """Build and check a model from plain data (parsed YAML or JSON)."""
        if not isinstance(data, dict):
            raise GovernanceError(
                [Problem(path="", wrong="not a mapping", value=type(data).__name__, allowed="a mapping of governance settings")]
            )
        keys = [key for key in data if not isinstance(key, str)]
        if keys:  # keyword arguments must be text; YAML turns `on:` or `1:` into True or 1
            raise GovernanceError([Problem(path="", wrong="a setting name is not text", value=keys[0], allowed="setting names as text; quote the key")])
        return cls(**data)

    def pool(self, name: str) -> AnyPool:
        return next(p for p in self.pools if p.name == name)

    def teams_in(self, pool_name: str) -> tuple[Team, ...]:
        """Teams with a quota in the pool, in declaration order."""
        return tuple(t for t in self.teams if pool_name in t.quotas)

    def teams_of_account(self, account_name: str) -> tuple[Team, ...]:
        return tuple(t for t in self.teams if t.account == account_name)


class _OrganisationProblems(Exception):
    def __init__(self, problems: list[Problem]):
        self.problems = problems


# --- whole-organisation checks ----------------------------------------------------------------


def check_organisation(model: GovernanceModel) -> list[Problem]:
    """Every cross-reference and backend limit that a deploy would otherwise trip over."""
    problems: list[Problem] = []
    _duplicates([p.name for p in model.priority_classes], "priority_classes", problems)
    _duplicates([p.name for p in model.pools], "pools", problems)
    _duplicates([t.name.lower() for t in model.teams], "teams", problems, "team names must differ (ignoring case)")
    # Training job names and their log streams are scoped by "<team>-*" (no tags there), which
    # also covers every team whose name is "<team>-<more>".
    names = sorted({t.name.lower() for t in model.teams})
    for index, team in enumerate(model.teams):
        for other in (n for n in names if team.name.lower().startswith(f"{n}-")):
            problems.append(Problem(path=f"teams[{index}].name", wrong=f"begins with team {other}'s name and '-'", value=team.name, allowed=f"a name that does not start with '{other}-' (its training-job and log-stream prefix)"))

    pools = {p.name: p for p in model.pools}
    for index, team in enumerate(model.teams):
        path = f"teams[{index}]"
        if team.account not in model.consumer_accounts:
            problems.append(Problem(path=f"{path}.account", wrong="undeclared account" if team.account else "missing", value=team.account, allowed=f"one of {sorted(model.consumer_accounts)}"))
        if not team.quotas:
            problems.append(Problem(path=f"{path}.quotas", wrong="team has no quota in any pool", value={}, allowed=f"at least one of {sorted(pools)}"))
        if not team.members:
            problems.append(Problem(path=f"{path}.members", wrong="nobody may act for the team", value=[], allowed="at least one IAM role or user ARN"))
        for pool_name in team.quotas:
            if pool_name not in pools:
                problems.append(Problem(path=f"{path}.quotas.{pool_name}", wrong="undeclared pool", value=pool_name, allowed=f"one of {sorted(pools)}"))
        for pool_name in team.kubernetes:
            if pool_name not in team.quotas or pools.get(pool_name) is None or pools[pool_name].backend != HYPERPOD_EKS:
                eks_pools = sorted(p for p in team.quotas if p in pools and pools[p].backend == HYPERPOD_EKS)
                problems.append(Problem(path=f"{path}.kubernetes.{pool_name}", wrong="not a hyperpod_eks pool the team has a quota in", value=pool_name, allowed=f"one of {eks_pools}"))
    for pool_index, pool in enumerate(model.pools):
        members = [(f"teams[{i}]", t) for i, t in enumerate(model.teams) if pool.name in t.quotas]
        problems += check_pool_teams(pool, members, f"pools[{pool_index}]")
    if not problems:  # the Slurm names are derived from a model whose references hold
        from .slurm.mapping import slurm_problems  # imported here: the mapping builds on this module

        for pool in model.pools:
            if pool.backend == HYPERPOD_SLURM:
                # Organisation-wide findings come once however many Slurm pools repeat them.
                problems += [p for p in slurm_problems(model, pool.name) if p not in problems]
    problems += capacity_model.check_windows(model)
    problems += check_principals(model)
    problems += check_alert_topics(model)
    return problems


def check_alert_topics(model: GovernanceModel) -> list[Problem]:
    """CloudWatch alarms publish only to topics of their own region."""
    region = model.capacity_account.region
    return [
        Problem(path=f"alerts[{i}]", wrong="SNS topic in another region than the alarms", value=target, allowed=f"a topic in {region} (the capacity account's region)")
        for i, target in enumerate(model.alerts) if target.startswith("arn:") and target.split(":")[3] != region
    ]


def check_principals(model: GovernanceModel) -> list[Problem]:
    """Who may act where: admins only from the capacity account, members only from declared
    accounts, exemptions only in the platform's accounts, and never a role the library creates."""
    problems: list[Problem] = []
    capacity = model.capacity_account.account_id
    declared = {capacity, *(account.account_id for account in model.consumer_accounts.values())}
    for index, account_id in enumerate(model.external_accounts):
        if account_id in declared:
            problems.append(Problem(path=f"external_accounts[{index}]", wrong="already a declared account", value=account_id, allowed="an account that is neither the capacity account nor a consumer account"))
    checked: list[tuple[str, str, set[str], str]] = [
        (f"platform_admins[{i}]", arn, {capacity}, f"a role or user of the capacity account {capacity}: admins hold every tenant key, cluster and guardrail exemption")
        for i, arn in enumerate(model.platform_admins)
    ]
    member_accounts = declared | set(model.external_accounts)
    checked += [
        (f"teams[{t}].members[{m}]", arn, member_accounts, "an account of capacity_account or consumer_accounts, or one listed in external_accounts")
        for t, team in enumerate(model.teams) for m, arn in enumerate(team.members)
    ]
    problems += _principal_problems(model, checked)
    if model.guardrails is not None:
        problems += check_exemptions(model, model.guardrails)
    return problems


def check_exemptions(model: GovernanceModel, guardrails: Guardrails) -> list[Problem]:
    """Guardrail exemptions must be roles of the platform's accounts (capacity, management), not
    roles a tenant can create in its own account, and not roles the library creates. Also used
    for guardrails handed to the construct apart from the model."""
    capacity, management = model.capacity_account.account_id, guardrails.management_account.account_id
    allowed = f"a role of the capacity ({capacity}) or management ({management}) account"
    return _principal_problems(model, [
        (f"guardrails.exempt_principals[{i}]", arn, {capacity, management}, allowed) for i, arn in enumerate(guardrails.exempt_principals)
    ])


def _principal_problems(model: GovernanceModel, checked: list[tuple[str, str, set[str], str]]) -> list[Problem]:
    """``checked``: (path, principal ARN, the accounts it may belong to, what is allowed)."""
    problems: list[Problem] = []
    for path, arn, accounts, allowed in checked:
        if account_of(arn) not in accounts:
            problems.append(Problem(path=path, wrong=f"account {account_of(arn)} is not allowed here", value=arn, allowed=allowed))
        reason = library_role(arn, model.organisation)
        if reason:
            problems.append(Problem(path=path, wrong=reason, value=arn, allowed="a role the platform or the team owns, not one this library creates"))
    return problems


def check_pool_teams(pool: "AnyPool", teams: Sequence[tuple[str, Team]], pool_path: str) -> list[Problem]:
    """What a backend would refuse about the teams of one pool; ``teams`` pairs each team with
    its path in the caller's input. Used by the organisation check and by the constructs."""
    problems: list[Problem] = []
    for path, team in teams:
        qpath = f"{path}.quotas.{pool.name}"
        quota = team.quotas.get(pool.name)
        if quota is None:
            problems.append(Problem(path=f"{path}.quotas", wrong=f"no quota in pool {pool.name}", value=sorted(team.quotas), allowed=f"a quota keyed {pool.name!r}"))
            continue
        for instance_type in quota:
            if instance_type not in pool.capacity:
                problems.append(Problem(path=f"{qpath}.{instance_type}", wrong="pool has no capacity of this instance type", value=instance_type, allowed=f"one of {sorted(pool.capacity)}"))
        limit = _QUOTA_TYPES_PER_TEAM.get(pool.backend)
        if limit and len(quota) > limit[0]:
            problems.append(Problem(path=qpath, wrong=f"too many instance types for one {limit[1]}", value=len(quota), allowed=f"at most {limit[0]}"))
        if pool.backend in HYPERPOD_BACKENDS:
            if not HYPERPOD_TEAM_NAME.fullmatch(team.name):
                problems.append(Problem(path=f"{path}.name", wrong="not a HyperPod team name", value=team.name, allowed="a lowercase DNS label: a-z, 0-9 and '-', at most 40"))
            if team.sharing.borrow_limit == UNLIMITED:
                problems.append(Problem(path=f"{path}.sharing.borrow_limit", wrong="HyperPod has no unlimited borrowing", value=UNLIMITED, allowed=f"a percent 1-{MAX_HYPERPOD_BORROW_LIMIT}"))
            elif pool.backend == HYPERPOD_EKS and team.sharing.borrow_limit is not None and not 1 <= team.sharing.borrow_limit <= MAX_HYPERPOD_BORROW_LIMIT:
                problems.append(Problem(path=f"{path}.sharing.borrow_limit", wrong="outside HyperPod's documented borrow limit range", value=team.sharing.borrow_limit, allowed=f"a percent 1-{MAX_HYPERPOD_BORROW_LIMIT}"))
    if pool.backend == HYPERPOD_EKS:
        owners: dict[str, str] = {}
        for path, team in teams:
            for index, group in enumerate(team.kubernetes.get(pool.name, KubernetesTenancy()).dedicated_instance_groups):
                if owners.setdefault(group, team.name) != team.name:
                    problems.append(Problem(path=f"{path}.kubernetes.{pool.name}.dedicated_instance_groups[{index}]", wrong=f"already dedicated to team {owners[group]}", value=group, allowed="an instance group no other team has"))
    if pool.backend == BATCH_QUOTA_SHARE and len(teams) > MAX_SHARES_PER_QUOTA_QUEUE:
        problems.append(Problem(path=pool_path, wrong="too many teams (quota shares) on one Batch job queue", value=len(teams), allowed=f"at most {MAX_SHARES_PER_QUOTA_QUEUE}"))
    for instance_type, capacity in pool.capacity.items():
        guaranteed = sum(t.quotas.get(pool.name, {}).get(instance_type, 0) for _, t in teams)
        if guaranteed > capacity:
            problems.append(Problem(
                path=f"{pool_path}.capacity.{instance_type}",
                wrong=f"teams are guaranteed {guaranteed} instances but the pool has fewer",
                value=capacity,
                allowed=f"at least {guaranteed}, or smaller team quotas",
            ))
    return problems


_QUOTA_TYPES_PER_TEAM = {
    BATCH_QUOTA_SHARE: (MAX_LIMITS_PER_QUOTA_SHARE, "Batch quota share"),
    HYPERPOD_EKS: (MAX_HYPERPOD_QUOTA_RESOURCES, "HyperPod compute quota"),
}


def _duplicates(names: list[str], path: str, problems: list[Problem], allowed: str = "names must be unique") -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            problems.append(Problem(path=f"{path}[{index}].name", wrong="duplicate name", value=name, allowed=allowed))
        seen.add(name)


# --- pydantic errors as problems --------------------------------------------------------------

_ALLOWED_BY_TYPE = {
    "missing": "required",
    "extra_forbidden": "not a known setting; see `gpu-governance schema`",
    "literal_error": "allowed: {expected}",
    "enum": "allowed: {expected}",
    "string_pattern_mismatch": "must match {pattern}",
    "string_too_long": "at most {max_length} characters",
    "greater_than_equal": "at least {ge}",
    "less_than_equal": "at most {le}",
    "too_short": "at least {min_length} item(s)",
    "too_long": "at most {max_length} item(s)",
    "union_tag_invalid": "one of {expected_tags}",
    "union_tag_not_found": "one of batch_quota_share, batch_fair_share, hyperpod_eks, hyperpod_slurm",
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping",
    "tuple_type": "a list",
    "list_type": "a list",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_REQUIRED_SHARING = "required: a preset (background, steady, critical) or a sharing strategy"


def governance_error_from(error: ValidationError) -> GovernanceError:
    """Turn pydantic's report into our `path: what is wrong (value) - what is allowed` lines."""
    problems = []
    items = error.errors(include_url=False)
    failing_paths = {_path(item["loc"]) for item in items}
    for item in items:
        location = _path(item["loc"])
        kind = item["type"]
        if kind == "too_short" and any(p.startswith(location + "[") for p in failing_paths):
            continue  # a list whose items failed is not also too short
        if kind.startswith("union_tag"):
            location += ".backend"
        if kind == "missing" and location.endswith(".sharing"):
            if location.removesuffix(".sharing") + ".preset" in failing_paths:
                continue  # the bad preset is the problem, already reported
            item = {**item, "ctx": None}
            template = _REQUIRED_SHARING
        else:
            template = _ALLOWED_BY_TYPE.get(kind)
        context = item.get("ctx") or {}
        if kind == "value_error":
            wrong, allowed = "invalid", str(context.get("error", item["msg"]))
        elif template is None:
            wrong, allowed = "invalid", item["msg"]
        else:
            wrong = "missing" if kind == "missing" else "invalid"
            try:
                allowed = template.format(**context)
            except (KeyError, IndexError):
                allowed = item["msg"]
        value = item.get("input") if kind != "missing" else None
        problems.append(Problem(path=location, wrong=wrong, value=value, allowed=allowed))
    return GovernanceError(_dedupe(problems))


_UNION_TAGS = {*BACKENDS,  # pool backends
               "batch_compute_environment", "eks_node_group", "hyperpod_instance_group", "sagemaker_training_jobs"}  # feed kinds
_PYDANTIC_BRANCH = re.compile(r"^(constrained-\w+|literal\[.*\]|function-\w+\[.*\]|int|str|bool|none)$")


def _path(location: tuple[Any, ...]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif str(part) in _UNION_TAGS or _PYDANTIC_BRANCH.match(str(part)):
            continue  # pydantic's internal union branch names say nothing to a user
        else:
            text += f".{part}" if text else str(part)
    return text


def _dedupe(problems: list[Problem]) -> list[Problem]:
    # A value that fails every branch of `int | "unlimited" | None` yields one error per branch;
    # keep one line per path and say what all branches allow.
    by_path: dict[str, list[Problem]] = {}
    for problem in problems:
        by_path.setdefault(problem.path, []).append(problem)
    merged = []
    for path, items in by_path.items():
        if len(items) == 1:
            merged.append(items[0])
        else:
            allowed = "; or ".join(dict.fromkeys(p.allowed for p in items))
            merged.append(Problem(path=path, wrong=items[0].wrong, value=items[0].value, allowed=allowed))
    return merged


# Capacity windows build on _Frozen, so their module imports this one. Imported last, and named
# through the module in the (lazy) annotation above, so either module may be imported first.
from . import capacity_model  # noqa: E402
