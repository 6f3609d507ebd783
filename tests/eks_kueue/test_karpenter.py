"""Capacity windows fed through Karpenter on an ``eks_kueue`` pool (issue 42 item 2,
examples/org-eks-kueue-karpenter.yaml): per pool an EC2NodeClass selecting only the blocks the
capacity controller bought for that pool, and a NodePool of capacity type ``reserved`` whose taint
only the pool's Kueue flavor tolerates; checked against Karpenter's own CRDs (crd.KARPENTER), and
what one NodeClass per pool cannot hold refused by validate."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from aws_cdk import Stack

from constructs_lib.backends.eks_kueue import karpenter, kueue
from constructs_lib.cli.report import summarise
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.capacity import capacity_controller_id
from constructs_lib.model.policy import compile_policy
from gpu_governance_runtime.capacity import rotation
from gpu_governance_runtime.capacity.aws import CapacityMarket
from gpu_governance_runtime.planners.capacity import Offering
from gpu_governance_runtime.policy import parse_policy

from .crd import KARPENTER, KUEUE
from .test_construct import synthesize, unpruned

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "org-eks-kueue-karpenter.yaml"
SINGLE = GovernanceModel.from_dict(yaml.safe_load(EXAMPLE.read_text()))


def _two_pools() -> dict:
    """The example with a second eks_kueue pool on its own cluster, fed through Karpenter for another team."""
    data = yaml.safe_load(EXAMPLE.read_text())
    [pool] = copy.deepcopy(data["pools"])
    pool.update(name="inference", cluster_arn=pool["cluster_arn"].replace("acme-training", "acme-inference"))
    data["pools"].append(pool)
    data["consumer_accounts"]["serving"] = {"account_id": "777788889999", "region": "us-east-1"}
    data["teams"].append(
        {
            "name": "serving",
            "account": "serving",
            "preset": "steady",
            "members": ["arn:aws:iam::777788889999:role/ServingEngineers"],
            "quotas": {"inference": {"p5.48xlarge": 4}},
        }
    )
    [window] = copy.deepcopy(data["capacity_windows"])
    window.update(name="serving-launch", team="serving", availability_zones=["us-east-1b"])
    window["feeds"].update(
        pool="inference", node_role="KarpenterNodeRole-acme-inference", discovery_tags={"acme.example/subnets": "gpu"}
    )
    data["capacity_windows"].append(window)
    return data


DATA = _two_pools()
MODEL = GovernanceModel.from_dict(DATA)
ACCOUNT = MODEL.capacity_account.account_id


def blocks(pool: str, model: GovernanceModel = MODEL) -> karpenter.KarpenterBlocks:
    return karpenter.blocks_of(model, model.pool(pool))


def made(pool: str, model: GovernanceModel = MODEL) -> dict[str, dict]:
    return {o["kind"]: o for o in karpenter.objects(blocks(pool, model))}


def problems_of(data) -> list[str]:
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    return str(raised.value).splitlines()


class _RecordingEc2:
    """The EC2 client's PurchaseCapacityBlock as AWS answers it: the reservation with the request's tags."""

    def __init__(self):
        self.reservations: list[dict] = []

    def purchase_capacity_block(self, *, CapacityBlockOfferingId, InstancePlatform, TagSpecifications):  # noqa: N803
        [spec] = TagSpecifications
        assert spec["ResourceType"] == "capacity-reservation"
        reservation = {
            "CapacityReservationId": f"cr-{len(self.reservations):017x}",
            "OwnerId": ACCOUNT,
            "ReservationType": "capacity-block",
            "Tags": spec["Tags"],
        }
        self.reservations.append(reservation)
        return {"CapacityReservation": reservation}


def purchases(model: GovernanceModel = MODEL) -> dict[str, dict]:
    """window -> the reservation the runtime's purchase makes for it, from the policy document the library writes."""
    ec2 = _RecordingEc2()
    market = CapacityMarket(ec2=ec2, sagemaker=None, controller_id=capacity_controller_id(model.organisation))
    bought = {}
    for window in parse_policy(compile_policy(model)).capacity_windows:
        start = datetime(2027, 1, 4, 11, 30, tzinfo=UTC)
        offering = Offering(
            id=f"cb-{window.name}",
            kind="block",
            instance_type=window.instance_type,
            count=window.instance_count,
            availability_zone=window.availability_zones[0],
            start=start,
            end=start,
            duration_hours=24,
            upfront_fee=Decimal(1),
        )
        outcome = market.purchase(
            offering, intent_id=f"intent-{window.name}", window=window.name, owner=window.owner_tags
        )
        assert outcome.result == "purchased"
        bought[window.name] = ec2.reservations[-1]
    return bought


