"""The contract between the constructs (``constructs_lib``) and the Lambda controllers.

Both sides import these names; nothing here is kept in step by a comment. It holds the compiled
policy document's version, the backend names, the sharing strategies and the borrow ceiling,
the environment variables the constructs set and the functions read, the tag keys, and the
metric namespaces and names the handlers publish and the constructs' alarms and dashboards
read. The one validating reader of the policy document is ``gpu_governance_runtime.policy``
(it builds the planners' own types, which import this module, so it cannot live here).

Plain Python with no imports from the rest of the runtime: the constructs import it at synth
time without pulling in a controller.
"""

from __future__ import annotations

import enum

# --- the compiled policy document -------------------------------------------------------------

POLICY_VERSION = 1
POLICY_FILE_NAME = "policy.json"  # bundled at the top of the runtime package in the asset

BATCH_QUOTA_SHARE = "batch_quota_share"
BATCH_FAIR_SHARE = "batch_fair_share"
HYPERPOD_EKS = "hyperpod_eks"
HYPERPOD_SLURM = "hyperpod_slurm"
EKS_KUEUE = "eks_kueue"
BACKENDS = (BATCH_QUOTA_SHARE, BATCH_FAIR_SHARE, HYPERPOD_EKS, HYPERPOD_SLURM, EKS_KUEUE)
HYPERPOD_BACKENDS = (HYPERPOD_EKS, HYPERPOD_SLURM)
# The kinds of capacity-window consumer (``feeds.kind`` in the governance file, ``consumer.kind``
# in the policy document) and what each must name: what the capacity controller acts on.
CONSUMER_BATCH_COMPUTE_ENVIRONMENT = "batch_compute_environment"
CONSUMER_EKS_NODE_GROUP = "eks_node_group"
CONSUMER_HYPERPOD_INSTANCE_GROUP = "hyperpod_instance_group"
CONSUMER_SAGEMAKER_TRAINING_JOBS = "sagemaker_training_jobs"
# A Karpenter NodePool the library makes for an EKS pool: Karpenter finds each block by the pool tag
# on the purchase (TAG_POOL), so the controller moves nothing.
CONSUMER_KARPENTER_NODE_POOL = "karpenter_node_pool"
CONSUMER_FIELDS = {
    CONSUMER_BATCH_COMPUTE_ENVIRONMENT: (
        "launch_template_name",
        "compute_environment",
        "block_compute_environment",
        "job_queue",
    ),
    CONSUMER_EKS_NODE_GROUP: ("launch_template_name", "cluster_name", "nodegroup_name"),
    CONSUMER_HYPERPOD_INSTANCE_GROUP: ("pool", "instance_group", "cluster_arn"),
    CONSUMER_SAGEMAKER_TRAINING_JOBS: (),
    CONSUMER_KARPENTER_NODE_POOL: ("pool",),
}


class SharingStrategy(str, enum.Enum):
    """What a team does with idle capacity (the AWS Batch quota share strategies)."""

    RESERVE = "reserve"  # keeps its idle capacity, never borrows
    LEND = "lend"  # lends idle capacity, reclaims it when needed, never borrows
    LEND_AND_BORROW = "lend_and_borrow"  # lends and borrows up to ``borrow_limit``


def borrow_ceiling(strategy: SharingStrategy, quota: int, borrow_limit: int | None) -> int | None:
    """Most instances a share with ``quota`` may hold at once; None when unlimited.

    ``borrow_limit`` is a percent of the quota borrowed on top (None: unlimited); only
    ``lend_and_borrow`` shares borrow at all."""
    if strategy is not SharingStrategy.LEND_AND_BORROW:
        return quota
    if borrow_limit is None:
        return None
    return quota + quota * borrow_limit // 100


def lendable(strategy: SharingStrategy, quota: int, lending_limit: int | None) -> int:
    """Most of its ``quota`` a share lends while idle (Kueue's ``lendingLimit``): none for
    ``reserve``, all of it without a ``lending_limit``, else that percent of it, rounded down.
    The rest of an idle quota is held for the share, as a reserve share's is."""
    if strategy is SharingStrategy.RESERVE:
        return 0
    if lending_limit is None:
        return quota
    return quota * lending_limit // 100


