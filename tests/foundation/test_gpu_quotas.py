"""Quotas in GPUs, vCPU, memory and MIG partitions, and absolute borrow limits (issue 28, item 2):
the model and its checks, the one translation into whole instances that the policy document (so
the reclaim planner and `simulate`), Batch and Slurm read, the HyperPod EKS compute quota,
`explain` and `audit`."""

from __future__ import annotations

import json

import pytest

from constructs_lib.backends import backends_where
from constructs_lib.backends.hyperpod_eks.construct import compute_quota_properties
from constructs_lib.backends.hyperpod_slurm.plan import slurm_plan
from constructs_lib.cli.simulate import pool_shares
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats, deals
from constructs_lib.model.policy import compile_policy
from constructs_lib.organisation.audit import audit
from gpu_governance_runtime.contract import HYPERPOD_EKS, SharingStrategy
from gpu_governance_runtime.planners.reclaim import Share
from gpu_governance_runtime.policy import parse_policy

from .org import default_data

RESEARCH, TRAINING, PRODUCTION = 0, 1, 2
P5 = "ml.p5.48xlarge"


def model_with(team: int, pool: str, instance_type: str, entry, data: dict | None = None) -> GovernanceModel:
    data = data or default_data()
    data["teams"][team]["quotas"][pool][instance_type] = entry
    return GovernanceModel.from_dict(data)


def problems_of(team: int, pool: str, instance_type: str, entry, data: dict | None = None) -> str:
    with pytest.raises(GovernanceError) as error:
        model_with(team, pool, instance_type, entry, data)
    return str(error.value)


def test_an_accelerator_quota_on_hyperpod_eks_becomes_the_compute_quotas_own_resources():
    model = model_with(
        RESEARCH, "hyperpod-eks", P5, {"accelerators": 12, "vcpu": 96, "memory_gib": 1000, "borrow_accelerators": 8}
    )
    config = compute_quota_properties(model.pool("hyperpod-eks"), model.teams[RESEARCH])["ComputeQuotaConfig"]
    assert config["ComputeQuotaResources"] == [
        {"InstanceType": "ml.g6e.48xlarge", "Count": 2},
        {"InstanceType": P5, "Accelerators": 12, "VCpu": 96, "MemoryInGiB": 1000},
    ]
    assert config["ResourceSharingConfig"] == {
        "Strategy": "LendAndBorrow",
        "BorrowLimit": 100,
        "AbsoluteBorrowLimits": [{"InstanceType": P5, "Accelerators": 8}],
    }


def test_mig_partitions_map_to_accelerator_partition_and_the_api_model_accepts_every_shape():
    """The CloudFormation properties are the API's (CreateComputeQuota): botocore's own validator
    checks the generated ComputeQuotaConfig against the SageMaker service model."""
    import botocore.session
    from botocore.validate import ParamValidator

    model = model_with(RESEARCH, "hyperpod-eks", P5, {"accelerator_partition": {"type": "mig-1g.10gb", "count": 14}})
    properties = compute_quota_properties(model.pool("hyperpod-eks"), model.teams[RESEARCH])
    assert {"InstanceType": P5, "AcceleratorPartition": {"Type": "mig-1g.10gb", "Count": 14}} in properties[
        "ComputeQuotaConfig"
    ]["ComputeQuotaResources"]
    operation = botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateComputeQuota")
    request = {
        "Name": properties["Name"],
        "ClusterArn": properties["ClusterArn"],
        "ComputeQuotaConfig": properties["ComputeQuotaConfig"],
        "ComputeQuotaTarget": properties["ComputeQuotaTarget"],
    }
    report = ParamValidator().validate(request, operation.input_shape)
    assert not report.has_errors(), report.generate_report()


def test_cfn_lint_accepts_a_compute_quota_in_gpus_with_an_absolute_borrow_limit():
    from cfnlint.api import lint

    model = GovernanceModel.from_dict(default_data())  # the reference: research's p5 quota is in GPUs
    properties = compute_quota_properties(model.pool("hyperpod-eks"), model.teams[RESEARCH])
    assert {"InstanceType": P5, "Accelerators": 12} in properties["ComputeQuotaConfig"]["ComputeQuotaResources"]
    template = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Resources": {"Quota": {"Type": "AWS::SageMaker::ComputeQuota", "Properties": properties}},
    }
    assert [str(m) for m in lint(json.dumps(template), regions=["us-east-1"])] == []


