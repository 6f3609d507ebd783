"""The planner buys only what the window's consumer can launch into (issue 24, outcomes 1 and 6):
a launch template names one reservation and an instance group one plan, so such a consumer is
never sold two pieces for the same hours; SageMaker training jobs each name their own plan."""

from types import SimpleNamespace

import boto3
from moto import mock_aws

from gpu_governance_runtime.capacity.aws import CapacityMarket
from gpu_governance_runtime.capacity.consumers import launch_zones
from gpu_governance_runtime.planners.capacity import plan
from tests.aws_model.batch import Clock, FakeBatch

from .builders import NOW, at, block, reservation, window

BATCH = {
    "kind": "batch_compute_environment",
    "launch_template_name": "gpu-p5",
    "compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5",
    "block_compute_environment": "arn:aws:batch:us-east-1:111122223333:compute-environment/gpu-p5-block",
    "job_queue": "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-p5",
}
EKS = {"kind": "eks_node_group", "launch_template_name": "gpu-p5", "cluster_name": "ml", "nodegroup_name": "p5"}
INSTANCE_GROUP = {
    "kind": "hyperpod_instance_group",
    "cluster_arn": "arn:aws:sagemaker:us-east-1:111122223333:cluster/abc",
    "instance_group": "p5",
}
TRAINING_JOBS = {"kind": "sagemaker_training_jobs"}

TWO_HALVES = [
    block("cbo-a", at(10), 1, count=2, zone="us-east-1a"),
    block("cbo-b", at(10), 1, count=2, zone="us-east-1b"),
]


def run(w, offerings, reservations=()):
    return plan(windows=[w], reservations=reservations, offerings=offerings, spent={}, now=NOW)


def test_two_concurrent_halves_are_not_bought_for_a_launch_template_consumer():
    for consumer in (BATCH, EKS):
        result = run(window(consumer=consumer), TWO_HALVES)
        assert result.purchases == ()
        assert result.uncovered[0].reason == (
            f"{consumer['kind']} launches into 1 reservation at a time: every cover of 4 x 2026-12-10 14:00-2026-12-10 20:00 UTC "
            "needs pieces at the same time, and a piece it cannot launch into would be paid and idle"
        )


def test_one_whole_piece_is_chosen_over_cheaper_concurrent_halves():
    whole = block("cbo-whole", at(10), 1, count=4, per_hour="35")
    result = run(window(consumer=BATCH), TWO_HALVES + [whole])
    assert [p.offering.id for p in result.purchases] == ["cbo-whole"]


def test_training_plans_for_an_instance_group_are_not_bought_side_by_side_but_for_training_jobs_they_are():
    halves = [
        block(
            f"tpo-{z}", at(10), 1, count=2, zone=f"us-east-1{z}", instance_type="ml.p5.48xlarge", kind="training_plan"
        )
        for z in "ab"
    ]
    group = window(market="training_plan", instance_type="ml.p5.48xlarge", consumer=INSTANCE_GROUP)
    assert run(group, halves).purchases == ()
    jobs = window(market="training_plan", instance_type="ml.p5.48xlarge", consumer=TRAINING_JOBS)
    assert sorted(p.offering.id for p in run(jobs, halves).purchases) == ["tpo-a", "tpo-b"]


def test_pieces_one_after_the_other_are_usable_by_one_launch_template():
    w = window(consumer=BATCH, duration_hours=30)  # 10 Dec 14:00 to 11 Dec 20:00
    result = run(w, [block("cbo-day-2", at(11), 1, per_hour="30"), block("cbo-day-1", at(10), 1, per_hour="31")])
    assert [p.offering.id for p in result.purchases] == [
        "cbo-day-2",
        "cbo-day-1",
    ]  # cheapest first: the order they are bought in