# --- environment variables the constructs set and the functions read --------------------------

ENV_POLICY_PATH = "POLICY_PATH"  # optional: the bundled POLICY_FILE_NAME when unset
ENV_CONTROLLER_ID = "CONTROLLER_ID"
ENV_LEDGER_TABLE = "LEDGER_TABLE"
ENV_TOPIC_ARN = "TOPIC_ARN"
ENV_BUDGET = "GPU_GOVERNANCE_BUDGET"  # capacity: the largest window budget, stated a second time
ENV_PRICE_CAP = "GPU_GOVERNANCE_PRICE_CAP"  # capacity: the largest price cap, stated a second time
ENV_RECLAIM_TARGETS = "RECLAIM_TARGETS"
ENV_SLURM_HEAD_NODES = "SLURM_HEAD_NODES"  # capacity: JSON {hyperpod_slurm pool: head node SSM target id}
ENV_DRY_RUN = "DRY_RUN"
ENV_METRICS_NAMESPACE = "METRICS_NAMESPACE"
ENV_MIN_RUN_TIME_S = "MIN_RUN_TIME_S"
ENV_MAX_PREEMPTIONS_PER_TICK = "MAX_PREEMPTIONS_PER_TICK"
ENV_TICK_SECONDS = "TICK_SECONDS"  # reclaim and capacity: the schedule's interval, which one tick's usage covers
ENV_IN_VPC = "IN_VPC"  # reclaim: "true" when the function runs in a VPC (it may then reach private EKS endpoints)
ENV_TEAM_SPEND = "TEAM_SPEND"  # capacity: "daily" when a team declares monthly_budget_usd: its spend is read once a day (capacity/spend.py)
ENV_USAGE_TARGETS = "USAGE_TARGETS"  # reclaim: the hyperpod_slurm pools whose usage is read from Slurm accounting
# Set on both controllers when a capacity window raises a guarantee: the raised_guarantees_parameter
# the capacity controller writes and the reclaim controller reads.
ENV_RAISED_GUARANTEES = "RAISED_GUARANTEES_PARAMETER"
# capacity: the controller's own KMS key, the only key the raised guarantees are written under (SecureString).
ENV_RAISED_GUARANTEES_KEY = "RAISED_GUARANTEES_KEY"

# guard (guard/handler.py): what grows with the teams is in GUARD_FILE_NAME, bundled beside the policy document (Lambda
# allows 4 KB of environment variables in all), {"pools": {pool: {"teams": {team: {"repository_name", "cost_centre",
# "owner"}}}}, "shared_repositories": [image repository URIs]}; the environment holds what the deployment resolves:
# GUARD_QUEUES, a JSON list of {"job_queue": ARN, "pool"}, and GUARD_NAMES, {"execution_role_arn", "team_topic": ARNs
# with "{team}" in place of the team's name, "registry": the account's ECR registry host}.
ENV_GUARD_QUEUES = "GUARD_QUEUES"
ENV_GUARD_NAMES = "GUARD_NAMES"
ENV_DEAD_LETTERS_URL = "DEAD_LETTERS_URL"  # guard: its dead-letter queue, whose events a scheduled run checks again
GUARD_FILE_NAME = "guard.json"
TEAM_PLACEHOLDER = "{team}"
# The events the guard takes (https://docs.aws.amazon.com/batch/latest/userguide/service-job-events.html: none for the
# initial submission; neither tags nor the payload in the detail). States before the training job runs, and RUNNING as
# the last chance; a job already stopped or finished is left alone
# (https://docs.aws.amazon.com/batch/latest/userguide/service-job-status.html).
SERVICE_JOB_EVENT = ("aws.batch", "Batch Service Job State Change")
GUARDED_STATES = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")

# --- HyperPod EKS: what task governance names in Kueue, and what the usage observer reads ------

HYPERPOD_NAMESPACE_PREFIX = "hyperpod-ns-"  # task governance makes namespace hyperpod-ns-<team> per team
HYPERPOD_CLUSTER_QUEUE_SUFFIX = "-clusterqueue"  # ... and Kueue ClusterQueue hyperpod-ns-<team>-clusterqueue


def hyperpod_cluster_queue(team: str) -> str:
    return f"{HYPERPOD_NAMESPACE_PREFIX}{team}{HYPERPOD_CLUSTER_QUEUE_SUFFIX}"


