"""Bought capacity reaches the owner's share while its training plan is active, and leaves it
``LOWER_LEAD`` before the plan ends, on two backends:

- AWS Batch quota-share pools (windows feeding ``sagemaker_training_jobs``): the owning team's
  quota share (``DescribeQuotaShare`` / ``UpdateQuotaShare``, ledger ``share#<queue>/<share>``)
  and the pool's service environment, which holds the declared capacity plus every raise
  (``DescribeServiceEnvironments`` / ``UpdateServiceEnvironment``, ledger ``environment#<pool>``);
- HyperPod EKS pools (windows feeding a ``hyperpod_instance_group``): the owning team's compute
  quota on the window's cluster, found by the cluster ARN and the team's name (the name
  ``HyperPodEksGovernance`` gives it) (``ListComputeQuotas`` / ``DescribeComputeQuota`` /
  ``UpdateComputeQuota`` with the version read, ledger ``compute-quota#<cluster arn>/<team>``).

One place (``converge``) does the rest for both. Absolute, not incremental: every run computes
each affected quota from the policy (the declared quota) plus the plans active now, reads it and
writes only when they differ. So a repeated run or event changes nothing, a crash between the
call and its record or a failed (throttled) call is put right by the next run, and the same
computation lowers the quota when the plan ends: the raise is always undone by the controller that
made it. Each call is recorded in the ledger before and after (``calling``, then ``done`` or
``failed``). A quota that shows neither the declared value nor one of the controller's last
recorded call was changed by someone else (a platform admin): it is left alone and reported
(``error``, counted in ``ConsumerErrors``) until it shows one of them again or the governance
file declares it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from ..contract import CONSUMER_HYPERPOD_INSTANCE_GROUP, CONSUMER_SAGEMAKER_TRAINING_JOBS
from ..planners import market
from ..planners.offers import Reservation
from ..planners.window import Window
from ..quotas import MissingQuota, describe_team_compute_quota, quota_share_arn
from .ledger import Ledger

# Lowered when EC2/SageMaker warn of the end: work above the declared quota becomes preemptible
# before the capacity goes away. Batch stops such a job only for another share's RUNNABLE job, never
# by itself [aws: batch.lowered-share-preemptible].
LOWER_LEAD = market.WARNING_LEAD
TRAINING_JOBS = CONSUMER_SAGEMAKER_TRAINING_JOBS
INSTANCE_GROUP = CONSUMER_HYPERPOD_INSTANCE_GROUP
STATUSES = ("calling", "done", "failed")


def raising(
    *,
    windows: Mapping[str, Window],
    owned: Iterable[Reservation],
    pools: Mapping[str, Any],
    now: datetime,
    kind: str = TRAINING_JOBS,
) -> Iterator[tuple[Window, Any, str, Any, list[Reservation]]]:
    """(window, pool, place, share, plans raising it now) for every ``kind`` window whose team has a
    share in one of ``pools`` (place: the Batch pool, i.e. its job queue, or the HyperPod cluster
    ARN). A plan raises the share while it is active, until ``LOWER_LEAD`` before its end."""
    owned = list(owned)
    for window in windows.values():
        pool = pools.get(window.consumer.get("pool") or "") if window.consumer.get("kind") == kind else None
        share = next((s for s in pool.shares if s.name == window.team), None) if pool is not None else None
        if share is None:
            continue  # no pool, or the team has no share in it: nothing to raise
        place = window.consumer["cluster_arn"] if kind == INSTANCE_GROUP else pool.name
        yield (
            window,
            pool,
            place,
            share,
            [
                r
                for r in owned
                if r.window == window.name and r.state == "active" and r.start <= now < r.end - LOWER_LEAD
            ],
        )


def label(kind: str, place: str, team: str) -> dict[str, str]:
    """How a run's result names the quota of ``team`` at ``place``."""
    return {"compute_quota" if kind == INSTANCE_GROUP else "share": f"{place}/{team}"}


def failed(results: Iterable[Mapping[str, Any]], *labels: Mapping[str, str]) -> bool:
    """Whether a result of one of ``labels`` reports an error: that quota may not show what was wanted."""
    return any("error" in r and all(r.get(k) == v for k, v in where.items()) for r in results for where in labels)


