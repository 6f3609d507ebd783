"""A pool's teams checked against what its backend takes: how many teams, which instance types,
quotas in the units the backend counts, borrow and lending limits, and what a capacity window
raising a quota may touch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from constructs_lib.backends import backend_of
from constructs_lib.backends.base import MIG_PROFILES
from constructs_lib.core.errors import Problem
from gpu_governance_runtime.contract import (
    SharingStrategy,
)
from gpu_governance_runtime.limits import TRAINING_INSTANCE_GPUS

from .base import (
    HYPERPOD_TEAM_NAME,
    MAX_HYPERPOD_BORROW_LIMIT,
    UNLIMITED,
    OrganisationView,
)
from .instance_types import known
from .quota import QuotaEntry, ResourceQuota, gpus_of, whole_instances
from .teams import KubernetesTenancy, Team


def check_pool_teams(pool: Any, teams: Sequence[tuple[str, Team]], pool_path: str) -> list[Problem]:
    """What a backend would refuse about the teams of one pool; ``teams`` pairs each team with
    its path in the caller's input. Used by the organisation check and by the constructs."""
    backend = backend_of(pool)
    problems = [problem for path, team in teams for problem in _team_problems(pool, path, team)]
    if backend.kubernetes_tenancy:
        problems += _dedicated_group_problems(pool, teams)
    if backend.max_teams_per_pool is not None and len(teams) > backend.max_teams_per_pool:
        problems.append(
            Problem(
                path=pool_path,
                wrong=backend.too_many_teams.format(pool=pool.name),
                value=len(teams),
                allowed=f"at most {backend.max_teams_per_pool}{backend.too_many_teams_advice}",
            )
        )
    return problems + _capacity_problems(pool, teams, pool_path)


def _team_problems(pool: Any, path: str, team: Team) -> list[Problem]:
    """What the pool's backend refuses of one team's quota there."""
    backend = backend_of(pool)
    qpath = f"{path}.quotas.{pool.name}"
    quota = team.quotas.get(pool.name)
    if quota is None:
        return [
            Problem(
                path=f"{path}.quotas",
                wrong=f"no quota in pool {pool.name}",
                value=sorted(team.quotas),
                allowed=f"a quota keyed {pool.name!r}",
            )
        ]
    problems: list[Problem] = []
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
    problems += _gpu_hour_problems(pool, path, team)
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
        problems += _hyperpod_team_problems(backend, path, team)
    return problems


def _gpu_hour_problems(pool: Any, path: str, team: Team) -> list[Problem]:
    """A GPU-hour limit the reclaim controller counts needs the GPUs of every instance type of the pool."""
    problems: list[Problem] = []
    if team.gpu_hour_limit and backend_of(pool).gpu_hour_switch:
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
    return problems


def _hyperpod_team_problems(backend: Any, path: str, team: Team) -> list[Problem]:
    """What HyperPod refuses of a team, whatever its orchestrator: its name, its borrow limit."""
    problems: list[Problem] = []
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
    return problems


def _dedicated_group_problems(pool: Any, teams: Sequence[tuple[str, Team]]) -> list[Problem]:
    """No instance group is dedicated to two teams of a pool."""
    problems: list[Problem] = []
    owners: dict[str, str] = {}
    for path, team in teams:
        for index, group in enumerate(team.kubernetes.get(pool.name, KubernetesTenancy()).dedicated_instance_groups):
            if owners.setdefault(group, team.name) != team.name:
                problems.append(
                    Problem(
                        path=f"{path}.kubernetes.{pool.name}.dedicated_instance_groups[{index}]",
                        wrong=f"already dedicated to team {owners[group]}",
                        value=group,
                        allowed="an instance group no other team has",
                    )
                )
    return problems


def _capacity_problems(pool: Any, teams: Sequence[tuple[str, Team]], pool_path: str) -> list[Problem]:
    """The pool holds what its teams are guaranteed, per instance type (in GPUs where quotas are)."""
    problems: list[Problem] = []
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


def _quota_unit_problems(pool: Any, team: Team, quota: Mapping[str, QuotaEntry], qpath: str) -> list[Problem]:
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


def raised_part_instance_quotas(model: OrganisationView) -> list[Problem]:
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