KUEUE_CLUSTER_QUEUES_PATH = "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"  # listed by the reclaim function
GPU_RESOURCE = "nvidia.com/gpu"  # the Kubernetes resource Kueue counts GPUs in
# The Kubernetes group an EKS access entry maps the reclaim function's role into; a ClusterRole
# bound to it may get and list ClusterQueues, and patch those a backend holds at a team's GPU-hour
# limit, by name (constructs_lib/tenancy/kubernetes.py usage_reader_objects).
EKS_USAGE_READER_GROUP = "gpu-governance-usage-readers"
# reclaim: a pool's default re-borrow backoff (governance file ``reclaim.reborrow_backoff_seconds``,
# policy document ``reclaim.reborrow_backoff_s``, planner ``Settings``); docs/performance.md measures it
DEFAULT_REBORROW_BACKOFF_S = 3_600

# --- tag keys ---------------------------------------------------------------------------------

TAG_TEAM = "gpu-governance:team"  # a team's queues, job definitions and jobs
TAG_INTENT = "gpu-governance:intent"  # a purchase's intent id (exactly-once buying)
TAG_WINDOW = "gpu-governance:window"  # the capacity window a purchase serves
TAG_MANAGED_BY = "gpu-governance:managed-by"  # the controller id that bought it
TAG_COST_CENTRE = (
    "gpu-governance:cost-centre"  # a team's declared cost centre, and the one a window's purchases are charged to
)
TAG_POOL = "gpu-governance:pool"  # on a team's resources that belong to one pool
# Every tag a purchase carries, no more: the intent, its window, its controller, and the window's
# owner (TAG_TEAM, and TAG_COST_CENTRE when the window names one), and the pool a Karpenter
# NodePool feeds (TAG_POOL: its EC2NodeClass selects the pool's blocks by it).
PURCHASE_TAG_KEYS = (TAG_INTENT, TAG_WINDOW, TAG_MANAGED_BY, TAG_TEAM, TAG_COST_CENTRE, TAG_POOL)
TAG_REQUEUED_FROM = "gpu-governance:requeued-from"  # a requeued Batch job's predecessor
# How often the controllers stopped the work a requeued Batch job carries, along its whole chain of
# copies (original -> copy -> copy's copy): the planner's protection and re-borrow backoff read it.
TAG_TIMES_PREEMPTED = "gpu-governance:times-preempted"
# Batch job tags a team may write on its own jobs: hints only. The reclaim adapter reads a job's
# size from Batch; the type tag only in a pool of several types, checkpointable only to make the job a cheaper victim.
TAG_INSTANCES = "gpu-governance:instances"  # read by the simulator's trace importer only
TAG_INSTANCE_TYPE = "gpu-governance:instance-type"
TAG_CHECKPOINTABLE = "gpu-governance:checkpointable"
# Cost allocation (docs/chargeback.md): with TAG_TEAM on every resource the library makes for a team,
# TAG_POOL (above) on those that belong to one pool.
# Keys only the platform writes (purchases, requeues, cost allocation by pool): a member's job never
# carries one (the queues' submit statements refuse them in aws:TagKeys); every other key, the team
# and cost centre (fixed to the team's own) included, is the member's to set.
PLATFORM_TAG_KEYS = (TAG_INTENT, TAG_WINDOW, TAG_MANAGED_BY, TAG_REQUEUED_FROM, TAG_TIMES_PREEMPTED, TAG_POOL)


def submission_tags(team: str, cost_centre: str | None) -> dict[str, str]:
    """The tags every job a team submits must carry, which IAM requires at submission (the queues'
    submit statements) and the discovery document tells the team's tooling to send: the team, and
    its cost centre when it declares one."""
    return {TAG_TEAM: team, **({TAG_COST_CENTRE: cost_centre} if cost_centre else {})}


# --- metrics ----------------------------------------------------------------------------------