def selects(node_class: dict, reservation: dict) -> bool:
    """Karpenter's capacityReservationSelectorTerms: terms ORed; within one, every tag ("*" any value),
    the id and the owner must match (karpenter.sh/docs/concepts/nodeclasses, capacityReservationSelectorTerms)."""
    tags = {t["Key"]: t["Value"] for t in reservation["Tags"]}
    return any(
        all(tags.get(k) == v or (v == "*" and k in tags) for k, v in term.get("tags", {}).items())
        and term.get("id", reservation["CapacityReservationId"]) == reservation["CapacityReservationId"]
        and term.get("ownerID", reservation["OwnerId"]) == reservation["OwnerId"]
        for term in node_class["spec"]["capacityReservationSelectorTerms"]
    )


@KARPENTER.needed
@pytest.mark.parametrize("pool", ["training", "inference"])
def test_the_node_pool_and_node_class_are_valid_against_karpenters_crds(pool):
    objects = karpenter.objects(blocks(pool))
    assert [o["kind"] for o in objects] == ["EC2NodeClass", "NodePool"]
    assert {o["metadata"]["name"] for o in objects} == {f"gpu-governance-{pool}-blocks"}
    for manifest in objects:
        assert KARPENTER.validate(manifest) == []


@KARPENTER.needed
def test_the_crd_check_refuses_what_karpenter_refuses():
    """The check is not vacuous: Karpenter's own rules refuse a NodePool requirement in its restricted
    domain, an EC2NodeClass with both a role and an instance profile, and an unknown field."""
    node_pool = made("training")["NodePool"]
    restricted = copy.deepcopy(node_pool)
    restricted["spec"]["template"]["spec"]["requirements"].append(
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}
    )
    assert any("restricted" in e for e in KARPENTER.validate(restricted))
    node_class = copy.deepcopy(made("training")["EC2NodeClass"])
    node_class["spec"]["instanceProfile"] = "profile"
    assert any("exactly one of ['role', 'instanceProfile']" in e for e in KARPENTER.validate(node_class))
    node_class = copy.deepcopy(made("training")["EC2NodeClass"])
    node_class["spec"]["capacityReservationSelectorTerms"][0]["pool"] = "training"
    assert any('unknown field "pool"' in e for e in KARPENTER.validate(node_class))


def test_each_pools_node_class_selects_its_own_purchases_and_no_other_pools():
    """Team research's block (pool training) is never selected by pool inference's EC2NodeClass, nor
    team serving's by training's: the purchase is tagged with its pool by the runtime itself."""
    bought = purchases()
    training, inference = made("training")["EC2NodeClass"], made("inference")["EC2NodeClass"]
    assert selects(training, bought["research-weekly"]) and not selects(inference, bought["research-weekly"])
    assert selects(inference, bought["serving-launch"]) and not selects(training, bought["serving-launch"])


def test_a_block_of_another_controller_or_account_is_not_selected():
    """The same pool name bought by another organisation's controller, or a reservation another account
    shares, is not the pool's: the term needs this controller's managed-by tag and the capacity account."""
    reservation = purchases()["research-weekly"]
    node_class = made("training")["EC2NodeClass"]
    other_controller = copy.deepcopy(reservation)
    for tag in other_controller["Tags"]:
        if tag["Key"] == "gpu-governance:managed-by":
            tag["Value"] = "other-org-capacity"
    assert not selects(node_class, other_controller)
    assert not selects(node_class, {**reservation, "OwnerId": "999999999999"})


def test_the_node_pool_launches_reserved_capacity_of_the_windows_only_tainted_for_the_pool():
    spec = made("training")["NodePool"]["spec"]["template"]["spec"]
    requirements = {r["key"]: r["values"] for r in spec["requirements"]}
    assert requirements == {
        "karpenter.sh/capacity-type": ["reserved"],
        "node.kubernetes.io/instance-type": ["p5.48xlarge"],
        "topology.kubernetes.io/zone": ["us-east-1a"],
    }
    assert spec["taints"] == [{"key": "gpu-governance/capacity-block", "value": "training", "effect": "NoSchedule"}]
    assert spec["expireAfter"] == "Never"
    data = copy.deepcopy(DATA)
    data["capacity_windows"][0]["fallback"] = "on_demand"
    fallback = made("training", GovernanceModel.from_dict(data))["NodePool"]["spec"]["template"]["spec"]
    assert fallback["requirements"][0]["values"] == ["reserved", "on-demand"]


@KUEUE.needed
def test_only_the_pools_kueue_flavor_of_the_blocks_type_tolerates_the_taint():
    """Kueue adds a flavor's tolerations to the pods it admits there: those pods, and no other, may run on the
    block's nodes. A flavor of another type, or a pool with no Karpenter window, tolerates nothing."""
    pool = MODEL.pool("training")
    [flavor] = kueue.resource_flavors(pool, blocks("training"))
    taint = made("training")["NodePool"]["spec"]["template"]["spec"]["taints"][0]
    assert flavor["spec"]["tolerations"] == [{**taint, "operator": "Equal"}]
    assert KUEUE.validate(flavor) == []
    [plain] = kueue.resource_flavors(pool)
    assert "tolerations" not in plain["spec"]
    other = made("inference")["NodePool"]["spec"]["template"]["spec"]["taints"][0]
    assert other["value"] != taint["value"]


