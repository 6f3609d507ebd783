"""Lambda entry point of the capacity controller (reserved concurrency 1: runs never overlap
within one controller; the ledger guards against everything else).

Scheduled events run the controller. ``aws.ec2`` events whose detail-type starts with
``Capacity Block`` (the documented names differ between versions) rotate the consumer onto a
delivered block or drain it at the expiration warning (requeueing the Batch jobs on it), then
run the controller too. Every run first finishes requeues an earlier run left open and, after
buying, points HyperPod instance groups at their window's active training plan, raises or lowers
the owners' quotas, publishes the raises for the reclaim controller and closes ended requests.
``Capacity Request`` events and ``CloudWatch Alarm State Change`` events to ALARM of an alarm a
window declares record an on-demand window first; a ``CloudFormation Stack Status Change`` of a
stack holding a raised quota (the rule matches those stacks only) is a plain run that puts the
raise the update reset back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3

from .. import api_check
from ..backends import backend_of
from ..common import log, metrics
from ..common.clients import CAPACITY_READS, COST_EXPLORER, SUBMIT_ONCE
from ..common.handler import Environment, EventKind, recognise, time_left as time_left_of
from ..contract import (
    ALARM_EVENT_SOURCE,
    ALARM_STATE_CHANGE_DETAIL_TYPE,
    CAPACITY_EVENT_SOURCE,
    CAPACITY_NAMESPACE,
    CAPACITY_REQUEST_DETAIL_TYPE,
    ENV_BUDGET,
    ENV_CONTROLLER_ID,
    ENV_LEDGER_TABLE,
    ENV_PRICE_CAP,
    ENV_RAISED_GUARANTEES,
    ENV_RAISED_GUARANTEES_KEY,
    ENV_SLURM_HEAD_NODES,
    ENV_TEAM_SPEND,
    ENV_TICK_SECONDS,
    ENV_TOPIC_ARN,
    STACK_EVENT_SOURCE,
)
from ..planners.kinds import KINDS
from ..planners.offers import reservation_from_api
from ..planners.window import Window
from ..policy import Policy, PolicyError, policy_path, read_policy_file
from . import (
    chargeback,
    consumer_steps,
    controller,
    delivery,
    raised,
    requests,
    requeue,
    rotation,
    shares,
    slurm_window,
    spend,
)
from .aws import PURCHASE_CLIENT_CONFIG, TAG_WINDOW, CapacityMarket, described_reservation
from .ledger import Ledger

METRIC_NAMESPACE = CAPACITY_NAMESPACE
# The events a run acts on beyond its schedule: one row each, matched in order (``recognise``).
REQUEST, ALARM, STACK_UPDATE, BLOCK, SCHEDULED = "request", "alarm", "stack_update", "block", "scheduled"
EVENTS = (
    EventKind(REQUEST, CAPACITY_EVENT_SOURCE, CAPACITY_REQUEST_DETAIL_TYPE),
    EventKind(ALARM, ALARM_EVENT_SOURCE, ALARM_STATE_CHANGE_DETAIL_TYPE),
    EventKind(STACK_UPDATE, STACK_EVENT_SOURCE),  # the rule matches only the stacks that hold a raised quota
    EventKind(BLOCK, "aws.ec2", "Capacity Block", prefix=True),  # the documented names differ between versions
    EventKind(SCHEDULED, *chargeback.SCHEDULED),
)
# Checked against the runtime's boto3 at cold start (api_check); a test keeps it equal to the calls in the code:
# the run's own, and those of every kind of capacity (``CapacityKind.operations``).
OWN_OPERATIONS = {
    "ec2": (
        "CreateLaunchTemplateVersion",
        "DescribeCapacityReservations",
        "DescribeInstanceTypes",
        "DescribeInstances",
        "DescribeLaunchTemplateVersions",
        "DescribeSubnets",
    ),
    "sagemaker": (
        "DescribeCluster",
        "DescribeClusterNode",
        "DescribeComputeQuota",
        "DescribeTrainingPlan",
        "ListClusterNodes",
        "ListComputeQuotas",
        "UpdateCluster",
        "UpdateComputeQuota",
    ),
    "dynamodb": ("GetItem", "PutItem", "Scan", "TransactWriteItems", "UpdateItem"),
    "batch": (
        "DescribeComputeEnvironments",
        "DescribeJobQueues",
        "DescribeJobs",
        "DescribeQuotaShare",
        "DescribeServiceEnvironments",
        "ListJobs",
        "ListQuotaShares",
        "SubmitJob",
        "TerminateJob",
        "UpdateComputeEnvironment",
        "UpdateJobQueue",
        "UpdateQuotaShare",
        "UpdateServiceEnvironment",
    ),
    "sns": ("Publish",),
    "events": ("PutEvents",),
    "eks": ("DescribeNodegroup", "UpdateNodegroupConfig", "UpdateNodegroupVersion"),
    "ecs": ("ListContainerInstances",),
    "ssm": ("CancelCommand", "GetCommandInvocation", "GetParameter", "PutParameter", "SendCommand"),
    "ce": ("GetCostAndUsage",),
}
REQUIRED_OPERATIONS = {
    service: tuple(sorted({*own, *(op for kind in KINDS.values() for op in kind.operations.get(service, ()))}))
    for service, own in {**{s: () for kind in KINDS.values() for s in kind.operations}, **OWN_OPERATIONS}.items()
}


@dataclass(frozen=True, kw_only=True)
class Clients:
    ec2: Any
    sagemaker: Any
    purchase_ec2: Any  # built with PURCHASE_CLIENT_CONFIG: never resends a purchase
    purchase_sagemaker: Any
    dynamodb: Any
    sns: Any
    events: Any
    batch: Any
    eks: Any
    ecs: Any
    ssm: (
        Any  # publishes each team's active training plans (delivery.py); commands on Slurm head nodes (slurm_window.py)
    )
    submit_batch: Any  # built with SUBMIT_ONCE: a requeued job's copy is never sent twice (requeue.py)
    ce: Any = None  # Cost Explorer (spend.py): its partition's global endpoint, whatever the function's region


def _clients() -> Clients | None:
    if "AWS_LAMBDA_FUNCTION_NAME" not in os.environ:
        return None  # imported by tests or the CLI: they bring their own clients
    clients = Clients(
        ec2=boto3.client("ec2", config=CAPACITY_READS),
        sagemaker=boto3.client("sagemaker", config=CAPACITY_READS),
        purchase_ec2=boto3.client("ec2", config=PURCHASE_CLIENT_CONFIG),
        purchase_sagemaker=boto3.client("sagemaker", config=PURCHASE_CLIENT_CONFIG),
        **{
            service: boto3.client(service, config=CAPACITY_READS)
            for service in ("dynamodb", "sns", "events", "batch", "eks", "ecs", "ssm")
        },
        ce=boto3.client("ce", config=COST_EXPLORER),
        submit_batch=boto3.client("batch", config=SUBMIT_ONCE),
    )
    api_check.require(
        {service: getattr(clients, service) for service in REQUIRED_OPERATIONS},
        REQUIRED_OPERATIONS,
        namespace=METRIC_NAMESPACE,
    )
    return clients


CLIENTS = _clients()  # module level: reused by warm invocations


@dataclass(frozen=True, kw_only=True)
class PurchaseLimits:
    """The policy and the function's own budget and price cap: two declarations of the limits
    that must agree before anything is bought (``load_windows``)."""

    policy_path: Path
    budget: Decimal
    price_cap: Decimal

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> PurchaseLimits:
        read = Environment(environ)
        return cls(
            policy_path=policy_path(environ), budget=read.amount(ENV_BUDGET), price_cap=read.amount(ENV_PRICE_CAP)
        )


@dataclass(frozen=True, kw_only=True)
class CapacitySettings:
    """The function's environment, read once per run."""

    limits: PurchaseLimits
    controller_id: str
    ledger_table: str
    topic_arn: str
    tick_seconds: float  # the schedule's interval: what one scheduled run's utilisation covers
    slurm_head_nodes: Mapping[str, str]  # hyperpod_slurm pool -> its head node's SSM target
    raised_guarantees: str | None  # the parameter the reclaim controller reads the raises from (raised.py)
    raised_guarantees_key: str | None  # the key it is encrypted with; set whenever the parameter is
    team_spend: bool  # a team declares a monthly budget: read the day's spend (spend.py)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> CapacitySettings:
        read = Environment(environ)
        raised_guarantees = read.text(ENV_RAISED_GUARANTEES, None)
        return cls(
            limits=PurchaseLimits.from_environ(environ),
            controller_id=read.text(ENV_CONTROLLER_ID),
            ledger_table=read.text(ENV_LEDGER_TABLE, allowed="the DynamoDB table of purchases"),
            topic_arn=read.text(ENV_TOPIC_ARN, allowed="the SNS topic ARN"),
            tick_seconds=read.number(ENV_TICK_SECONDS, above=True),
            slurm_head_nodes=read.json(ENV_SLURM_HEAD_NODES, dict, {}),
            raised_guarantees=raised_guarantees,
            raised_guarantees_key=read.text(
                ENV_RAISED_GUARANTEES_KEY, allowed=f"the KMS key of {ENV_RAISED_GUARANTEES}"
            )
            if raised_guarantees
            else None,
            team_spend=read.text(ENV_TEAM_SPEND, None) is not None,
        )