def test_a_gpu_quota_is_translated_once_into_the_whole_instances_the_planner_and_the_simulator_read():
    data = default_data()
    data["teams"][RESEARCH]["quotas"]["hyperpod-slurm"][P5] = {"accelerators": 16, "borrow_accelerators": 8}
    model = GovernanceModel.from_dict(data)
    share = next(s for s in compile_policy(model)["pools"][3]["shares"] if s["name"] == "research")
    assert (share["quota"], share["borrow_limit_instances"]) == ({P5: 2}, {P5: 1})
    planned = {s.name: s for s in parse_policy(compile_policy(model)).pool("hyperpod-slurm").shares}["research"]
    simulated = {s.name: s for s in pool_shares(model, "hyperpod-slurm")[0]}["research"]
    assert planned == simulated
    assert (planned.quota, planned.ceiling(P5, 6)) == ({P5: 2}, 3)  # the percent (100) alone would give 4
    # Slurm: the team's instance groups hold its 2 whole instances, its borrow QoS caps 8 GPUs
    plan = slurm_plan(model, "hyperpod-slurm")
    assert next(q for q in plan.qos if q.name == "research.borrow").grp_gpus == 8


def test_an_absolute_borrow_limit_replaces_the_percent_in_the_planner_for_its_instance_type_only():
    share = Share(
        name="a",
        quota={P5: 2, "ml.g5.12xlarge": 2},
        strategy=SharingStrategy.LEND_AND_BORROW,
        borrow_limit=100,
        borrow_limit_instances={P5: 1},
    )
    assert (share.ceiling(P5, 10), share.ceiling("ml.g5.12xlarge", 10), share.ceiling(P5, 2)) == (3, 4, 2)


def test_the_policy_reader_refuses_a_bad_absolute_borrow_limit():
    from gpu_governance_runtime.policy import PolicyError

    document = compile_policy(GovernanceModel.from_dict(default_data()))
    document["pools"][0]["shares"][0]["borrow_limit_instances"] = {P5: -1}
    with pytest.raises(PolicyError, match=r"pools\[0\].shares\[0\].borrow_limit_instances.ml.p5.48xlarge"):
        parse_policy(document)


def test_whole_instances_declared_as_instances_reach_a_batch_quota_share_exactly():
    model = model_with(RESEARCH, "sagemaker-training", P5, {"instances": 1})
    share = next(s for s in compile_policy(model)["pools"][0]["shares"] if s["name"] == "research")
    assert share["quota"][P5] == 1


@pytest.mark.parametrize(
    "pool, team, entry, expected",
    [
        (
            "hyperpod-slurm",
            RESEARCH,
            {"accelerators": 12},
            "teams[0].quotas.hyperpod-slurm.ml.p5.48xlarge.accelerators: not whole ml.p5.48xlarge instances (8 GPUs each), which a hyperpod_slurm pool counts (12) - a multiple of 8, e.g. 8 or 16",
        ),
        (
            "sagemaker-training",
            RESEARCH,
            {"accelerators": 16},
            "teams[0].quotas.sagemaker-training.ml.p5.48xlarge.accelerators: a batch_quota_share pool counts whole instances (its capacity unit is the instance type) (16) - instances: N",
        ),
        (
            "sagemaker-training",
            RESEARCH,
            {"instances": 2, "borrow_accelerators": 8},
            "teams[0].quotas.sagemaker-training.ml.p5.48xlarge.borrow_accelerators: a batch_quota_share pool counts whole instances",
        ),
        (
            "hyperpod-slurm",
            RESEARCH,
            {"accelerators": 16, "vcpu": 96},
            "teams[0].quotas.hyperpod-slurm.ml.p5.48xlarge: a hyperpod_slurm pool takes no vcpu, memory_gib or accelerator_partition ('16 GPUs + 96 vCPU')",
        ),
        (
            "hyperpod-eks",
            TRAINING,
            {"accelerators": 16, "borrow_accelerators": 8},
            "teams[1].quotas.hyperpod-eks.ml.p5.48xlarge.borrow_accelerators: only lend_and_borrow teams borrow, not lend (8)",
        ),
        (
            "hyperpod-eks",
            RESEARCH,
            {"accelerator_partition": {"type": "mig-9g.99gb", "count": 2}},
            "teams[0].quotas.hyperpod-eks.ml.p5.48xlarge.accelerator_partition.type: not a MIG profile SageMaker knows ('mig-9g.99gb')",
        ),
        (
            "hyperpod-eks",
            RESEARCH,
            {"accelerators": 40},
            "pools[2].capacity.ml.p5.48xlarge: teams are guaranteed 72 GPUs but the pool has 48 (8 per instance) (6) - at least 9",
        ),
    ],
)
def test_what_a_backend_cannot_express_is_refused_naming_field_value_and_what_is_allowed(pool, team, entry, expected):
    assert expected in problems_of(team, pool, P5, entry)


