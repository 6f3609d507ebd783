"""The probe of Karpenter finding a reservation made after its EC2NodeClass, offline: botocore's
Stubber plays EC2 and a scripted kubectl plays the cluster, with the EC2NodeClass the library makes;
its verdicts, and that the reservation is cancelled whatever happens."""

from __future__ import annotations

import json

import yaml

from constructs_lib.backends.eks_kueue import karpenter
from constructs_lib.model import GovernanceModel
from tests.eks_kueue.test_karpenter import EXAMPLE
from tests.live import framework
from tests.live.framework import FAIL, INCONCLUSIVE, PASS
from tests.live.probes import karpenter as probe_module

from .conftest import ACCOUNT

MODEL = GovernanceModel.from_dict(yaml.safe_load(EXAMPLE.read_text()))
[NODE_CLASS, _] = karpenter.objects(karpenter.blocks_of(MODEL, MODEL.pool("training")))
ARGS = dict(karpenter_node_class=NODE_CLASS["metadata"]["name"], reservation_zone="us-east-1a", timeout_minutes=1.0)
RESERVATION = "cr-0123456789abcdef0"


class Kubectl:
    """The EC2NodeClass as kubectl shows it; its status lists the reservation from reading ``listed_from`` on."""

    def __init__(self, node_class=NODE_CLASS, listed_from: int | None = None):
        self.node_class, self.listed_from, self.readings = node_class, listed_from, 0

    def __call__(self, argv, stdin):
        assert argv == ["kubectl", "get", "ec2nodeclass", ARGS["karpenter_node_class"], "-o", "json"]
        self.readings += 1
        listed = self.listed_from is not None and self.readings > self.listed_from
        status = {"capacityReservations": [{"id": RESERVATION}]} if listed else {}
        return json.dumps({**self.node_class, "status": status})


def _created_and_cancelled(ec2):
    [term] = NODE_CLASS["spec"]["capacityReservationSelectorTerms"]
    assert term["ownerID"] == ACCOUNT
    ec2.add_response(
        "create_capacity_reservation",
        {"CapacityReservation": {"CapacityReservationId": RESERVATION}},
        {
            "InstanceType": "t3.micro",
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": "us-east-1a",
            "InstanceCount": 1,
            "InstanceMatchCriteria": "targeted",
            "EndDateType": "unlimited",
            "TagSpecifications": [
                {
                    "ResourceType": "capacity-reservation",
                    "Tags": [{"Key": k, "Value": v} for k, v in term["tags"].items()],
                }
            ],
        },
    )
    ec2.add_response("cancel_capacity_reservation", {"Return": True}, {"CapacityReservationId": RESERVATION})


def run(context, kubectl):
    (probe,) = probe_module.PROBES
    made = context(**ARGS)
    made.command = kubectl
    return framework.run_one(probe, made)


def test_a_reservation_listed_in_the_node_class_status_passes(stubs, context):
    _created_and_cancelled(stubs("ec2"))
    result = run(context, Kubectl(listed_from=2))
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()


def test_a_reservation_never_listed_fails_the_row_and_is_cancelled(stubs, context):
    _created_and_cancelled(stubs("ec2"))
    result = run(context, Kubectl())
    assert result.verdict.outcome == FAIL and "stay idle" in result.verdict.detail
    assert result.cleanup_failures == ()


def test_a_node_class_without_a_tag_term_of_this_account_buys_nothing(stubs, context):
    stubs("ec2")  # nothing scripted: any call would fail the test
    other = json.loads(json.dumps(NODE_CLASS))
    other["spec"]["capacityReservationSelectorTerms"][0]["ownerID"] = "999999999999"
    assert run(context, Kubectl(node_class=other)).verdict.outcome == INCONCLUSIVE