def handle(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return process(
        event,
        clients=CLIENTS,
        settings=os.environ,
        now=datetime.now(UTC),
        clock=lambda: datetime.now(UTC),
        time_left=time_left_of(context),
    )


def process(
    raw_event: Mapping[str, Any],
    *,
    clients: Clients,
    settings: Mapping[str, str],
    now: datetime,
    clock=None,
    time_left=None,
) -> dict[str, Any]:
    """One run. ``settings``: the function's environment (``CapacitySettings``)."""
    environment = CapacitySettings.from_environ(settings)
    event = recognise(raw_event, EVENTS)
    policy = read_policy_file(environment.limits.policy_path)
    windows = windows_within(policy, environment.limits)
    capacity = CapacityMarket(
        ec2=clients.ec2,
        sagemaker=clients.sagemaker,
        controller_id=environment.controller_id,
        purchase_ec2=clients.purchase_ec2,
        purchase_sagemaker=clients.purchase_sagemaker,
        batch=clients.batch,
        eks=clients.eks,
    )
    ledger = Ledger(client=clients.dynamodb, table_name=environment.ledger_table)
    notify = _notifier(clients.sns, environment.topic_arn)
    # Before the event: only requeues of earlier runs (reserved concurrency 1: none is live).
    time_left = time_left or (lambda: float("inf"))
    result: dict[str, Any] = {
        "resumed_requeues": requeue.resume(
            ledger=ledger, batch=clients.batch, submit=clients.submit_batch, now=now, time_left=time_left
        )
    }
    if event.kind == REQUEST:
        result["request"] = _on_request(event.raw, windows, ledger, notify, now, requests.from_event)
    if event.kind == ALARM:
        result["alarm_request"] = _on_request(
            event.raw, windows, ledger, notify, now, lambda e: requests.from_alarm(e, windows.values())
        )
    if event.kind == STACK_UPDATE:  # an update put a declared quota back: this run raises it again
        result["stack_update"] = (event.detail or {}).get("stack-id")
    requested = requests.requested_windows(ledger, windows)  # on-demand windows, within their declared window's limits
    windows = {**windows, **requested}
    if event.kind == BLOCK:
        result["block_event"] = _on_block_event(event.raw, windows, capacity, clients, ledger, now, time_left)
    report = controller.run(
        windows=windows.values(),
        ledger=ledger,
        capacity=capacity,
        notify=notify,
        now=now,
        clock=clock,
        time_left=time_left,
    )
    handled = result.get("block_event", {}).get("capacity_reservation_id")
    result.update(consumer_steps.run(windows, report.owned, clients, ledger, notify, now, time_left, handled=handled))
    result["training_plans"] = delivery.publish(
        windows=windows, owned=report.owned, ssm=clients.ssm, organisation=policy.organisation
    )
    raising = _raising(policy)
    result.update(_raise_quotas(windows, report.owned, raising, policy, environment, clients, ledger, now, time_left))
    result["closed_requests"] = requests.close_ended(
        ledger, requested, owned=report.owned, now=now, unsettled=_unsettled(requested, result, raising, now)
    )
    if event.kind == SCHEDULED:  # only scheduled runs count instance-hours (chargeback.py says why)
        result.update(
            _scheduled_reports(result, report.owned, windows, environment, policy, clients, ledger, now, time_left)
        )
    spent = {name: ledger.spent(window, now) for name, window in windows.items()}
    _emit_metrics(report, windows, spent)
    _metric({}, ConsumerErrors=(len(_consumer_errors(result)), "Count"))
    result["run"] = _run_summary(report)
    log.info("capacity controller run", **result)
    return result


def _raising(policy: Policy) -> dict[str, dict[str, Any]]:
    """By the kind of window consumer whose purchase raises the pools' quotas, the pools it raises them in."""
    return {
        kind: {p.name: p for p in policy.pools if backend_of(p).quota_raised_by == kind}
        for kind in (shares.TRAINING_JOBS, shares.INSTANCE_GROUP)
    }


def _raise_quotas(
    windows, owned, raising, policy: Policy, environment, clients: Clients, ledger: Ledger, now, time_left
):
    """The owners' quotas raised while their capacity is active (shares.py), their Slurm partitions (slurm_window.py)
    and the raises published for the reclaim controller (raised.py)."""
    quota_shares = raising[shares.TRAINING_JOBS]
    acting = {name: w for name, w in windows.items() if not w.dry_run}  # a dry-run window's raise is only reported
    wanted = {
        kind: shares.desired_limits(windows=windows, owned=owned, now=now, kind=kind, pools=raising[kind])
        for kind in raising
    }
    applied = {
        kind: shares.desired_limits(windows=acting, owned=owned, now=now, kind=kind, pools=raising[kind])
        for kind in raising
    }
    found: dict[str, Any] = {
        "shares": shares.apply_batch(
            desired=applied[shares.TRAINING_JOBS], pools=quota_shares, batch=clients.batch, ledger=ledger, now=now
        )
    }
    found["shares"] += shares.apply_compute_quotas(
        desired=applied[shares.INSTANCE_GROUP], sagemaker=clients.sagemaker, ledger=ledger, now=now
    )
    found["shares"] += [note for kind in raising for note in shares.would(wanted[kind], applied[kind], kind)]
    found["slurm_nodes"] = (
        slurm_window.apply(  # the owner's Slurm partition: joined, drained before the plan ends, resumed at the next
            windows=windows,
            owned=owned,
            slurm_pools={p.name: [s.name for s in p.shares] for p in policy.pools if backend_of(p).drains_on_head_node},
            head_nodes=environment.slurm_head_nodes,
            sagemaker=clients.sagemaker,
            ssm=clients.ssm,
            ledger=ledger,
            now=now,
            time_left=time_left,
        )
    )
    if environment.raised_guarantees:  # the reclaim controller counts what is raised now (raised.py)
        found["raised_guarantees"] = raised.publish(
            raised.applied(windows=acting, owned=owned, pools=raising, results=found["shares"], now=now),
            ssm=clients.ssm,
            name=environment.raised_guarantees,
            key_id=environment.raised_guarantees_key,
        )
    return found


def _scheduled_reports(
    result, owned, windows, environment, policy: Policy, clients: Clients, ledger: Ledger, now, time_left
):
    """What only scheduled runs publish: the purchases' utilisation and the blocks' use, and once a day the teams' spend."""
    found: dict[str, Any] = {
        "utilisation": chargeback.publish_utilisation(
            owned=owned,
            windows=windows,
            ec2=clients.ec2,
            sagemaker=clients.sagemaker,
            controller_id=environment.controller_id,
            tick_seconds=environment.tick_seconds,
            now=now,
        ),
        "block_use": chargeback.publish_block_use(result["fill"], tick_seconds=environment.tick_seconds, now=now),
    }
    if environment.team_spend:  # once a day, not every run (spend.py says why)
        found["spend"] = spend.publish_daily(ce=clients.ce, ledger=ledger, policy=policy, now=now, time_left=time_left)
    return found


def _consumer_errors(result: dict[str, Any]) -> list[Any]:
    """Every consumer step of the run that failed (the ConsumerErrors metric)."""
    return (
        result["resumed_requeues"]["errors"]
        + result.get("taken_off", {}).get("errors", [])
        + result.get("block_event", {}).get("requeue", {}).get("errors", [])
        + [
            e
            for d in result["draining_blocks"]
            for e in [*d.get("requeue", {}).get("errors", []), *([d] if "error" in d else [])]
        ]
        + [
            r
            for r in result["hyperpod"]
            + result["fill"]
            + result["rotation"]
            + result["training_plans"]
            + result["shares"]
            + result["slurm_nodes"]
            + result.get("utilisation", [])
            + result.get("spend", [])
            + [result.get("raised_guarantees", {})]
            if "error" in r
        ]
    )


def _run_summary(report: controller.RunReport) -> dict[str, Any]:
    """What the controller did this run, as the run's log line and answer name it."""
    return {
        "bought": [i.id for i in report.bought],
        "awaiting_approval": [i.id for i in report.awaiting_approval],
        "failed": [list(f) for f in report.failed],
        "in_flight": list(report.in_flight),
        "refused": list(report.refused),
        "uncovered": [list(u) for u in report.uncovered],
        "declined": [list(d) for d in report.declined],
        "found_late": [i.id for i in report.found_late],
        "deferred": list(report.deferred),
        "errors": [list(e) for e in report.errors],
        "planned": [
            {"window": p.window, "offering": p.offering.id, "fee": str(p.offering.upfront_fee), "mode": p.mode}
            for p in report.plan.purchases
        ],
    }


def load_windows(settings: Mapping[str, str]) -> dict[str, Window]:
    """Windows from the policy bundled with the code, checked against the function's own
    budget and price cap (``settings``: the function's environment)."""
    limits = PurchaseLimits.from_environ(settings)
    return windows_within(read_policy_file(limits.policy_path), limits)


def windows_within(policy: Policy, limits: PurchaseLimits) -> dict[str, Window]:
    windows = {w.name: w for w in policy.capacity_windows}
    budget_limit, cap_limit = limits.budget, limits.price_cap
    for window in windows.values():
        if window.budget > budget_limit or window.max_price_per_instance_hour > cap_limit:
            raise PolicyError(
                f"window {window.name}: budget {window.budget} / cap {window.max_price_per_instance_hour} exceed the "
                f"function's limits {budget_limit} / {cap_limit}; redeploy so both come from the same model"
            )
    return windows


def _on_block_event(
    event, windows, capacity: CapacityMarket, clients: Clients, ledger: Ledger, now: datetime, time_left
) -> dict[str, Any]:
    """A delivered block needs nothing of its own: this run's reconciliation (``rotation``) moves
    the consumer onto it. The expiration warning also tells the jobs to checkpoint and requeues
    the Batch jobs on the block."""
    detail_type, reservation_id = event["detail-type"], event["detail"]["capacity-reservation-id"]
    window_name, ends_at = _block_of(reservation_id, clients.ec2, ledger)
    window = windows.get(window_name)
    if window is None or window.consumer.get("kind") not in rotation.KINDS:
        return {"ignored": reservation_id, "reason": "not a block this controller rotates"}
    if "Expiration Warning" not in detail_type:
        return {"event": detail_type, "block": reservation_id, "rotation": "reconciled by this run"}
    ends_at = datetime.fromisoformat(event["detail"]["end-date"].replace("Z", "+00:00"))
    dry_run = window.dry_run
    if (
        window.consumer["kind"] == "batch_compute_environment"
    ):  # signalled once per block, maybe by an earlier run (requeue.drain)
        drained = {
            "window": window.name,
            "capacity_reservation_id": reservation_id,
            **consumer_steps.drain_batch_block(window, reservation_id, ends_at, clients, ledger, now, time_left),
        }
    else:
        drained = (
            {
                "window": window.name,
                "capacity_reservation_id": reservation_id,
                "dry_run": True,
                "would": "announce the drain",
            }
            if dry_run
            else rotation.announce_drain(
                window=window.name,
                reservation_id=reservation_id,
                ends_at=ends_at,
                moved_to=consumer_steps.moved_to(window),
                events=clients.events,
            )
        )
    warned_at = datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
    _metric(
        {"Window": window.name},
        DrainSeconds=((now - warned_at).total_seconds(), "Seconds"),
        JobsRequeued=(len(drained.get("requeue", {}).get("requeued", [])), "Count"),
    )
    return drained


def _on_request(event, windows: dict[str, Window], ledger: Ledger, notify, now: datetime, arguments) -> dict[str, Any]:
    """Record the on-demand window ``arguments(event)`` asks for (``requests.from_event`` or ``from_alarm``; None: nothing asked)."""
    try:
        asked = arguments(event)
        if asked is None:
            return {"ignored": "not a change to ALARM"}
        request, new = requests.submit(ledger, windows.values(), now=now, **asked)
    except requests.RequestRefused as refusal:
        notify("Capacity request refused", {"event": event.get("id"), "reason": str(refusal)})
        return {"refused": str(refusal)}
    return {
        "window": request.name,
        "team": request.team,
        "token": request.token,
        "new": new,
        **({"joined_occurrence": request.occurrence} if request.occurrence else {}),
    }


def _unsettled(
    requested: dict[str, Window], result: dict[str, Any], raising: dict[str, dict[str, Any]], now: datetime
) -> set[str]:
    """Requested windows whose consumer step failed or was deferred this run: not closed yet."""
    names = {r["window"] for r in result["hyperpod"] if "error" in r or "deferred" in r}
    for kind, pools in raising.items():
        for window, _, place, share, _ in shares.raising(windows=requested, owned=(), pools=pools, now=now, kind=kind):
            if shares.failed(result["shares"], shares.label(kind, place, share.name)):
                names.add(window.name)
    return names


def _block_of(reservation_id: str, ec2: Any, ledger: Ledger) -> tuple[str, datetime | None]:
    """(window, end) of a block: from its listing, or, while EC2 does not list it yet (eventually
    consistent), from the purchased intent that recorded it; ("", None) when it is not ours."""
    item = described_reservation(ec2, reservation_id)
    tagged = next((t["Value"] for t in (item or {}).get("Tags", []) if t["Key"] == TAG_WINDOW), None)
    if tagged:
        return tagged, reservation_from_api(item).end
    recorded = next((i for i in ledger.intents("purchased") if i.reservation_id == reservation_id), None)
    return (recorded.window, recorded.offering.end) if recorded else ("", None)


def _notifier(sns, topic_arn: str):
    def notify(subject: str, message: dict[str, Any]) -> None:
        sns.publish(TopicArn=topic_arn, Subject=subject[:100], Message=json.dumps(message, indent=2, sort_keys=True))

    return notify


def _emit_metrics(report: controller.RunReport, windows: dict[str, Window], spent: dict[str, Decimal]) -> None:
    _metric(
        {},
        WindowsUncovered=(len(report.uncovered), "Count"),
        Purchases=(len(report.bought), "Count"),
        PurchaseFailures=(len(report.failed), "Count"),
        PurchasesInFlight=(len(report.in_flight), "Count"),
        AwaitingApproval=(len(report.awaiting_approval), "Count"),
        PurchasesFoundLate=(len(report.found_late), "Count"),
        PurchasesDeferred=(len(report.deferred), "Count"),
        RunErrors=(len(report.errors), "Count"),
    )
    for what, why in report.errors:
        log.error("capacity controller step failed", what=what, error=why)
    for name, window in windows.items():
        used = float(spent[name] / window.budget * 100) if window.budget else 0.0
        _metric({"Window": name}, Spend=(float(spent[name]), "None"), BudgetUsedPercent=(used, "Percent"))


def _metric(dimensions: dict[str, str], **values: tuple[float, str]) -> None:
    """One CloudWatch embedded-metric-format record on stdout (the contract test reads these calls' names)."""
    metrics.publish(METRIC_NAMESPACE, dimensions, values)
