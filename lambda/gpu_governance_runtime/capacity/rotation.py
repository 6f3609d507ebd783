"""Keep each launch-template consumer where its window's phase wants it: on the window's block
while one is active, off it from the block's expiration warning on.

A reconciliation, not an event reaction: every run (scheduled or sooner, after a Capacity Block
event) reads what the consumer actually launches from and moves it one step toward the wanted
state; a step AWS refuses, or one left half-done, is found again by the next run and reported as
an error (the ``ConsumerErrors`` metric and its alarm) until the consumer is where it should be.

- ``batch_compute_environment``: running work is never moved. The window's *block* compute
  environment (a second one, launching from ``launch_template_name``) is put ahead of the
  on-demand one in the job queue while a block is active, and behind it, DISABLED, otherwise.
  Batch places each job on the first compute environment in the queue's order that can take it
  (https://docs.aws.amazon.com/batch/latest/APIReference/API_ComputeEnvironmentOrder.html) and a
  queue's order changes without touching a running job, so only jobs not yet placed go to the
  block. The block compute environment's launch template is changed (an infrastructure update,
  https://docs.aws.amazon.com/batch/latest/userguide/updating-compute-environments.html) only
  while it is DISABLED and out of first place, with no job of the block's on it; its size
  (``maxvCpus``) alone is a scaling update, which replaces no instance
  (https://docs.aws.amazon.com/batch/latest/userguide/scaling-updates.html). The on-demand
  compute environment is never updated.
- ``eks_node_group``: the node group must have been created with ``capacityType``
  ``CAPACITY_BLOCK`` (it cannot change later; the EKS Capacity Blocks guide,
  https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html); a node group that
  is not is reported, never silently re-templated. At the block's start the version is moved (at
  size 0, as the guide asks for any update of such a group) and the group is scaled up to the
  block's count; from ``DRAIN_LEAD`` (45 minutes) before the end, more than the 30 the guide
  asks, it is scaled to zero, and EKS drains each node before its instance terminates
  (https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html).

A version differing from the one this controller last set, with a launch target the phase does
not want, was made by someone else: it is reported (``changed_by_someone_else``) and then moved,
never taken as done. In dry run nothing changes: the result says what would have been done.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..contract import CAPACITY_EVENT_SOURCE
from ..planners import market
from ..planners.offers import Reservation
from ..planners.window import Window
from ..request_shapes import conform
from .block_jobs import ON_AN_INSTANCE, jobs_on
from .consumers import subnet_zones
from .ledger import Ledger

DRAIN_EVENT_SOURCE = CAPACITY_EVENT_SOURCE
DRAIN_EVENT_TYPE = "Capacity Window Draining"
ACTION_PREFIX = "rotation#"
KINDS = ("batch_compute_environment", "eks_node_group")  # the consumers that launch from a launch template
ON_DEMAND = (None, None)

# From this long before a block's end the phase is "draining": instances end 30 minutes before it
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html), and a
# scheduled run every 15 minutes (the controller's default) always falls in the 15 minutes
# between, even when the expiration warning's event (40 minutes before) is lost.
DRAIN_LEAD = market.TERMINATION_LEAD + timedelta(minutes=15)
# From this long before a block starts its consumer is made ready to launch into it (the Batch block compute
# environment's launch template, DISABLED; the node group's version, at size 0), so the first job starts when the block
# does [aws: ec2-cb.launch-template-before-start]. Batch's infrastructure update takes "much longer than a scaling
# update" (no figure on any page): an hour leaves it, and a run that fails, room.
PREPARE_LEAD = timedelta(hours=1)

Transform = Callable[[dict[str, Any]], dict[str, Any]]
Target = tuple[str | None, str | None]  # (market type, reservation id) a launch template launches into


def into_block(reservation_id: str) -> Transform:
    def launch_data(data: dict[str, Any]) -> dict[str, Any]:
        return {
            **data,
            "InstanceMarketOptions": {"MarketType": "capacity-block"},
            "CapacityReservationSpecification": {
                "CapacityReservationTarget": {"CapacityReservationId": reservation_id}
            },
        }

    return launch_data


def active_block(
    window: Window, owned: Iterable[Reservation], now: datetime, sharing: frozenset[str] = frozenset()
) -> Reservation | None:
    """The window's block new work should launch into now: started, and not yet draining
    (``DRAIN_LEAD`` before its end)."""
    live = [
        r
        for r in owned
        if (r.window == window.name or r.window in sharing)
        and r.state in ("scheduled", "active")
        and r.start <= now < r.end - DRAIN_LEAD
    ]
    return max(live, key=lambda r: r.start, default=None)


def upcoming_block(
    window: Window, owned: Iterable[Reservation], now: datetime, sharing: frozenset[str] = frozenset()
) -> Reservation | None:
    """The window's next block when it starts within ``PREPARE_LEAD``: its consumer is made ready for it."""
    soon = [
        r
        for r in owned
        if (r.window == window.name or r.window in sharing)
        and r.state in ("payment-pending", "scheduled", "active")
        and now < r.start <= now + PREPARE_LEAD
    ]
    return min(soon, key=lambda r: r.start, default=None)