RECLAIM_NAMESPACE = "GpuGovernance/Reclaim"
CAPACITY_NAMESPACE = "GpuGovernance/Capacity"
GUARD_NAMESPACE = "GpuGovernance/Guard"  # the submission guard publishes only MISSING_API_OPERATIONS
HYPERPOD_NAMESPACE = "GpuGovernance/HyperPod"
# Published by any controller whose runtime's boto3 lacks an operation it calls (api_check), in its namespace.
MISSING_API_OPERATIONS = "MissingApiOperations"
# Per Pool, published by the reclaim handler when a pool's tick raised.
POOL_ERRORS = "PoolErrors"
# Per (Pool, Share), published by the reclaim handler every tick.
SHARE_METRICS = (
    "Guaranteed",
    "InUse",
    "Borrowed",
    "Lent",
    "Pending",
    "Preemptions",
    "LostCapacitySeconds",
    "StarvedBelowGuarantee",
)
# Pending is in instances, except on hyperpod_eks pools: there the workloads waiting (Kueue's status counts
# workloads, not what they ask for; backends/kueue_usage.py). StarvedBelowGuarantee means the same on every backend.
SHARE_DIMENSIONS = ("Pool", "Share")  # Share is the team's name
# Per (Pool, Share), published by the reclaim handler every tick (gpu_governance_runtime.usage):
# instance-hours over the tick, so a Sum over any period is that period's instance-hours. For
# hyperpod_slurm pools once per hour instead, from Slurm accounting, stamped with the hour's start
# (gpu_governance_runtime.backends.hyperpod_slurm.usage).
USED_HOURS, GUARANTEED_HOURS, BORROWED_HOURS, LENT_HOURS = (
    "UsedInstanceHours",
    "GuaranteedInstanceHours",
    "BorrowedInstanceHours",
    "LentInstanceHours",
)
USAGE_METRICS = (USED_HOURS, GUARANTEED_HOURS, BORROWED_HOURS, LENT_HOURS)
# Per (Pool, Share), published by the reclaim handler on every tick that plans the pool: the tick's
# hours in which the team asked for its guarantee (planners.reclaim.asking_shares: it ran instances
# within its quota, or a guarantee job of its waited) and those in which its guarantee was broken
# (planners.reclaim.breached_shares, the definition the simulator's breach count uses). A Sum over a
# month is that month's hours; usage.kept_percent the share of them kept. GuaranteeKeptPercent is
# the same per tick that asked (100 kept, 0 breached; no data point otherwise): its Average over
# any period is that period's kept share, which one search expression draws for every team.
GUARANTEE_ASKED_HOURS, GUARANTEE_BREACHED_HOURS = "GuaranteeAskedHours", "GuaranteeBreachedHours"
GUARANTEE_KEPT_PERCENT = "GuaranteeKeptPercent"
PROMISE_METRICS = (GUARANTEE_ASKED_HOURS, GUARANTEE_BREACHED_HOURS, GUARANTEE_KEPT_PERCENT)
RECLAIM_METRICS = (
    *SHARE_METRICS,
    *USAGE_METRICS,
    *PROMISE_METRICS,
    POOL_ERRORS,
    MISSING_API_OPERATIONS,
)  # all the reclaim function publishes
# Published by the capacity handler: per run, and per Window (Spend, BudgetUsedPercent, DrainSeconds, JobsRequeued).
CAPACITY_METRICS = (
    "WindowsUncovered",
    "Purchases",
    "PurchaseFailures",
    "PurchasesInFlight",
    "AwaitingApproval",
    "PurchasesFoundLate",
    "PurchasesDeferred",
    "RunErrors",
    "ConsumerErrors",
    "Spend",
    "BudgetUsedPercent",
    "DrainSeconds",
    "JobsRequeued",
)
# Published by the capacity controller for chargeback (capacity/chargeback.py). Per Team, once per
# purchase when the ledger records it (minus the fee when a bought block's payment fails):
PURCHASE_FEES = "PurchaseFees"  # USD
PURCHASE_FEE_DIMENSIONS = ("Team",)
# Per active Capacity Block or training plan, on each scheduled run: its instance-hours over the run's
# interval (a Sum over any period is that period's instance-hours), and the share of them in use.
PURCHASED_HOURS, PURCHASED_USED_HOURS, PURCHASED_UTILISATION = (
    "PurchasedInstanceHours",
    "PurchasedUsedInstanceHours",
    "PurchasedUtilisation",
)
PURCHASED_DIMENSIONS = ("Window", "Team", "Reservation")  # Reservation: the block's id or the plan's ARN
# Per active Capacity Block of a Batch window, on each scheduled run, by BLOCK_USE_DIMENSIONS (capacity/fill.py reads
# the jobs): instance-hours of the run's interval with a job on a block instance, idle while the consumer's work waited
# or ran on demand, idle with no work of it anywhere. Work cut at a block's end is in the ledger (requeue records).
# Read by `gpu-governance usage report` (constructs_lib/cli/usage.py), not drawn on a dashboard.
BLOCK_JOB_HOURS, BLOCK_IDLE_WAITING_HOURS, BLOCK_IDLE_HOURS = (
    "BlockJobInstanceHours",
    "BlockIdleWorkWaitingInstanceHours",
    "BlockIdleNoWorkInstanceHours",
)
BLOCK_USE_METRICS = (BLOCK_JOB_HOURS, BLOCK_IDLE_WAITING_HOURS, BLOCK_IDLE_HOURS)
BLOCK_USE_DIMENSIONS = ("Window", "Reservation")  # what the usage report knows of a block from the ledger
# Per Team, once a day (capacity/spend.py): the month-to-date cost (USD, Cost Explorer's UnblendedCost,
# what a COST budget tracks) of everything tagged TAG_TEAM = the team; Team = UNTAGGED_TEAM for costs without it.
TEAM_SPEND = "TeamSpendUsd"
TEAM_SPEND_DIMENSIONS = ("Team",)
UNTAGGED_TEAM = "(untagged)"  # no team name can take it (names start with a letter or digit)
CAPACITY_CHARGEBACK_METRICS = (PURCHASE_FEES, PURCHASED_HOURS, PURCHASED_USED_HOURS, PURCHASED_UTILISATION, TEAM_SPEND)
# Per Cluster, published by the HyperPod dedicated-nodes custom resource on each event.
DEDICATED_GROUPS_UPDATED = "DedicatedGroupsUpdated"
HYPERPOD_METRICS = (DEDICATED_GROUPS_UPDATED, MISSING_API_OPERATIONS)
# Every metric name a function may publish (gpu_governance_runtime.common.metrics refuses others).
METRIC_NAMES = frozenset(
    (*RECLAIM_METRICS, *CAPACITY_METRICS, *CAPACITY_CHARGEBACK_METRICS, *BLOCK_USE_METRICS, *HYPERPOD_METRICS)
)

