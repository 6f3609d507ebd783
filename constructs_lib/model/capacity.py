"""Capacity windows in the governance model: when extra GPU capacity is bought, what it feeds,
and the price, budget and mode that bound the buying.

Windows build on the model's base (``base.py``); the organisation (``organisation.py``) types
``GovernanceModel.capacity_windows`` with them and runs ``check_windows``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AwareDatetime, Field, StringConstraints, model_validator

from constructs_lib.backends import backend_of, backends_where
from constructs_lib.capacity_kinds import kind_of
from constructs_lib.core.errors import Problem
from constructs_lib.core.vocabulary import TENANT_METRIC_NAMESPACES
from gpu_governance_runtime.contract import (
    CONSUMER_EKS_NODE_GROUP,
    CONSUMER_HYPERPOD_INSTANCE_GROUP,
)

from .base import (
    ComputeEnvironmentArn,
    CostCentre,
    DnsLabel,
    Ec2InstanceType,
    EksClusterName,
    InstanceGroupName,
    JobQueueArn,
    OrganisationView,
    SageMakerInstanceType,
    TeamName,
    _Frozen,
)

MAX_BLOCK_HOURS = 182 * 24  # longest Capacity Block or training plan
# Below half, more of a block is idle by construction than used, and every hour the window uses costs more than twice
# the block's price per instance-hour (docs/capacity.md, *Buying for yield*, says why half).
DEFAULT_MIN_YIELD = Decimal("0.5")
MAX_BUY_AHEAD_DAYS = 56  # offerings start at most 8 weeks ahead
DEFAULT_BUY_AHEAD_DAYS = 14
AvailabilityZone = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9][a-z]$")]
LaunchTemplateName = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9().\-/_]{3,128}$")]


class _Feed(_Frozen):
    """What a capacity window feeds: one class per kind of consumer (``kind``)."""

    queue_reorders: ClassVar[tuple[str, ...]] = ()
    """What the capacity controller calls to reorder a queue while the window's capacity is active
    (none: it reorders no queue for this kind; the backends' ``quota_raises`` are the quotas it raises)."""


class BatchComputeEnvironmentFeed(_Feed):
    """An AWS Batch job queue whose on-demand EC2 ``compute_environment`` is left as it is: while a
    block is active the controller puts ``block_compute_environment`` (launching from
    ``launch_template_name``, into the block) ahead of it in ``job_queue``, so new jobs go to the
    block and running ones keep running (docs/capacity.md, *Rotation and drain*)."""

    kind: Literal["batch_compute_environment"]
    # The block compute environment goes ahead of the on-demand one in the queue's
    # computeEnvironmentOrder (capacity/rotation.py; https://docs.aws.amazon.com/batch/latest/APIReference/API_UpdateJobQueue.html).
    queue_reorders: ClassVar[tuple[str, ...]] = ("batch:UpdateJobQueue",)
    launch_template_name: LaunchTemplateName
    compute_environment: ComputeEnvironmentArn
    block_compute_environment: ComputeEnvironmentArn
    job_queue: JobQueueArn

    @model_validator(mode="after")
    def _two_environments(self) -> BatchComputeEnvironmentFeed:
        if self.block_compute_environment == self.compute_environment:
            raise ValueError(
                f"block_compute_environment {self.block_compute_environment!r} is the on-demand compute_environment: "
                "the block needs a compute environment of its own, so running jobs are never moved"
            )
        if self.block_compute_environment.split(":")[3:5] != self.job_queue.split(":")[3:5]:
            raise ValueError(
                f"block_compute_environment {self.block_compute_environment!r} and job_queue {self.job_queue!r} "
                "must be in the same region and account"
            )
        return self


class EksNodeGroupFeed(_Feed):
    """An EKS managed node group launching from ``launch_template_name``."""

    kind: Literal["eks_node_group"]
    launch_template_name: LaunchTemplateName
    cluster_name: EksClusterName
    nodegroup_name: Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]{0,62}$")]