def wanted_target(window: Window, owned: Iterable[Reservation], current: Target, now: datetime) -> Target:
    """The launch target the phase wants: the active block, else the block about to start; with neither, what the
    consumer has. Never on demand, whatever ``fallback`` says: a ``CAPACITY_BLOCK`` node group's launch template must
    carry the capacity-block options [aws: eks.capacity-block-template-required], so a version without them would be
    refused or strand the group; it waits at size 0 for the next block, and the Batch block compute environment waits
    DISABLED behind the on-demand one."""
    block = active_block(window, owned, now) or upcoming_block(window, owned, now)
    return ("capacity-block", block.id) if block is not None else current


def by_consumer(windows: Iterable[Window]) -> list[tuple[Window, frozenset[str]]]:
    """One window per launch-template consumer (the declared one: requests drawing on it are named
    after it and longer), with the names of the other windows feeding that consumer."""
    groups: dict[str, list[Window]] = {}
    for window in windows:
        if window.consumer.get("kind") in KINDS:
            groups.setdefault(json.dumps(window.consumer, sort_keys=True), []).append(window)
    return [
        (first, frozenset(w.name for w in rest))
        for first, *rest in (sorted(g, key=lambda w: (len(w.name), w.name)) for g in groups.values())
    ]


def reconcile(
    *,
    window: Window,
    owned: Iterable[Reservation],
    dry_run: bool,
    ec2: Any,
    batch: Any,
    eks: Any,
    ledger: Ledger,
    now: datetime,
    sharing: frozenset[str] = frozenset(),
    ecs: Any = None,
    closing: bool = False,
) -> dict[str, Any]:
    """One step toward the wanted state for the window's consumer; what was found and done. A
    consumer whose window holds no block, now or before, and that this controller never moved is
    not read: nothing of the window's is in it. ``ecs`` tells which jobs run on a Batch compute environment
    (``block_jobs``); a Batch consumer needs it. ``closing``: the active block takes no new job now (``fill.py``)."""
    # The blocks of the windows feeding the same consumer (requests drawing on a declared window) count as the window's own:
    # two reconciliations of one consumer, each seeing only its own blocks, would undo each other every run.
    owned = [replace(r, window=window.name) if r.window in sharing else r for r in owned]
    consumer = window.consumer
    result: dict[str, Any] = {"window": window.name, "consumer": consumer["kind"]}
    if not any(r.window == window.name for r in owned) and _last_set(ledger, window) is None:
        return {**result, "state": "no block of the window yet"}
    try:
        if consumer["kind"] == "batch_compute_environment":
            return {**result, **_batch(window, owned, dry_run, ec2, batch, ecs, ledger, now, closing)}
        return {**result, **_node_group(window, owned, dry_run, ec2, eks, ledger, now)}
    except ConsumerRefused as error:  # set up so the step cannot work: reported every run until someone fixes it
        return {**result, "error": str(error), "retry": "next run"}
    except (ClientError, BotoCoreError) as error:  # refused (busy, throttled): the next run tries again
        code = (
            error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else type(error).__name__
        )
        return {**result, "error": f"{code}: {error}", "retry": "next run"}