# --- discovery: where a team's tooling finds its queue, roles, bucket, key and images ----------

# One SSM String parameter per team and pool, named discovery_parameter_name(...), holding one
# JSON object: the keys of DISCOVERY_KEYS, plus those of DISCOVERY_BACKEND_KEYS[backend].
# constructs_lib/member/discovery.py `describe` is its one writer (the constructs publish it,
# `gpu-governance team show` prints it offline); constructs_lib.member.TeamSetup.from_parameter
# reads it, with the team's own roles.
DISCOVERY_VERSION = 1
DISCOVERY_PARAMETER_ROOT = "/gpu-governance"


def discovery_parameter_path(organisation: str, team: str) -> str:
    """The path under which every discovery parameter of ``team`` lives (GetParametersByPath)."""
    return f"{DISCOVERY_PARAMETER_ROOT}/{organisation}/teams/{team}"


def discovery_parameter_name(organisation: str, team: str, pool: str) -> str:
    return f"{discovery_parameter_path(organisation, team)}/{pool}"


DISCOVERY_KEYS = (
    "version",
    "organisation",
    "team",
    "pool",
    "backend",
    "account",
    "region",
    "submission_role_arn",
    "execution_role_arn",
    "bucket",
    "kms_key_arn",
    "kms_key_alias",
    "checkpoint_prefix",  # bucket and key ARN: null offline
    "ecr_repository_uri",
    "secrets_prefix",
    "team_tag",
    "submission_tags",  # {key: value} every submitted job must carry (submission_tags: team, cost centre)
    "quota",  # {instance type: guaranteed instances} of the team in this pool
    "state",  # "active", or "paused": no new job of the team starts (null in documents published before it existed)
    # {"hours", "period" (day|week|month), "enforced" (true where this pool's backend stops the team at it)}, or null: no limit
    "gpu_hour_limit",
    "priority_classes",  # [{"name", "weight", and DISCOVERY_PRIORITY_KEY[backend]}], most urgent first
)
DISCOVERY_BACKEND_KEYS = {
    # training_plans_parameter: team_training_plans_parameter, the team's active training plans
    BATCH_QUOTA_SHARE: (
        "job_queue",
        "job_queue_arn",
        "quota_share",
        "quota_share_arn",
        "training_job_name_prefix",
        "training_plans_parameter",
    ),
    BATCH_FAIR_SHARE: ("job_queue", "job_queue_arn", "share_identifier", "job_definition_prefix"),
    HYPERPOD_EKS: ("cluster_arn", "eks_cluster_name", "namespace", "local_queue", "service_account"),
    EKS_KUEUE: ("cluster_arn", "eks_cluster_name", "namespace", "local_queue", "service_account"),
    HYPERPOD_SLURM: (
        "cluster_name",
        "slurm_account",
        "partition",
        "qos",
        "default_qos",
        "borrow_partition",
        "borrow_qos",
    ),
}
# What a priority class is called where the backend takes it: Batch schedulingPriority (the
# weight), the Kueue label kueue.x-k8s.io/priority-class, the team's Slurm QoS of that class.
DISCOVERY_PRIORITY_KEY = {
    BATCH_QUOTA_SHARE: "scheduling_priority",
    BATCH_FAIR_SHARE: "scheduling_priority",
    HYPERPOD_EKS: "kueue_priority_class",
    HYPERPOD_SLURM: "qos",
    EKS_KUEUE: "kueue_priority_class",
}

