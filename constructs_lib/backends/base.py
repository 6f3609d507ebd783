"""What the library knows about one execution backend, in one frozen descriptor.

Each backend's package (``constructs_lib/backends/<name>/``) declares one :class:`Backend` in its
``__init__``; the registry (``constructs_lib.backends``) lists the packages, and the rest of the
library asks the registry what a pool's backend does instead of comparing ``pool.backend`` with a
name. Pure Python: the model, the CLI and a member's notebook read it without aws_cdk.

What a backend does beyond its declaration is code in modules of its package with the names of
:data:`PARTS` (as a Django app's ``admin.py``): the part of the library that needs one loads it
with :meth:`Backend.part` when it needs it, so nothing here points up to the code that deploys or
reads a pool, and a command that synthesizes nothing loads no construct.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, Literal

# (service, shape) whose enumeration in botocore's service model lists the instance types an API accepts.
TRAINING = ("sagemaker", "TrainingInstanceType")  # CreateTrainingJob: what a Batch quota share's jobs run on
CLUSTER = ("sagemaker", "ClusterInstanceType")  # CreateCluster: HyperPod instance groups
EC2 = ("ec2", "InstanceType")  # RunInstances: Batch compute environments, EKS node groups, Capacity Blocks
MIG_PROFILES = ("sagemaker", "MIGProfileType")  # CreateComputeQuota: AcceleratorPartition.Type


# What the reclaim controller calls to stop a team's new admissions at its GPU-hour limit and to
# let them in again next period (reclaim/gpu_hours.py), by the kind of switch a backend has.
GPU_HOUR_SWITCH_ACTIONS = {
    "quota_share": ("batch:UpdateQuotaShare",),
    "compute_quota": ("sagemaker:UpdateComputeQuota",),
}


# Quota shares the reclaim controller may switch at a GPU-hour limit, named one by one up to this
# many; beyond, each queue's quota-share/* (a queue holds at most 20 shares), so the policy stays
# within IAM's inline size however many teams have a limit.
MAX_NAMED_QUOTA_SHARES = 40


def limited_quota_shares(queues: dict[str, str], model: Any) -> list[str]:
    """The quota-share ARNs (or ARN patterns) the reclaim controller may switch: ``queues`` maps a
    pool whose switch is a quota share to its job queue ARN (a token in a stack)."""
    limited = {pool: [t.name for t in model.teams_in(pool) if t.gpu_hour_limit] for pool in sorted(queues)}
    if sum(len(teams) for teams in limited.values()) <= MAX_NAMED_QUOTA_SHARES:
        return [f"{queues[pool]}/quota-share/{team}" for pool, teams in limited.items() for team in teams]
    return [f"{queues[pool]}/quota-share/*" for pool, teams in limited.items() if teams]


# The modules a backend's package may have beside its declaration, and what each provides (the
# same names in every package; docs/architecture.md, "Adding a backend").
PARTS = {
    "checks": "problems(model, pool) -> [Problem]: what validate refuses that holds only on this backend "
    "(asked once the organisation's references hold)",
    "construct": "build_pool(stack, model, pool, tenants) -> construct: deploys one pool; beside it the "
    "construct and its <Construct>Props",
    "discovery": "keys(model, team, pool, classes) -> (keys, priority by class name): the backend's keys of a "
    "team's discovery document",
    "reclaim": "target(pool, its construct) -> ReclaimTarget | None (the capacity stack's), entry(target, pool) -> "
    "the handler's RECLAIM_TARGETS entry, problems(path, target, pool, stack) -> [Problem]: how the reclaim "
    "controller reaches the pool",
    "kueue": "namespace(team), cluster_queue(team), team_named(name): the names of a team's Kueue objects, where "
    "the pools schedule with Kueue (`gpu-governance trace from-kueue` reads a Workload's team from them)",
    "member": "the members' submission helpers (constructs_lib.member re-exports its __all__)",
    "audit": "workload(model, team, pool) -> (who, where), cluster(...) and data(...) -> [Access]: a team's "
    "access on the pool for `gpu-governance audit`",
    "status": "read(args, the pool's policy, model) -> Observation: how `gpu-governance status` reads a "
    "team's use of the pool (no module: status does not read it)",
    "command": "register(subparsers) and DOCS (command -> its page): the backend's own `gpu-governance` commands",
    "submit": "example(args, setup, priority class, instance type) -> exit code: the submission `gpu-governance "
    "team submit-example` prints (with ``member_tool``)",
}


def _unchanged(deal: Any, team: Any, pool: Any) -> Any:
    return deal


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One execution backend as the library sees it."""

    name: str
    """The backend's name in the governance file and the policy document (the runtime's contract)."""
    package: str
    """The backend's package (its declaration's ``__name__``), where its :data:`PARTS` are found."""
    pool: type
    """The pool's model class (its package's ``pool.py``), whose ``backend`` literal is :attr:`name`."""
    exports: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The public names ``constructs_lib`` re-exports, by the module of the package that defines them."""
    family: str
    """``batch``, ``hyperpod`` or ``eks``: the AWS service whose rules the pool follows (team names, borrowing)."""
    instance_types: tuple[str, str]
    """(service, shape) whose enumeration lists the instance types a pool's capacity may name."""
    quota_noun: str = ""
    """What a team's quota becomes there, for messages (``Batch quota share``)."""
    max_quota_types: int | None = None
    """Most instance types one team's quota may name there (None: no such limit)."""
    part_instance_quotas: bool = False
    """Takes quotas that are not whole instances: GPUs short of an instance, vCPU, memory, MIG
    partitions (elsewhere a quota in GPUs must be whole instances; docs/governance-file.md)."""
    reclaim_plans: bool = False
    """The reclaim controller plans the pool's borrowers: there a lending limit and a group's quota hold."""
    holds_limits_natively: bool = False
    """The scheduler itself holds a team's lending limit and a group's quota (Kueue's ``lendingLimit``
    and hierarchical cohorts): the policy document carries them, so ``simulate`` replays them."""
    natively_preempts: bool = True
    """The scheduler itself takes borrowed capacity back (else only the reclaim controller does)."""
    weighs_teams: bool = True
    """The scheduler weighs a team by ``fair_share_weight`` when handing out idle capacity."""
    lending_limit_caveat: str | None = None
    """What ``validate`` and ``explain`` say about a ``lending_limit`` there (``{where}`` is filled in)."""
    paused_caveat: str | None = None
    """What they say about a paused team there, if pausing does not hold."""
    grace_caveat: str | None = None
    """What they say about a pool's ``reclaim.grace_seconds`` there, if the grace does not hold."""
    fair_share_caveat: str | None = None
    """What they say about a pool's ``reclaim.fair_share`` by usage there, where the reclaim
    controller's order is not the whole story (``{where}`` is filled in)."""
    gpu_hour_limit_caveat: str | None = None
    """Why a team's ``gpu_hour_limit`` does not hold there (Slurm counts a team's GPU minutes
    against a limit itself: GrpTRESMins, https://slurm.schedmd.com/sacctmgr.html; where a backend
    has a per-team admission switch the reclaim controller counts and switches it,
    ``gpu_hour_switch``; docs/governance-file.md)."""
    max_run_caveat: str | None = None
    """Why a declared ``max_run_minutes`` does not stop a job there (``{where}`` is filled in); None:
    the backend stops a job at its limit (Slurm QoS ``MaxWall``; a quota share's jobs, whose
    ``StoppingCondition.MaxRuntimeInSeconds`` the submission guard holds to it)."""
    max_run_held_for: str = ""
    """The workloads whose run time the backend does hold where ``max_run_caveat`` names the rest
    (``explain`` shows the limit as held for them only); empty: the caveat is the whole story."""
    user_limit_caveat: str | None = None
    """Why a team's ``user_limits`` do not hold there (``{where}`` is filled in); None: the scheduler
    sees each member and limits them (Slurm user associations)."""
    gpu_hour_switch: Literal["quota_share", "compute_quota", "cluster_queue", ""] = ""
    """The per-team admission switch the reclaim controller turns off at a team's GPU-hour limit and
    on again next period (reclaim/gpu_hours.py): a Batch quota share's state, a HyperPod compute
    quota's activation state or a Kueue ClusterQueue's stopPolicy (Kubernetes RBAC, no IAM action:
    ``tenancy.kubernetes.usage_reader_objects``); empty: it does not enforce limits there."""
    max_teams_per_pool: int | None = None
    """Most teams one pool may hold there (each is one share of the pool's queue; None: no such limit)."""
    too_many_teams: str = ""
    """What ``validate`` says of a pool holding more (``{pool}`` is filled in)."""
    too_many_teams_advice: str = ""
    """What ``validate`` adds after "at most ``max_teams_per_pool``"."""
    bounds_borrow_limit: bool = False
    """The API documents a range for a team's borrow limit (1 to ``MAX_HYPERPOD_BORROW_LIMIT``
    percent): ``validate`` refuses a limit outside it."""
    kubernetes_tenancy: bool = False
    """A team with a quota there may declare ``kubernetes`` settings for the pool (priority classes,
    instance groups dedicated to it, no two teams the same)."""
    group_caveat: str | None = None
    """Why a group's quota does not hold there (no level above the team in the API, and the reclaim
    controller does not plan the pool): nor do its parent and limits."""
    group_tree: str = ""
    """Who holds a group tree there (its quotas, parents and borrowing limits), for ``validate`` and
    ``explain``; empty where :attr:`group_caveat` says nobody does."""
    group_lending_limit_caveat: str | None = None
    """Why a group's ``lending_limits`` do not hold there, where the rest of its tree does
    (``{where}`` is filled in)."""
    refine_deal: Callable[[Any, Any, Any], Any] = _unchanged
    """``(deal, team, pool) -> deal``: where the backend's semantics differ from the model's."""
    team_resources: int = 0
    """CloudFormation resources per team per pool (``organisation/limits.py``, measured)."""
    shared_resources: int = 0
    """Shared resources per pool in the capacity stack (``organisation/limits.py``, measured)."""
    reclaim_dashboard_widgets: int = 0
    """Widgets per pool on the reclaim controller's dashboard (0: not on it)."""
    window_feeds: tuple[str, ...] = ()
    """The kinds of capacity-window consumer that may feed a pool of this backend (the contract's ``CONSUMER_FIELDS``)."""
    drains_on_head_node: bool = False
    """A window feeding the pool drains its nodes through the pool's head node (SSM), which the capacity controller needs."""
    guards_submissions: bool = False
    """The submission guard watches the pool's queue (quota-share queues, docs/security.md)."""
    quota_raises: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """What the capacity controller calls to raise a quota, by the kind of window consumer fed."""
    pending_unit: str = "instances"
    """What a team's ``Pending`` metric counts there (the dashboards' titles)."""
    preemptions_seen: bool = True
    """The reclaim controller sees the pool's preemptions (Kueue preempts unseen): dashboards draw them."""
    guarantee_recorded: bool = True
    """The reclaim tick sees each waiting job's size and age, so it records whether the team's
    guarantee was kept (``GuaranteeKeptPercent``; Kueue's ClusterQueue status counts workloads only)."""
    eks_access_entries: bool = False
    """The pool's cluster gives each team's submission role, its members in the cluster's account and
    each platform admin an EKS access entry (``organisation/limits.py`` counts them), and the reclaim
    controller one to observe the pool through the cluster's Kubernetes API."""
    reclaim_terminates_jobs: bool = False
    """The reclaim controller stops a borrower by terminating its Batch job and submitting its copy."""
    reclaim_reads_snapshot: bool = False
    """The reclaim controller reads the pool's queue snapshot and service jobs (it only observes there)."""
    reached_on_head_node: bool = False
    """The reclaim controller reaches the pool through its head node (SSM Run Command), also for usage only."""
    team_pod_role: bool = False
    """A team with a quota there gets a pod role beside its submission and training roles."""
    submission_policy: bool = False
    """The team's submission role gets one managed policy per pool (submit to its queue, describe its cluster)."""
    template_bytes_per_team: int = 0
    """Bytes each team of a pool adds to the capacity stack's template beyond its resources (``organisation/limits.py``)."""
    member_tool: str = ""
    """The name members give the backend (``gpu-governance team submit-example --backend``,
    ``member.team_setup(backend=...)``); empty: members do not submit there themselves."""
    stack_attribute: str = ""
    """The capacity stack's dictionary (pool name -> construct) the pool's construct joins."""

    @property
    def holds_lending_limits(self) -> bool:
        """A team's lending limit and a group's quota hold there (``validate`` warns elsewhere)."""
        return self.reclaim_plans or self.holds_limits_natively

    @property
    def gpu_hour_limit_switch(self) -> tuple[str, ...]:
        """The IAM actions of the pool's GPU-hour switch (none where there is no switch)."""
        return GPU_HOUR_SWITCH_ACTIONS.get(self.gpu_hour_switch, ())

    def part(self, role: str) -> ModuleType | None:
        """The backend's module ``role`` (one of :data:`PARTS`), loaded now; None where it has none."""
        if role not in PARTS:
            raise ValueError(f"{role!r} is not a part of a backend: one of {sorted(PARTS)}")
        return _module(f"{self.package}.{role}")


@functools.cache
def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as missing:
        if missing.name != name:
            raise  # a module it imports is missing, not the part
        return None


def refined(deal: Any, **changes: Any) -> Any:
    """``deal`` with ``changes``: what a backend's ``refine_deal`` returns."""
    return replace(deal, **changes)