class KarpenterNodePoolFeed(_Feed):
    """A Karpenter NodePool and EC2NodeClass the library makes on the cluster of ``pool`` (of a
    backend whose ``window_feeds`` take it): the EC2NodeClass selects every block bought for the pool
    by the purchase's tags, so a block bought later is found without a deploy, and the controller
    moves nothing (docs/eks-kueue.md, "Capacity windows")."""

    kind: Literal["karpenter_node_pool"]
    pool: str
    node_role: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_+=,.@-]{1,64}$")] = Field(
        description="The IAM role (name) the block's nodes assume, which has an EKS access entry of type EC2_LINUX "
        "(the EC2NodeClass's role)"
    )
    ami_alias: Annotated[str, StringConstraints(pattern=r"^(al2023|bottlerocket)@(v[0-9][0-9.]*|latest)$")] = Field(
        description="The EKS optimized AMI, family@version (al2023@v20250505); Karpenter picks the accelerated "
        "variant for a GPU instance type"
    )
    discovery_tags: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=128)],
        Annotated[str, StringConstraints(min_length=1, max_length=256)],
    ] = Field(
        default_factory=dict,
        max_length=20,
        description="Tags of the subnets and security groups the nodes use (default karpenter.sh/discovery: "
        "<the pool's cluster name>, as Karpenter's getting-started guide tags them)",
    )


class HyperPodInstanceGroupFeed(_Feed):
    """A HyperPod instance group of a declared pool (which names its ``cluster_arn``), through a
    training plan the controller points the group at while it is active. On a ``hyperpod_slurm``
    pool the group is the window's own and joins its team's partition only; the controller drains
    its nodes before each plan ends (``model/slurm.py``, docs/capacity.md)."""

    kind: Literal["hyperpod_instance_group"]
    pool: str
    instance_group: InstanceGroupName


class TrainingJobsFeed(_Feed):
    """SageMaker training jobs (optionally of a declared Batch quota-share pool), through a training plan."""

    kind: Literal["sagemaker_training_jobs"]
    pool: str | None = None


Feed = Annotated[
    BatchComputeEnvironmentFeed
    | EksNodeGroupFeed
    | KarpenterNodePoolFeed
    | HyperPodInstanceGroupFeed
    | TrainingJobsFeed,
    Field(discriminator="kind"),
]


# A CloudWatch alarm name: 1-255 characters, no control characters (PutMetricAlarm).
AlarmName = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]{1,255}$")]
MAX_ALARMS_PER_WINDOW = 5  # one EventBridge rule per window matches them by name
# <namespace>/<metric name>: the metric name is after the last "/". A namespace is what PutMetricData
# takes: 1-255 ASCII characters but control characters, the first not ":" [aws: cw.put-metric-data-namespace];
# it may hold "/" and start with one (AWS/SQS, /aws/sagemaker/TrainingJobs).
AlarmMetric = Annotated[
    str, StringConstraints(pattern=r"^[\x20-\x39\x3b-\x7e][\x20-\x7e]{0,254}/[^\x00-\x1f\x7f/]{1,255}$")
]
# Metrics any tenant moves by submitting work: an alarm on one, in an auto window, lets a team buy capacity
# (within the window's cap and budget) by queueing jobs. Names matched ignoring case; namespaces as CloudWatch spells them.
TENANT_DRIVEN_METRICS = {
    "GpuGovernance/Reclaim": (
        "Pending",
        "StarvedBelowGuarantee",
        "InUse",
        "Borrowed",
        "UsedInstanceHours",
        "BorrowedInstanceHours",
    ),
    "AWS/SQS": (
        "ApproximateNumberOfMessagesVisible",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateAgeOfOldestMessage",
        "NumberOfMessagesSent",
        "ApproximateNumberOfMessagesDelayed",
    ),
}
TENANT_DRIVEN_WORDS = ("pending", "queuedepth", "queue_depth", "queue-depth", "backlog", "waiting", "runnable")


class AlarmRequest(_Frozen):
    """Capacity requested for the window when this CloudWatch alarm (in the capacity account and
    region) goes to ALARM: ``count`` instances of the window's type for ``hours``, starting then,
    within the window's price cap, budget and mode; once per alarm transition."""

    alarm_name: AlarmName
    count: Annotated[int, Field(ge=1, le=64)]
    hours: Annotated[int, Field(ge=1, le=MAX_BLOCK_HOURS)]
    metric: AlarmMetric | None = Field(
        default=None,
        description="What the alarm watches, <namespace>/<metric name> (e.g. AWS/ApplicationELB/TargetResponseTime): "
        "`validate` warns when an auto window's alarm watches a metric tenants drive, or does not say",
    )