def _batch(window, owned, dry_run, ec2, batch, ecs, ledger, now, closing=False) -> dict[str, Any]:
    """Step the block compute environment toward the phase until it is there, or a step must wait
    (an infrastructure update under way) or fails; each step is recorded before and after."""
    did: list[str] = []
    drift: dict[str, Any] = {}
    for _ in range(len(BATCH_STEPS) + 1):
        found, step = _batch_step(window, owned, ec2, batch, ecs, ledger, now, closing)
        drift = drift or {
            k: v for k, v in found.items() if k == "changed_by_someone_else"
        }  # as first read, before undoing it
        found = {**{k: v for k, v in found.items() if k != "recorded"}, **drift}
        recorded = _found_state(found)
        if did:  # what this controller's steps left, read back: a later difference is someone else's
            _record(ledger, window, "done", recorded, now)
        if step is None or isinstance(step, str):
            state = "in place" if step is None else step
            return {**found, "state": state if not did else f"moved; {state}", **({"did": did} if did else {})}
        description, act = step
        if dry_run:
            return {**found, "dry_run": True, "would": description}
        _record(ledger, window, "moving", {**recorded, "step": description}, now)
        act()
        did.append(description)
    return {**found, "state": "moving", "did": did}


def _found_state(found: dict[str, Any]) -> dict[str, Any]:
    """What the ledger keeps of a read: enough to tell a later change by someone else."""
    return {k: found[k] for k in ("version", "launches_into", "first_in_queue", "enabled")}


# The steps a run may take on a block compute environment (each at most once a run; "scale it to N vCPUs" is the
# scaling update a block of another size needs): a block's start takes them in this order, its end the first two and the last.
BATCH_STEPS = (
    "take the block compute environment out of first place",
    "disable it",
    "launch it into the block",
    "enable it",
    "put it first in the job queue",
    "scale it to 0",
    "close it: a waiting job would not finish before its instances end",
)


def _move_onto_block(window, environment, target, wanted, version, size, ec2, batch, ecs, update):
    """The step that moves the block compute environment's launch template onto ``target``: a reason to wait,
    or (description, action); ConsumerRefused when it cannot be moved."""
    consumer = window.consumer
    block_ce, resources = consumer["block_compute_environment"], environment.get("computeResources", {})
    if environment.get("status") == "UPDATING":
        return "waiting: the block compute environment is UPDATING"
    problems = _block_problems(resources, window, target, ec2)
    if problems:
        raise ConsumerRefused(
            f"block compute environment {block_ce} cannot be moved onto {target.id}: {'; '.join(problems)}; nothing moved"
        )
    # An infrastructure update replaces the environment's instances after jobExecutionTimeoutMinutes
    # [aws: batch-ce.infrastructure-update-grace]: only with no job on it, or it would end that job. A job of the
    # block before ends with that block's instances [aws: batch-ce.jobs-fail-with-block-instances].
    still_on = jobs_on(compute_environment=block_ce, batch=batch, ecs=ecs, statuses=ON_AN_INSTANCE)
    if still_on:
        return f"waiting: {len(still_on)} job(s) still on the block compute environment"

    def launch_into_block() -> None:
        # New instances launch from the new version, into the block [aws: batch-ce.infrastructure-update-into-block].
        created = _create_version(ec2, consumer["launch_template_name"], version, wanted)
        # An infrastructure update of an environment that is DISABLED, behind the on-demand one and has no job.
        update(
            computeResources={
                "launchTemplate": {"launchTemplateName": consumer["launch_template_name"], "version": str(created)},
                "minvCpus": 0,
                "maxvCpus": size,
            },
            updatePolicy={"terminateJobsOnUpdate": False, "jobExecutionTimeoutMinutes": 30},
        )

    return (f"{BATCH_STEPS[2]} {target.id} ({size} vCPUs)", launch_into_block)