def test_a_held_block_is_not_joined_by_a_concurrent_piece():
    # Two of the four instances are held already (an earlier cover); a second block beside it would
    # be idle: the consumer's launch template targets the held one.
    held = reservation("cr-held", at(10), 1, count=2, state="scheduled")
    result = run(window(consumer=BATCH), [block("cbo-b", at(10), 1, count=2, zone="us-east-1b")], [held])
    assert result.purchases == ()
    assert "launches into 1 reservation at a time" in result.uncovered[0].reason


def test_only_offerings_in_a_zone_of_the_consumers_subnets_are_bought():
    """[aws: batch-ce.subnet-in-block-zone]: a block's instances launch only in a subnet of its zone. The cheaper
    block in us-east-1b, where the compute environment (or node group) has no subnet, is never bought; a held
    block there still counts as held (buying again would spend twice). Fails before issue 37: the planner knew the
    declared zones only and bought the cheapest."""
    cheap_elsewhere = block("cbo-b", at(10), 1, per_hour="20", zone="us-east-1b")
    usable = block("cbo-a", at(10), 1, zone="us-east-1a")
    for consumer in (BATCH, EKS):
        reachable = window(consumer=consumer, launch_zones=frozenset({"us-east-1a"}))
        assert [p.offering.id for p in run(reachable, [cheap_elsewhere, usable]).purchases] == ["cbo-a"]
        result = run(reachable, [cheap_elsewhere])
        assert result.purchases == () and "in us-east-1a for 4 x" in result.uncovered[0].reason
        nowhere = window(consumer=consumer, availability_zones=("us-east-1b",), launch_zones=frozenset({"us-east-1a"}))
        assert (
            run(nowhere, [cheap_elsewhere])
            .uncovered[0]
            .reason.startswith(
                "no offering of p5.48xlarge in no zone: the consumer's subnets are in us-east-1a, the window allows us-east-1b"
            )
        )
        held_elsewhere = reservation("cr-b", at(10), 1, zone="us-east-1b")
        assert run(reachable, [usable], [held_elsewhere]).purchases == ()


def test_the_market_reads_the_zones_of_the_consumers_subnets_each_run():
    """consumers.launch_zones: the block compute environment's subnets (DescribeComputeEnvironments), the node
    group's (DescribeNodegroup), each through DescribeSubnets; training-plan consumers are not bounded."""
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = {
            zone: ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{n}.0/24", AvailabilityZone=zone)["Subnet"]["SubnetId"]
            for n, zone in enumerate(("us-east-1a", "us-east-1c"))
        }
        batch = FakeBatch(Clock(now=0.0), capacity={})
        batch.add_compute_environment(
            BATCH["block_compute_environment"], vcpus_per_instance=192, max_vcpus=0, subnets=(subnet["us-east-1c"],)
        )
        eks = SimpleNamespace(
            describe_nodegroup=lambda **_: {"nodegroup": {"subnets": [subnet["us-east-1a"], subnet["us-east-1c"]]}}
        )
        market = CapacityMarket(ec2=ec2, sagemaker=None, controller_id="c", batch=batch, eks=eks)
        assert launch_zones(window(consumer=BATCH), ec2=ec2, batch=batch, eks=eks) == {"us-east-1c"}
        assert launch_zones(window(consumer=EKS), ec2=ec2, batch=batch, eks=eks) == {"us-east-1a", "us-east-1c"}
        assert (
            launch_zones(window(consumer=TRAINING_JOBS, market="training_plan"), ec2=ec2, batch=batch, eks=eks) is None
        )
        # The market reads them with a gap to fill only (a covered window costs no read).
        market = CapacityMarket(ec2=ec2, sagemaker=None, controller_id="c", batch=batch, eks=None)
        covered = window(consumer=BATCH, start=at(10, 14, 0))
        held = [reservation("cr-a", at(10), 1, state="scheduled", zone="us-east-1c", window_name=covered.name)]
        assert market.for_planning(covered, held, NOW) == (covered, [])