class CapacityBudget(_Frozen):
    amount: Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=2)]
    period: Literal["week", "month"] = "month"


class CapacityWindow(_Frozen):
    """Capacity bought for a few hours or days: once (``start``) or every ``repeat_every_days``.

    ``mode`` is ``dry_run`` (report only, the default), ``approval`` (buy once someone runs
    ``gpu-governance capacity approve``) or ``auto``. Prices are in the offering's currency
    (USD) per instance-hour of the block bought, not of the window."""

    name: DnsLabel
    team: TeamName = Field(
        description="The declared team the capacity serves: named on the purchase's tags and in every report"
    )
    cost_centre: CostCentre | None = Field(default=None, description="Tagged on the purchase for cost allocation")
    instance_type: Ec2InstanceType | SageMakerInstanceType
    instance_count: Annotated[int, Field(ge=1, le=64)]
    start: AwareDatetime
    duration_hours: Annotated[int, Field(ge=1, le=MAX_BLOCK_HOURS)]
    repeat_every_days: Annotated[int, Field(ge=1, le=182)] | None = None
    feeds: Feed
    max_price_per_instance_hour: Annotated[Decimal, Field(gt=0, max_digits=10, decimal_places=4)]
    budget: CapacityBudget
    buy_ahead_days: Annotated[int, Field(ge=1, le=MAX_BUY_AHEAD_DAYS)] = DEFAULT_BUY_AHEAD_DAYS
    availability_zones: tuple[AvailabilityZone, ...] = ()
    prefer_extension: bool = True
    mode: Literal["dry_run", "approval", "auto"] = "dry_run"
    min_yield: Annotated[Decimal, Field(ge=0, le=1, max_digits=3, decimal_places=2)] = Field(
        default=DEFAULT_MIN_YIELD,
        description="The least share (0-1) of a purchase's instance-hours the window's own hours are expected to use: "
        "an auto window does not buy a cover below it (recorded and notified), an approval window's request says so "
        "(docs/capacity.md, *Buying for yield*); 0 buys whatever covers",
    )
    fallback: Literal["on_demand", "none"] = Field(
        default="on_demand", description="Where new work goes when a block drains: on-demand, or nowhere"
    )
    alarm_requests: Annotated[tuple[AlarmRequest, ...], Field(max_length=MAX_ALARMS_PER_WINDOW)] = ()

    @model_validator(mode="after")
    def _consistent(self) -> CapacityWindow:
        if problem := kind_of(self).window_problem(self):
            raise ValueError(problem)
        if (
            self.feeds.kind == CONSUMER_EKS_NODE_GROUP
            and "fallback" in self.model_fields_set
            and self.fallback == "on_demand"
        ):
            # [aws: eks.capacity-block-template-required]: the group's template must keep the capacity-block options.
            raise ValueError(
                "fallback: an EKS CAPACITY_BLOCK node group cannot be moved to an on-demand launch template (on_demand) - "
                "none: the group waits at size 0 for the next block; declare an on-demand node group of its own for work between blocks"
            )
        if self.repeat_every_days is not None and self.repeat_every_days * 24 < self.duration_hours:
            raise ValueError(
                f"repeat_every_days {self.repeat_every_days} is shorter than duration_hours {self.duration_hours}: occurrences would overlap"
            )
        return self

    @property
    def market(self) -> str:
        """The kind of capacity the window buys (``capacity_kinds``), as the policy document names it."""
        return kind_of(self).name

    def ended(self, now: datetime) -> bool:
        """Whether the window is entirely in the past: one occurrence only, over by ``now``."""
        return self.repeat_every_days is None and self.start + timedelta(hours=self.duration_hours) <= now

    def summary(self, now: datetime) -> str:
        """One line for `explain` and `audit`: what, when, for whom, how it is bought."""
        start = self.start.strftime("%Y-%m-%d %H:%M %Z").strip()
        when = (
            f"every {self.repeat_every_days} days from {start}"
            if self.repeat_every_days is not None
            else f"from {start}"
        )
        feeds = f" into pool {self.feeds.pool}" if getattr(self.feeds, "pool", None) else f" ({self.feeds.kind})"
        line = (
            f"{self.instance_count} x {self.instance_type} for {self.duration_hours} h {when}, for team {self.team}"
            f"{feeds}; {kind_of(self).label}, mode {self.mode}, at most {self.max_price_per_instance_hour} "
            f"per instance-hour, budget {self.budget.amount} per {self.budget.period}"
        )
        return line + ("; ENDED: entirely in the past, buys nothing" if self.ended(now) else "")

    def to_policy(self, model: OrganisationView) -> dict[str, Any]:
        """The window as the controller reads it (``gpu_governance_runtime.policy.read_policy``), its
        consumer completed from ``model`` with what the controller acts on (a pool's cluster ARN)."""
        consumer = self.feeds.model_dump()
        if self.feeds.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP:
            consumer["cluster_arn"] = next(p.cluster_arn for p in model.pools if p.name == self.feeds.pool)
        return {
            "name": self.name,
            "team": self.team,
            "cost_centre": self.cost_centre,
            "market": self.market,
            "instance_type": self.instance_type,
            "instance_count": self.instance_count,
            "start": self.start.isoformat(),
            "duration_hours": self.duration_hours,
            "repeat_every_days": self.repeat_every_days,
            "availability_zones": list(self.availability_zones),
            "max_price_per_instance_hour": str(self.max_price_per_instance_hour),
            "budget": str(self.budget.amount),
            "budget_period": self.budget.period,
            "buy_ahead_days": self.buy_ahead_days,
            "prefer_extension": self.prefer_extension,
            "mode": self.mode,
            "min_yield": str(self.min_yield),
            "consumer": consumer,
            # A node group never leaves its blocks' template (rotation.wanted_target): say so in the policy too.
            "fallback": "none" if self.feeds.kind == CONSUMER_EKS_NODE_GROUP else self.fallback,
            "alarm_requests": [
                a.model_dump(exclude={"metric"}) for a in self.alarm_requests
            ],  # what the alarm watches: for validate only
        }