def _batch_step(window, owned, ec2, batch, ecs, ledger, now, closing=False):
    """What the block compute environment shows, and the next step toward the phase: None when in
    place, a reason to wait, or (description, action)."""
    consumer = window.consumer
    block_ce, queue_arn = consumer["block_compute_environment"], consumer["job_queue"]
    (environment,) = batch.describe_compute_environments(computeEnvironments=[block_ce])["computeEnvironments"]
    (queue,) = batch.describe_job_queues(jobQueues=[queue_arn])["jobQueues"]
    resources = environment.get("computeResources", {})
    version = _version(
        ec2, consumer["launch_template_name"], resources.get("launchTemplate", {}).get("version", "$Default")
    )
    current = _launch_target(version["LaunchTemplateData"])
    order = sorted(queue.get("computeEnvironmentOrder", []), key=lambda o: o["order"])
    first = bool(order) and order[0]["computeEnvironment"] == block_ce
    enabled = environment.get("state") == "ENABLED"
    block = active_block(window, owned, now)
    upcoming = None if block is not None else upcoming_block(window, owned, now)
    # The block it should launch into: the active one, or the next, made ready before it starts.
    target = block or upcoming
    wanted = ("capacity-block", target.id) if target is not None else current
    # The block's vCPUs. BEST_FIT_PROGRESSIVE may run one instance past maxvCpus [aws: batch-ce.max-vcpus-overshoot]; from
    # a launch template into the block that launch finds no capacity and fails, never on demand
    # [aws: ec2-cb.launch-beyond-block-fails].
    size = target.count * _vcpus(ec2, window.instance_type) if target is not None else 0
    found = {
        "version": version["VersionNumber"],
        "launches_into": _named(current),
        "wants": f"{_named(wanted)}, first in the job queue" + (", closing" if closing else "")
        if block is not None
        else f"{_named(wanted)} from its start at {upcoming.start:%H:%M} UTC, DISABLED until then"
        if upcoming is not None
        else "behind the on-demand compute environment, DISABLED",
        "first_in_queue": first,
        "enabled": enabled,
        "max_vcpus": resources.get("maxvCpus"),
        "wanted_max_vcpus": size,
        **_batch_drift(ledger, window, version["VersionNumber"], current, first, enabled, block is not None),
    }
    update = lambda **change: batch.update_compute_environment(computeEnvironment=block_ce, **change)
    if current != wanted or block is None:
        if first:  # never change the launch template of an environment that may be given jobs
            return found, (BATCH_STEPS[0], lambda: _order(batch, queue_arn, order, block_ce, first=False))
        if enabled:
            return found, (BATCH_STEPS[1], lambda: update(state="DISABLED"))
    if current != wanted:
        return found, _move_onto_block(window, environment, target, wanted, version, size, ec2, batch, ecs, update)
    if block is None:
        if upcoming is None and resources.get("maxvCpus", 0) != 0 and not _instances_live(window, owned, now):
            return found, (BATCH_STEPS[5], lambda: update(computeResources={"minvCpus": 0, "maxvCpus": 0}))
        return found, None
    if environment.get("status") != "VALID":  # only a VALID environment may be ordered into a queue (UpdateJobQueue)
        return found, f"waiting: the block compute environment is {environment.get('status')}"
    if (
        resources.get("maxvCpus") != size
    ):  # a scaling update alone (https://docs.aws.amazon.com/batch/latest/userguide/scaling-updates.html)
        return found, (f"scale it to {size} vCPUs", lambda: update(computeResources={"maxvCpus": size}))
    # Closing: a DISABLED environment gets no new job; its running jobs go on [aws: batch.compute-environment-disabled].
    if closing and enabled:
        return found, (BATCH_STEPS[6], lambda: update(state="DISABLED"))
    if not enabled and not closing:
        return found, (BATCH_STEPS[3], lambda: update(state="ENABLED"))
    if not first:
        return found, (BATCH_STEPS[4], lambda: _order(batch, queue_arn, order, block_ce, first=True))
    return found, None


