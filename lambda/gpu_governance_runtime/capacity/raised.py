"""The raised guarantees, one source for the reclaim controller: while ``shares.py`` holds a
team's quota share (or HyperPod compute quota) above its declared value, the reclaim planner and
the observer must count the raise too, or they see the owner running above its guarantee (and
reclaim it) and publish the declared guarantee as ``GuaranteedInstanceHours``.

The capacity controller writes what it has applied, on every run, to one SSM parameter
(``contract.raised_guarantees_parameter``): a JSON list of ``{"pool", "team", "instance_type",
"instances", "until", "window"}``, one entry per active plan, only for quotas this run left
showing the wanted value (a failed write, a quota changed by someone else or a missing service
environment publishes nothing for it). The parameter is read first and written only when it
changed, like the training-plan parameters (``delivery.py``). ``until`` is when the raise is
lowered (``LOWER_LEAD`` before the plan ends): the reader ignores entries past it, so a
parameter the controller stopped updating never inflates a guarantee beyond the plan.

The reclaim controller reads it with ``raised_guarantees.read`` (a module of its own, so the reclaim
function's code holds no call that writes). The parameter, not the ledger table: the reclaim
role may read exactly one parameter, and the ledger holds purchases and budgets no other
controller should read. Written only by the capacity controller: a SecureString under its own
KMS key, which only its role may encrypt with (the reclaim role may only decrypt, for this
parameter); the reader bounds every entry (``raised_guarantees``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from ..planners.offers import Reservation
from ..planners.window import Window
from . import shares
from .delivery import put_if_changed


def applied(
    *,
    windows: Mapping[str, Window],
    owned: Iterable[Reservation],
    pools: Mapping[str, Mapping[str, Any]],
    results: Iterable[Mapping[str, Any]],
    now: datetime,
) -> list[dict[str, Any]]:
    """The raises in place after this run's ``shares`` step: ``pools`` by consumer kind
    (``shares.TRAINING_JOBS``, ``shares.INSTANCE_GROUP``), ``results`` that step's results."""
    results, owned = list(results), list(owned)
    entries = []
    for kind, kind_pools in pools.items():
        for window, pool, place, share, plans in shares.raising(
            windows=windows, owned=owned, pools=kind_pools, now=now, kind=kind
        ):
            environment = [{"service_environment": pool.name}] if kind == shares.TRAINING_JOBS else []
            if shares.failed(results, shares.label(kind, place, share.name), *environment):
                continue  # the quota does not show the raise: the reclaim controller must not count it
            entries += [
                {
                    "pool": pool.name,
                    "team": share.name,
                    "instance_type": window.instance_type,
                    "instances": plan.count,
                    "until": (plan.end - shares.LOWER_LEAD).isoformat(),
                    "window": window.name,
                }
                for plan in plans
            ]
    return sorted(entries, key=lambda e: (e["pool"], e["team"], e["instance_type"], e["until"], e["window"]))


def publish(entries: list[dict[str, Any]], *, ssm: Any, name: str, key_id: str) -> dict[str, Any]:
    """Write ``entries`` as a SecureString under ``key_id``, the capacity controller's own key:
    only its role may encrypt with it, so nobody else (even with ``ssm:PutParameter`` on ``*``)
    can write a document the reclaim controller accepts (``raised_guarantees`` refuses other types
    and cannot decrypt under another key)."""
    try:
        changed = put_if_changed(ssm, name, json.dumps(entries, sort_keys=True), key_id=key_id)
    except ClientError as error:  # reported (ConsumerErrors) and written by the next run
        return {"parameter": name, "error": f"{error.response['Error']['Code']}: {error}"}
    return {"parameter": name, "raises": len(entries), "changed": changed}