def capacity_controller_id(organisation: str) -> str:
    """The capacity controller's id: the managed-by tag on every purchase it makes."""
    return f"{organisation}-capacity"


def tenant_driven(metric: str) -> str | None:
    """How tenants move ``metric`` (<namespace>/<name>), or None: they publish into its namespace
    (``TENANT_METRIC_NAMESPACES``, what the team roles may PutMetricData into), or they move it by
    what they submit (queue depth, pending work)."""
    namespace, _, name = metric.rpartition("/")
    if namespace in TENANT_METRIC_NAMESPACES:
        return f"every team may publish into {namespace} (its training jobs' execution role may PutMetricData there)"
    if name in TENANT_DRIVEN_METRICS.get(namespace, ()) or any(word in name.lower() for word in TENANT_DRIVEN_WORDS):
        return "tenants drive it (pending jobs, queue depth)"
    return None


def window_warnings(model: OrganisationView, now: datetime) -> list[str]:
    """What `validate` warns of, deployable but worth a second look: a window entirely in the
    past (it buys nothing; a one-off window that has happened may stay in the file); an ``auto``
    window buying when an alarm on a metric tenants drive (pending jobs, queue depth) or publish
    goes off, so a team buys capacity without anyone approving it; or an alarm that does not say
    what it watches."""
    warnings = []
    for index, window in enumerate(model.capacity_windows):
        if window.ended(now):
            end = window.start + timedelta(hours=window.duration_hours)
            warnings.append(
                f"capacity_windows[{index}].start: window {window.name} ended at {end.isoformat()}, before now "
                f"({now.isoformat(timespec='seconds')}) - it buys nothing; move start to the future, set "
                "repeat_every_days, or remove it"
            )
        if window.mode != "auto":
            continue
        for alarm_index, request in enumerate(window.alarm_requests):
            path = f"capacity_windows[{index}].alarm_requests[{alarm_index}]"
            if request.metric is None:
                warnings.append(
                    f"{path}.metric: not given - window {window.name} buys automatically when alarm {request.alarm_name!r} "
                    "goes off; name the metric it watches so validate can tell whether tenants drive it"
                )
            elif reason := tenant_driven(request.metric):
                warnings.append(
                    f"{path}.metric: {request.metric} - {reason}: a team can make "
                    f"window {window.name} buy up to {request.count} x {window.instance_type} for {request.hours} h without approval; "
                    "use mode approval, or an alarm on a metric only the platform moves"
                )
    return warnings