# An infrastructure update (the launch template's change onto each block) "requires that the service role is set to
# AWSServiceRoleForBatch (the default) and that the allocation strategy is BEST_FIT_PROGRESSIVE or
# SPOT_CAPACITY_OPTIMIZED. BEST_FIT isn't supported" [aws: batch-ce.infrastructure-update-strategy]. The block compute
# environment is an EC2 (on-demand) one: of those, BEST_FIT_PROGRESSIVE.
INFRASTRUCTURE_UPDATE_STRATEGIES = ("BEST_FIT_PROGRESSIVE", "SPOT_CAPACITY_OPTIMIZED", "SPOT_PRICE_CAPACITY_OPTIMIZED")
SERVICE_LINKED_ROLE = "/aws-service-role/batch.amazonaws.com/AWSServiceRoleForBatch"


class ConsumerRefused(Exception):
    """The consumer is set up so that the step would not do what the window needs: reported, nothing moved."""


def _block_problems(resources: Mapping[str, Any], window: Window, block: Reservation, ec2: Any) -> list[str]:
    """Why the block compute environment cannot be moved onto ``block`` by an infrastructure update, each as
    ``field: what is wrong (value) - what is allowed``; empty when it can."""
    problems = []
    strategy = resources.get("allocationStrategy", "BEST_FIT")  # Batch's default when the field is absent
    if strategy not in INFRASTRUCTURE_UPDATE_STRATEGIES:
        problems.append(
            f"allocationStrategy: infrastructure updates are not supported ({strategy}) - BEST_FIT_PROGRESSIVE"
        )
    role = resources.get("serviceRole") or ""
    if role and not role.endswith(SERVICE_LINKED_ROLE):
        problems.append(
            f"serviceRole: infrastructure updates need the service-linked role ({role}) - AWSServiceRoleForBatch"
        )
    if resources.get("type", "EC2") != "EC2":
        problems.append(f"type: Capacity Blocks are for EC2 compute environments ({resources.get('type')}) - EC2")
    # [aws: batch-ce.capacity-block-launch-template]: the launch template names one instance type's block; another type
    # Batch picks could not launch into it.
    if list(resources.get("instanceTypes") or []) != [window.instance_type]:
        problems.append(
            f"instanceTypes: Batch may choose a type the block does not hold ({resources.get('instanceTypes')}) - "
            f"['{window.instance_type}']"
        )
    zones = subnet_zones(ec2, resources.get("subnets") or [])
    if block.availability_zone not in zones:  # [aws: batch-ce.subnet-in-block-zone]
        problems.append(
            f"subnets: none in the block's zone {block.availability_zone} (subnets in {', '.join(sorted(zones)) or 'no zone'}) - "
            f"a subnet in {block.availability_zone}"
        )
    return problems


def _order(batch, queue_arn: str, order: list[dict[str, Any]], block_ce: str, *, first: bool) -> None:
    """The queue's order with the block compute environment first, or last; the others keep their
    relative order. Only where jobs not yet placed go changes (UpdateJobQueue,
    https://docs.aws.amazon.com/batch/latest/APIReference/API_UpdateJobQueue.html)."""
    others = [o["computeEnvironment"] for o in order if o["computeEnvironment"] != block_ce]
    environments = [block_ce, *others] if first else [*others, block_ce]
    batch.update_job_queue(
        jobQueue=queue_arn,
        computeEnvironmentOrder=[{"order": i + 1, "computeEnvironment": e} for i, e in enumerate(environments)],
    )