def desired_limits(
    *,
    windows: Mapping[str, Window],
    owned: Iterable[Reservation],
    pools: Mapping[str, Any],
    now: datetime,
    kind: str = TRAINING_JOBS,
) -> dict[tuple[str, str], tuple[dict[str, int], dict[str, int]]]:
    """(place, team) -> (declared quota, quota wanted now) by instance type, for every team owning
    a ``kind`` window in one of ``pools`` (``raising``): the declared quota plus the instances of
    its plans active now."""
    limits: dict[tuple[str, str], tuple[dict[str, int], dict[str, int]]] = {}
    for window, _, place, share, plans in raising(windows=windows, owned=owned, pools=pools, now=now, kind=kind):
        _, wanted = limits.setdefault((place, share.name), (dict(share.quota), dict(share.quota)))
        wanted[window.instance_type] = wanted.get(window.instance_type, 0) + sum(r.count for r in plans)
    return limits


def converge(
    *,
    label: dict[str, str],
    key: str,
    declared: list,
    wanted: list,
    read: Callable[[], tuple[list, Any]],
    write: Callable[[list, Any], None],
    ledger: Ledger,
    now: datetime,
) -> dict[str, Any]:
    """Make one quota show ``wanted``: ``read()`` gives (current, what ``write`` needs); written
    only when they differ and the current value is the declared one or one the controller's last
    recorded call left (from, or to after a crash), every call recorded under ``key``."""
    try:
        current, handle = read()
    except MissingQuota as missing:
        return {**label, "error": str(missing)}
    except ClientError as error:
        return {**label, "error": f"{error.response['Error']['Code']}: {error}"}
    if current == wanted or not wanted:
        return {**label, "limits": wanted, "changed": False}
    last = ledger.actions(f"{key}@", STATUSES)[-1:]
    if current != declared and not any(current in (details.get("from"), details.get("to")) for _, _, details in last):
        return {
            **label,
            "limits": current,
            "changed": False,
            "error": f"changed outside the capacity controller (shows {current}, declared {declared}); left alone until it shows "
            "the declared quota again or the governance file declares it",
        }
    action = f"{key}@{now:%Y%m%dT%H%M%SZ}"
    ledger.record_action(action, status="calling", details={"from": current, "to": wanted}, now=now)
    try:
        write(wanted, handle)
    except ClientError as error:  # throttled, or changed since read: retried next run, from what the quota then shows
        ledger.record_action(
            action, status="failed", details={"from": current, "to": wanted, "error": str(error)}, now=now
        )
        return {**label, "error": f"{error.response['Error']['Code']}: {error}"}
    ledger.record_action(action, status="done", details={"from": current, "to": wanted}, now=now)
    return {**label, "limits": wanted, "changed": True}


def would(
    wanted: Mapping[tuple[str, str], tuple[Mapping[str, int], Mapping[str, int]]],
    applied: Mapping[tuple[str, str], tuple[Mapping[str, int], Mapping[str, int]]],
    kind: str,
) -> list[dict[str, Any]]:
    """What dry-run windows would have raised (``desired_limits`` of every window against those
    of the windows that act): reported, never written (issue 23, outcome 8)."""
    return [
        {
            **label(kind, place, share),
            "dry_run": True,
            "changed": False,
            "would": f"set {dict(limits[1])} (declared {dict(limits[0])}) for a dry-run window's active plan",
        }
        for (place, share), limits in sorted(wanted.items())
        if applied.get((place, share), (limits[0], limits[0])) != limits
    ]


def _limits(counts: Mapping[str, int]) -> list[dict[str, Any]]:
    return [{"capacityUnit": unit, "maxCapacity": count} for unit, count in sorted(counts.items()) if count >= 1]


def apply_batch(
    *,
    desired: Mapping[tuple[str, str], tuple[Mapping[str, int], Mapping[str, int]]],
    pools: Mapping[str, Any],
    batch: Any,
    ledger: Ledger,
    now: datetime,
) -> list[dict[str, Any]]:
    """Batch quota-share pools: the shares (``apply``) and the pool's service environment (named
    after the pool), whose capacity limits hold the declared capacity plus every raise in the pool,
    so the raised guarantees still fit in it. An environment is raised before the shares and
    lowered after them, once no plan of its pool is active."""
    environments: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    for (pool, _), (declared, wanted) in desired.items():
        _, capacity = environments.setdefault(pool, (dict(pools[pool].capacity), dict(pools[pool].capacity)))
        for unit, count in wanted.items():
            capacity[unit] = capacity.get(unit, 0) + count - declared.get(unit, 0)
    raised = {pool: limits for pool, limits in environments.items() if limits[0] != limits[1]}
    lowered = {pool: limits for pool, limits in environments.items() if limits[0] == limits[1]}
    return (
        _apply_environments(raised, batch, ledger, now)
        + apply(desired=desired, batch=batch, ledger=ledger, now=now)
        + _apply_environments(lowered, batch, ledger, now)
    )