def check_windows(model: OrganisationView) -> list[Problem]:
    """Cross-checks between windows and the organisation (called by ``check_organisation``), window by window."""
    problems: list[Problem] = []
    seen: set[str] = set()
    alarms: dict[str, str] = {}
    for index, window in enumerate(model.capacity_windows):
        path = f"capacity_windows[{index}]"
        if window.name in seen:
            problems.append(
                Problem(
                    path=f"{path}.name",
                    wrong="duplicate name",
                    value=window.name,
                    allowed="window names must be unique",
                )
            )
        seen.add(window.name)
        for alarm_index, request in enumerate(window.alarm_requests):
            if request.alarm_name in alarms:
                problems.append(
                    Problem(
                        path=f"{path}.alarm_requests[{alarm_index}].alarm_name",
                        wrong=f"already requests for window {alarms[request.alarm_name]}",
                        value=request.alarm_name,
                        allowed="an alarm requests capacity for one window only",
                    )
                )
            alarms.setdefault(request.alarm_name, window.name)
        problems += _owner_and_zone_problems(model, window, path)
        problems += _fed_pool_problems(model, window, path)
    return problems


def _owner_and_zone_problems(model: OrganisationView, window: CapacityWindow, path: str) -> list[Problem]:
    """The window's team is declared and its zones are in the capacity account's region."""
    teams = sorted(t.name for t in model.teams)
    region = model.capacity_account.region
    problems = []
    if window.team not in teams:
        problems.append(
            Problem(path=f"{path}.team", wrong="undeclared team", value=window.team, allowed=f"one of {teams}")
        )
    for zone_index, zone in enumerate(window.availability_zones):
        if not zone.startswith(region):
            problems.append(
                Problem(
                    path=f"{path}.availability_zones[{zone_index}]",
                    wrong="zone outside the capacity account's region",
                    value=zone,
                    allowed=f"a zone of {region}",
                )
            )
    return problems


def _fed_pool_problems(model: OrganisationView, window: CapacityWindow, path: str) -> list[Problem]:
    """The pool a window feeds: declared, of a backend that takes what it feeds, with a cluster ARN
    where its instance group is re-pointed, and capacity of the window's instance type."""
    pool_name = getattr(window.feeds, "pool", None)
    if pool_name is None:
        return []
    wanted = backends_where(lambda b: window.feeds.kind in b.window_feeds)
    pool = {p.name: p for p in model.pools}.get(pool_name)
    if pool is None or pool.backend not in wanted:
        choices = sorted(p.name for p in model.pools if p.backend in wanted)
        return [
            Problem(
                path=f"{path}.feeds.pool",
                wrong="undeclared pool" if pool is None else f"a {pool.backend} pool cannot take a {window.feeds.kind}",
                value=pool_name,
                allowed=f"one of {choices}" if choices else f"declare a {' or '.join(wanted)} pool first",
            )
        ]
    if window.feeds.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP and pool.cluster_arn is None:
        return [
            Problem(
                path=f"{path}.feeds.pool",
                wrong="the pool declares no cluster_arn, which re-pointing its instance group needs",
                value=pool_name,
                allowed=f"set cluster_arn (arn:aws:sagemaker:{model.capacity_account.region}:<account>:cluster/<id>) "
                f"on pool {pool_name}",
            )
        ]
    if window.instance_type not in pool.capacity:
        return [
            Problem(
                path=f"{path}.instance_type",
                wrong="the pool has no capacity of this instance type",
                value=window.instance_type,
                allowed=f"one of {sorted(pool.capacity)}",
            )
        ]
    return []


def raising_windows(model: OrganisationView) -> list[CapacityWindow]:
    """The windows whose capacity raises the owner's quota while active (capacity/shares.py): those
    feeding a pool whose backend raises a quota for what they feed (``Backend.quota_raises``:
    training jobs of a Batch quota-share pool, instance groups of a HyperPod EKS pool), when the
    team has a share in the pool. The one answer: the capacity controller's IAM, the reclaim
    controller's parameter and the guardrails' exemptions all ask it."""
    pools = {p.name: p for p in model.pools}
    return [
        w
        for w in model.capacity_windows
        if (pool := pools.get(getattr(w.feeds, "pool", None) or "")) is not None
        and w.feeds.kind in backend_of(pool).quota_raises
        and w.team in {t.name for t in model.teams_in(pool.name)}
    ]