def test_only_the_backend_flagged_for_part_instance_quotas_takes_them():
    # the registry, not a backend's name, says who takes GPUs short of an instance, vCPU, memory or MIG
    assert backends_where(lambda b: b.part_instance_quotas) == (HYPERPOD_EKS,)
    model = model_with(RESEARCH, "hyperpod-eks", P5, {"accelerators": 12, "vcpu": 96, "memory_gib": 1024})
    assert model.teams[RESEARCH].quotas["hyperpod-eks"][P5].vcpu == 96


def test_a_gpu_quota_needs_the_pools_gpus_per_instance():
    data = default_data()
    del data["pools"][2]["gpus_per_instance"][P5]
    message = problems_of(RESEARCH, "hyperpod-eks", P5, {"accelerators": 12}, data)
    assert (
        "teams[0].quotas.hyperpod-eks.ml.p5.48xlarge.accelerators: the pool declares no gpus_per_instance for ml.p5.48xlarge (12) - set gpus_per_instance.ml.p5.48xlarge on pool hyperpod-eks"
        in message
    )


@pytest.mark.parametrize(
    "entry, expected",
    [
        ({"instances": 2, "accelerators": 16}, "give exactly one of instances, accelerators, accelerator_partition"),
        ({"vcpu": 8}, "give exactly one of instances, accelerators, accelerator_partition, not none"),
        (
            {"instances": 2, "memory_gib": 64},
            "vcpu and memory_gib refine an accelerators or accelerator_partition quota",
        ),
        ({"accelerators": 0}, "teams[0].quotas.hyperpod-eks.ml.p5.48xlarge"),
        ({"gpus": 8}, "teams[0].quotas.hyperpod-eks.ml.p5.48xlarge"),
    ],
)
def test_a_malformed_quota_entry_is_refused_with_its_path(entry, expected):
    assert expected in problems_of(RESEARCH, "hyperpod-eks", P5, entry)


def test_a_capacity_window_that_raises_a_gpu_level_compute_quota_is_refused():
    data = default_data()
    window = data["capacity_windows"][0]
    window.update(
        team="research",
        feeds={"kind": "hyperpod_instance_group", "pool": "hyperpod-eks", "instance_group": "research-p5"},
    )
    message = problems_of(RESEARCH, "hyperpod-eks", P5, {"accelerators": 12}, data)
    assert (
        f"teams[0].quotas.hyperpod-eks.ml.p5.48xlarge: capacity window {window['name']} raises this compute quota in whole instances"
        in message
    )


def test_explain_and_audit_show_the_quota_in_its_declared_unit_and_validate_says_what_the_controllers_count():
    model = GovernanceModel.from_dict(default_data())
    deal = next(d for d in deals(model) if (d.team, d.pool) == ("research", "hyperpod-eks"))
    assert (deal.guaranteed, deal.max_with_borrowing) == (
        "2 x ml.g6e.48xlarge, 12 GPUs x ml.p5.48xlarge",
        "4 x ml.g6e.48xlarge, 20 GPUs x ml.p5.48xlarge",
    )
    workload = [
        row.can
        for row in audit(model)
        if row.team == "research" and row.layer == "workload" and "12 GPUs x ml.p5.48xlarge" in row.can
    ]
    assert workload and "at most 4 x ml.g6e.48xlarge, 20 GPUs x ml.p5.48xlarge" in workload[0]
    assert (
        "teams[0].quotas.hyperpod-eks.ml.p5.48xlarge: 12 GPUs is not whole instances: task governance enforces it on pool hyperpod-eks (hyperpod_eks); "
        "the reclaim controller's policy and `simulate` count the 1 whole instances it covers"
    ) in caveats(model)
