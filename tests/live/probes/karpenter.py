"""Karpenter on an ``eks_kueue`` pool's cluster (register row ``eks.karpenter-finds-later-reservations``):
whether Karpenter finds a capacity reservation tagged to match an EC2NodeClass's selector after the
class was applied, as it must for a Capacity Block the controller buys after the deploy. No page
says; Karpenter's source lists the selected reservations again every minute.

Through the caller's kubeconfig (``kubectl``; ``--kube-context`` picks the cluster's context) it
reads the EC2NodeClass the library made for the pool (``gpu-governance-<pool>-blocks``), creates in
the sandbox account a targeted On-Demand Capacity Reservation of one small instance tagged with its
selector's tags (Karpenter selects blocks "in the same way you would for a default ODCR"
[aws: eks.karpenter-selects-blocks-by-tags]), and waits for the class's
``status.capacityReservations`` to list it. The reservation is cancelled whatever happens.
"""

from __future__ import annotations

import json
from typing import Any

from ..framework import Cleanup, Context, Option, Probe, Verdict, failed, inconclusive, passed
from ._batch import TIMEOUT
from .hyperpod import KUBE_CONTEXT

NODE_CLASS = Option(
    "--karpenter-node-class", "the EC2NodeClass the library made for the pool (gpu-governance-<pool>-blocks)"
)
RESERVATION_TYPE = Option(
    "--reservation-instance-type", "the instance type of the probe's capacity reservation", default="t3.micro"
)
RESERVATION_ZONE = Option("--reservation-zone", "the Availability Zone of the probe's capacity reservation")
OPTIONS = [TIMEOUT, KUBE_CONTEXT, NODE_CLASS, RESERVATION_TYPE, RESERVATION_ZONE]


def _node_class(context: Context) -> dict[str, Any]:
    where = ("--context", context.args.kube_context) if context.args.kube_context else ()
    text = context.command(
        ["kubectl", *where, "get", "ec2nodeclass", context.args.karpenter_node_class, "-o", "json"], None
    )
    return json.loads(text)


def _listed(context: Context, reservation: str) -> bool:
    """Whether the class's status lists the reservation within the timeout."""
    deadline = context.clock() + context.args.timeout_minutes * 60
    while True:
        status = _node_class(context).get("status", {})
        if any(r.get("id") == reservation for r in status.get("capacityReservations") or ()):
            return True
        if context.clock() >= deadline:
            return False
        context.sleep(15)


def finds_new_reservation(context: Context, cleanup: Cleanup) -> Verdict:
    args = context.args
    terms = _node_class(context).get("spec", {}).get("capacityReservationSelectorTerms") or []
    term = next((t for t in terms if t.get("tags") and t.get("ownerID", context.account) == context.account), None)
    if term is None:
        return inconclusive(
            f"EC2NodeClass {args.karpenter_node_class} has no term selecting this account's reservations by tags: "
            "not a class the library made"
        )
    ec2 = context.client("ec2", None)
    reservation = ec2.create_capacity_reservation(
        InstanceType=args.reservation_instance_type,
        InstancePlatform="Linux/UNIX",
        AvailabilityZone=args.reservation_zone,
        InstanceCount=1,
        InstanceMatchCriteria="targeted",
        EndDateType="unlimited",
        TagSpecifications=[
            {
                "ResourceType": "capacity-reservation",
                "Tags": [{"Key": k, "Value": v} for k, v in term["tags"].items()],
            }
        ],
    )["CapacityReservation"]["CapacityReservationId"]
    cleanup.add(
        f"cancel capacity reservation {reservation}",
        lambda: ec2.cancel_capacity_reservation(CapacityReservationId=reservation),
    )
    if _listed(context, reservation):
        return passed(
            f"EC2NodeClass {args.karpenter_node_class} listed {reservation}, created after it with its selector's tags: "
            "a block bought after the deploy is found"
        )
    return failed(
        f"EC2NodeClass {args.karpenter_node_class} did not list {reservation} in {args.timeout_minutes:g} minutes: a block "
        "bought after the deploy would stay idle until the class is applied again; the row and docs/eks-kueue.md must say so"
    )


def _cost(args) -> str:
    return (
        f"one targeted capacity reservation of 1 x {args.reservation_instance_type}, billed at its on-demand rate while "
        f"it exists: at most --timeout-minutes ({args.timeout_minutes:g}) and the cancellation"
    )


PROBES = [
    Probe(
        name="karpenter-finds-new-reservation",
        row="eks.karpenter-finds-later-reservations",
        does=(
            "with kubectl, reads --karpenter-node-class; creates a targeted capacity reservation of one "
            "--reservation-instance-type in --reservation-zone tagged with the class's selector tags; waits for the "
            "class's status to list it; cancels it"
        ),
        passes_when="the class's status.capacityReservations lists the reservation within --timeout-minutes",
        needs=(NODE_CLASS.flag, RESERVATION_ZONE.flag),
        cost=_cost,
        run=finds_new_reservation,
    )
]