def test_the_capacity_controller_moves_and_drains_nothing_for_a_karpenter_window():
    """Karpenter finds the block by its tags and drains its nodes before it ends
    [aws: eks.karpenter-drains-before-block-end]: the rotation has no consumer of the window's to move,
    and the planner buys as many blocks at once as the window needs."""
    windows = parse_policy(compile_policy(MODEL)).capacity_windows
    assert {w.consumer["kind"] for w in windows} == {"karpenter_node_pool"}
    assert rotation.by_consumer(windows) == []
    assert all(w.reservations_at_once is None for w in windows)


def test_the_policy_carries_the_pool_the_purchase_is_tagged_with():
    windows = {w["name"]: w for w in compile_policy(MODEL)["capacity_windows"]}
    assert windows["research-weekly"]["consumer"]["kind"] == "karpenter_node_pool"
    assert windows["research-weekly"]["consumer"]["pool"] == "training"
    assert windows["research-weekly"]["market"] == "capacity_block"


# --- what validate refuses ------------------------------------------------------------------


def test_windows_of_one_pool_must_agree_on_its_one_node_class_and_fallback():
    data = copy.deepcopy(DATA)
    second = copy.deepcopy(data["capacity_windows"][0])
    second.update(name="research-extra", start="2027-02-01T11:30:00Z")
    second.pop("repeat_every_days")
    second["feeds"]["node_role"] = "OtherRole"
    second["fallback"] = "on_demand"
    data["capacity_windows"].append(second)
    lines = problems_of(data)
    assert any(
        line.startswith("capacity_windows[2].feeds: pool training has one Karpenter EC2NodeClass")
        and "OtherRole" in line
        and "capacity_windows[0]" in line
        for line in lines
    )
    assert any(
        line.startswith("capacity_windows[2].fallback: pool training has one Karpenter NodePool") for line in lines
    )


def test_a_window_fed_through_karpenter_names_its_zones():
    data = copy.deepcopy(DATA)
    data["capacity_windows"][0]["availability_zones"] = []
    assert any(
        line.startswith("capacity_windows[0].availability_zones: a window fed through Karpenter must name its zones")
        for line in problems_of(data)
    )


def test_karpenter_launches_ec2_instances_not_a_training_plan():
    """A training plan's ml.* instances are SageMaker's; Karpenter launches EC2 capacity reservations only."""
    data = copy.deepcopy(DATA)
    data["capacity_windows"][0]["instance_type"] = "ml.p5.48xlarge"
    assert any("karpenter_node_pool launches EC2 instances" in line for line in problems_of(data))


def test_a_karpenter_feed_names_an_eks_kueue_pool_of_the_windows_type():
    data = copy.deepcopy(DATA)
    data["capacity_windows"][0]["feeds"]["pool"] = "nowhere"
    assert any(line.startswith("capacity_windows[0].feeds.pool: undeclared pool") for line in problems_of(data))
    data = copy.deepcopy(DATA)
    data["capacity_windows"][0]["instance_type"] = "p4d.24xlarge"
    assert any(line.startswith("capacity_windows[0].instance_type:") for line in problems_of(data))
    data = copy.deepcopy(DATA)
    data["capacity_windows"][0]["feeds"]["ami_alias"] = "windows2022@latest"
    assert any(line.startswith("capacity_windows[0].feeds.ami_alias: invalid") for line in problems_of(data))


# --- the example synthesizes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    return synthesize(SINGLE, tmp_path_factory.mktemp("cdk.out"))


def test_the_example_applies_the_node_pool_with_the_flavors_and_buys_with_the_pool_tag(synthesized):
    """The pool's construct applies its NodePool and EC2NodeClass as made, its flavor tolerating the
    taint; the capacity controller may tag a purchase with its pool (aws:TagKeys)."""
    capacity, template, outdir = synthesized
    stack = Stack.of(capacity)
    applied = {
        lid: unpruned(json.loads(r["Properties"]["Manifest"]))
        for lid, r in template.find_resources("Custom::AWSCDK-EKS-KubernetesResource").items()
    }
    construct = capacity.eks_kueue_clusters["training"]
    expected = karpenter.objects(blocks("training", SINGLE))
    assert applied[stack.get_logical_id(construct.karpenter_objects.node.default_child)] == expected
    flavors = applied[stack.get_logical_id(construct.kueue_objects.node.default_child)]
    assert flavors[0]["spec"]["tolerations"] == [blocks("training", SINGLE).toleration]
    purchase = [
        s
        for policy in template.find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "ec2:PurchaseCapacityBlock"
    ]
    assert purchase and all(
        "gpu-governance:pool" in s["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"] for s in purchase
    )
    assert summarise(outdir).open_findings == []