# --- capacity requests (on-demand windows) ----------------------------------------------------

CAPACITY_EVENT_SOURCE = "gpu-governance.capacity"  # events the capacity controller sends and takes
# The reclaim controller's event when a team has used 80 % of its GPU-hour limit (reclaim/gpu_hours.py);
# detail: pool, team, used_gpu_hours, limit, period, period_start, resets.
RECLAIM_EVENT_SOURCE, GPU_HOUR_LIMIT_EVENT_TYPE = "gpu-governance.reclaim", "GPU-hour Limit Near"
# An EventBridge event of this detail-type asks for an on-demand window; its detail carries
# team, instance_type, count, hours, optional start (ISO 8601 or "now"), window and token.
CAPACITY_REQUEST_DETAIL_TYPE = "Capacity Request"
# A capacity window's alarm_requests: the alarm's state change requests capacity when it goes to ALARM.
ALARM_EVENT_SOURCE, ALARM_STATE_CHANGE_DETAIL_TYPE, ALARM_STATE = (
    "aws.cloudwatch",
    "CloudWatch Alarm State Change",
    "ALARM",
)
# A stack holding a raised quota share or compute quota finished an update (which put the declared
# quota back): the capacity controller runs at once to raise it again.
STACK_EVENT_SOURCE, STACK_STATUS_CHANGE_DETAIL_TYPE = "aws.cloudformation", "CloudFormation Stack Status Change"
STACK_UPDATED_STATUSES = ("UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE")


def team_training_plans_parameter(organisation: str, team: str) -> str:
    """The SSM parameter naming a team's active training plans for SageMaker training jobs: a JSON
    list of ``{"arn", "window", "instance_type", "ends"}`` (``[]`` when none), written by the capacity
    controller; a job passes the plan of its instance type as ``ResourceConfig.TrainingPlanArn``.
    Beside the team's discovery parameters, one level deeper: a pool name has no "/", so no pool's
    discovery parameter can take this name."""
    return f"{discovery_parameter_path(organisation, team)}/capacity/training-plans"


def raised_guarantees_parameter(organisation: str) -> str:
    """The SSM parameter holding the guarantees the capacity controller has raised and not yet
    lowered: a JSON list of ``{"pool", "team", "instance_type", "instances", "until", "window"}``
    (``until``: ISO 8601 UTC, when the raise is lowered), written by the capacity controller
    (capacity/raised.py), read by the reclaim controller. Outside every team's path."""
    return f"{DISCOVERY_PARAMETER_ROOT}/{organisation}/capacity/raised-guarantees"


RAISED_GUARANTEE_KEYS = ("pool", "team", "instance_type", "instances", "until", "window")