def _instances_live(window: Window, owned: Iterable[Reservation], now: datetime) -> bool:
    """A block of the window whose instances may still run (until 30 minutes before its end)."""
    return any(r.window == window.name and r.start <= now < r.end - market.TERMINATION_LEAD for r in owned)


def _vcpus(ec2: Any, instance_type: str) -> int:
    return ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]["VCpuInfo"]["DefaultVCpus"]


def _batch_drift(
    ledger: Ledger, window: Window, version: int, current: Target, first: bool, enabled: bool, active: bool
) -> dict[str, Any]:
    """What someone else changed since this controller's last step, where the phase does not want it."""
    recorded = _last_set(ledger, window)
    if recorded is None:
        return {}
    changes = []
    if recorded.get("version") != version and active and current[0] != "capacity-block":
        changes.append(
            f"the block compute environment launches from version {version} (into {_named(current)}), not version "
            f"{recorded.get('version')} this controller set"
        )
    if recorded.get("first_in_queue") is not None and recorded["first_in_queue"] != first and first != active:
        changes.append(
            f"the block compute environment was {'put first in' if first else 'taken out of first place in'} the job queue"
        )
    if recorded.get("enabled") is not None and recorded["enabled"] != enabled and enabled != active:
        changes.append(f"the block compute environment was {'enabled' if enabled else 'disabled'}")
    return {"changed_by_someone_else": "; ".join(changes)} if changes else {}


def _node_group(window, owned, dry_run, ec2, eks, ledger, now) -> dict[str, Any]:
    consumer = window.consumer
    group = eks.describe_nodegroup(clusterName=consumer["cluster_name"], nodegroupName=consumer["nodegroup_name"])[
        "nodegroup"
    ]
    if group.get("capacityType") != "CAPACITY_BLOCK":
        return {
            "error": f"node group {consumer['nodegroup_name']} has capacityType {group.get('capacityType')}; a Capacity Block needs "
            "a node group created with CAPACITY_BLOCK (it cannot change later): nothing moved"
        }
    if group.get("status") not in ("ACTIVE", "DEGRADED"):
        return {"state": f"node group {group.get('status')}", "retry": "next run"}  # an update is in progress
    version = _version(
        ec2, consumer["launch_template_name"], group.get("launchTemplate", {}).get("version", "$Default")
    )
    current = _launch_target(version["LaunchTemplateData"])
    block = active_block(window, owned, now)
    wanted = wanted_target(window, owned, current, now)
    size = group.get("scalingConfig", {})
    wanted_size = min(block.count, size.get("maxSize", block.count)) if block is not None else 0
    found = {
        "version": version["VersionNumber"],
        "launches_into": _named(current),
        "wants": _named(wanted),
        "desired_size": size.get("desiredSize"),
        "wanted_size": wanted_size,
        **_drift(ledger, window, version["VersionNumber"], current, wanted),
    }
    if wanted_size == 0 and size.get("desiredSize", 0) > 0:
        step = ("scale to 0 (EKS drains each node first)", lambda: _scale(eks, consumer, 0))
    elif current != wanted and size.get("desiredSize", 0) == 0:
        step = (
            f"make a launch template version into {_named(wanted)} and move the node group to it",
            lambda: _move_node_group(ec2, eks, consumer, version, wanted, window, ledger, now),
        )
    elif current != wanted:
        step = (
            "scale to 0 before moving the node group (EKS asks size 0 for updates)",
            lambda: _scale(eks, consumer, 0),
        )
    elif size.get("desiredSize", 0) != wanted_size:
        step = (f"scale to {wanted_size}", lambda: _scale(eks, consumer, wanted_size))
    else:
        return {**found, "state": "in place"}
    if dry_run:
        return {**found, "dry_run": True, "would": step[0]}
    step[1]()
    return {**found, "state": "moving", "did": step[0]}