def _apply_environments(
    desired: Mapping[str, tuple[Mapping[str, int], Mapping[str, int]]], batch: Any, ledger: Ledger, now: datetime
) -> list[dict[str, Any]]:
    def reader(name: str):
        def read() -> tuple[list, None]:
            found = batch.describe_service_environments(serviceEnvironments=[name]).get("serviceEnvironments") or []
            if not found:
                raise MissingQuota(f"no service environment {name}")
            return sorted(found[0].get("capacityLimits") or [], key=lambda c: c["capacityUnit"]), None

        return read

    return [
        converge(
            label={"service_environment": name},
            key=f"environment#{name}",
            declared=_limits(declared),
            wanted=_limits(wanted),
            read=reader(name),
            write=lambda wanted, _, name=name: batch.update_service_environment(
                serviceEnvironment=name, capacityLimits=wanted
            ),
            ledger=ledger,
            now=now,
        )
        for name, (declared, wanted) in sorted(desired.items())
    ]


def apply(
    *,
    desired: Mapping[tuple[str, str], tuple[Mapping[str, int], Mapping[str, int]]],
    batch: Any,
    ledger: Ledger,
    now: datetime,
) -> list[dict[str, Any]]:
    """Batch quota shares (``desired_limits`` with ``kind=TRAINING_JOBS``)."""

    def reader(queue: str, share: str):
        def read() -> tuple[list, str]:
            arn = quota_share_arn(batch, queue, share)
            return sorted(
                batch.describe_quota_share(quotaShareArn=arn).get("capacityLimits") or [],
                key=lambda c: c["capacityUnit"],
            ), arn

        return read

    return [
        converge(
            label=label(TRAINING_JOBS, queue, share),
            key=f"share#{queue}/{share}",
            declared=_limits(declared),
            wanted=_limits(wanted),
            read=reader(queue, share),
            write=lambda wanted, arn: batch.update_quota_share(quotaShareArn=arn, capacityLimits=wanted),
            ledger=ledger,
            now=now,
        )
        for (queue, share), (declared, wanted) in sorted(desired.items())
    ]


def apply_compute_quotas(
    *,
    desired: Mapping[tuple[str, str], tuple[Mapping[str, int], Mapping[str, int]]],
    sagemaker: Any,
    ledger: Ledger,
    now: datetime,
) -> list[dict[str, Any]]:
    """HyperPod EKS compute quotas (``desired_limits`` with ``kind=INSTANCE_GROUP``). Only the
    instance counts change; the sharing strategy, borrow limit and preemption are sent back as read,
    with the version read (``TargetVersion``), so a change made since is refused, not overwritten."""

    def resources(counts: Mapping[str, int]) -> list[dict[str, Any]]:
        return [{"InstanceType": unit, "Count": count} for unit, count in sorted(counts.items())]

    def reader(cluster: str, team: str):
        def read() -> tuple[list, dict]:
            described = describe_team_compute_quota(sagemaker, cluster, team)
            config = described.get("ComputeQuotaConfig") or {}
            current = sorted(
                (
                    {"InstanceType": r["InstanceType"], "Count": r.get("Count", 0)}
                    for r in config.get("ComputeQuotaResources") or []
                ),
                key=lambda r: r["InstanceType"],
            )
            return current, described

        return read

    def write(wanted: list, described: dict) -> None:
        sagemaker.update_compute_quota(
            ComputeQuotaId=described["ComputeQuotaId"],
            TargetVersion=described["ComputeQuotaVersion"],
            ComputeQuotaConfig={**described.get("ComputeQuotaConfig", {}), "ComputeQuotaResources": wanted},
        )

    return [
        converge(
            label=label(INSTANCE_GROUP, cluster, team),
            key=f"compute-quota#{cluster}/{team}",
            declared=resources(declared),
            wanted=resources(wanted),
            read=reader(cluster, team),
            write=write,
            ledger=ledger,
            now=now,
        )
        for (cluster, team), (declared, wanted) in sorted(desired.items())
    ]