def _scale(eks, consumer, size: int) -> None:
    eks.update_nodegroup_config(
        clusterName=consumer["cluster_name"],
        nodegroupName=consumer["nodegroup_name"],
        scalingConfig={"desiredSize": size, **({"minSize": 0} if size == 0 else {})},
    )


def _move_node_group(ec2, eks, consumer, version, wanted, window, ledger, now) -> None:
    created = _create_version(ec2, consumer["launch_template_name"], version, wanted)
    moved = {"version": created, "launches_into": _named(wanted)}
    _record(ledger, window, "moving", moved, now)
    eks.update_nodegroup_version(
        clusterName=consumer["cluster_name"],
        nodegroupName=consumer["nodegroup_name"],
        launchTemplate={"name": consumer["launch_template_name"], "version": str(created)},
    )
    _record(ledger, window, "done", moved, now)


def announce_drain(
    *, window: str, reservation_id: str, ends_at: datetime, moved_to: str | None, events: Any
) -> dict[str, Any]:
    """Tell the jobs on an ending block to checkpoint (the expiration warning's event)."""
    detail = {
        "window": window,
        "capacity_reservation_id": reservation_id,
        "ends_at": ends_at.isoformat(),
        "moved_to": moved_to,
    }
    events.put_events(
        Entries=[{"Source": DRAIN_EVENT_SOURCE, "DetailType": DRAIN_EVENT_TYPE, "Detail": json.dumps(detail)}]
    )
    return detail


def _version(ec2: Any, template: str, version: str) -> dict[str, Any]:
    return ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=[str(version)])[
        "LaunchTemplateVersions"
    ][0]


def _create_version(ec2: Any, template: str, base: Mapping[str, Any], wanted: Target) -> int:
    """A new version: ``base``'s data as described, conformed to the request shape (the description
    has output-only members such as ``MetadataOptions.State`` that the create call refuses), with
    the wanted launch target."""
    request_shape = ec2.meta.service_model.operation_model("CreateLaunchTemplateVersion").input_shape.members[
        "LaunchTemplateData"
    ]
    return ec2.create_launch_template_version(
        LaunchTemplateName=template,
        LaunchTemplateData=into_block(wanted[1])(conform(base["LaunchTemplateData"], request_shape)),
        VersionDescription=f"gpu-governance: into {_named(wanted)}"[:255],
    )["LaunchTemplateVersion"]["VersionNumber"]


def _record(ledger: Ledger, window: Window, status: str, details: dict[str, Any], now: datetime) -> None:
    ledger.record_action(ACTION_PREFIX + window.name, status=status, details=details, now=now)


def _drift(ledger: Ledger, window: Window, version: int, current: Target, wanted: Target) -> dict[str, Any]:
    """Report a version this controller did not set whose target the phase does not want."""
    recorded = _last_set(ledger, window)
    if recorded is None or recorded["version"] == version or current == wanted:
        return {}
    return {
        "changed_by_someone_else": f"version {version} (launching into {_named(current)}) replaced version {recorded['version']} "
        "this controller set"
    }


def _last_set(ledger: Ledger, window: Window) -> dict[str, Any] | None:
    key = ACTION_PREFIX + window.name
    return next((details for action, _, details in ledger.actions(key, ("moving", "done")) if action == key), None)


def _named(target: Target) -> str:
    return (
        "on demand"
        if target == ON_DEMAND
        else f"Capacity Block {target[1]}"
        if target[0] == "capacity-block"
        else f"{target}"
    )


def _launch_target(data: Mapping[str, Any]) -> Target:
    market_type = data.get("InstanceMarketOptions", {}).get("MarketType")
    target = (
        data.get("CapacityReservationSpecification", {})
        .get("CapacityReservationTarget", {})
        .get("CapacityReservationId")
    )
    return (market_type, target) if market_type == "capacity-block" else ON_DEMAND
