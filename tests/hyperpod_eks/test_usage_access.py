"""The reclaim controller observing a HyperPod EKS pool: its role's access entry and IAM, its
target entry, alarms, synthesized once with every compliance pack and checked with cfn-lint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Match, Template

from constructs_lib.cli.report import summarise
from constructs_lib.controllers.reclaim import ReclaimController, ReclaimTarget
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text
from constructs_lib.organisation.compliance import apply_standard_packs
from gpu_governance_runtime.contract import EKS_USAGE_READER_GROUP

QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/gpu-fair-share"
DOCUMENT = yaml.safe_load(default_config_text())
MODEL = GovernanceModel.from_dict(DOCUMENT)
EKS_POOL = MODEL.pool("hyperpod-eks")


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(outdir=str(outdir))
    stack = Stack(app, "Capacity", env=Environment(account="111122223333", region="us-east-1"))
    controller = ReclaimController(
        stack,
        "ReclaimController",
        model=MODEL,
        targets=[ReclaimTarget(pool="ec2-gpu", job_queue_arn=QUEUE), ReclaimTarget(pool="hyperpod-eks")],
    )
    apply_standard_packs(app)
    app.synth()  # raises on any unacknowledged finding
    return Template.from_stack(stack), controller, outdir


def test_packs_and_cfn_lint_are_clean(synthesized):
    from cfnlint.api import lint

    _, _, outdir = synthesized
    assert summarise(outdir).open_findings == []
    (template,) = Path(outdir).glob("*.template.json")
    assert [str(m) for m in lint(template.read_text(), regions=["us-east-1"]) if m.rule.id.startswith("E")] == []


def test_the_role_is_mapped_into_the_usage_reader_group_and_nothing_else(synthesized):
    template, controller, _ = synthesized
    (entry,) = template.find_resources("AWS::EKS::AccessEntry").values()
    role_id = Stack.of(controller).get_logical_id(controller.role.node.default_child)
    assert entry["Properties"] == {
        "ClusterName": EKS_POOL.eks_cluster_name,
        "PrincipalArn": {"Fn::GetAtt": [role_id, "Arn"]},
        "Type": "STANDARD",
        "KubernetesGroups": [EKS_USAGE_READER_GROUP],
    }  # no access policy, no other group


def test_the_role_may_describe_only_the_pools_cluster(synthesized):
    template, _, _ = synthesized
    statements = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    (describe,) = [s for s in statements if "eks:DescribeCluster" in json.dumps(s["Action"])]
    assert describe["Action"] == "eks:DescribeCluster"
    assert f":eks:us-east-1:111122223333:cluster/{EKS_POOL.eks_cluster_name}" in json.dumps(describe["Resource"])
    assert not [s for s in statements if "eks:" in json.dumps(s["Action"]) and s is not describe]


def test_the_function_is_told_the_cluster_and_its_gpus_per_instance(synthesized):
    template, _, _ = synthesized
    (function,) = [
        f
        for f in template.find_resources("AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == "gpu_governance_runtime.reclaim.handler.handler"
    ]
    targets = json.loads(function["Properties"]["Environment"]["Variables"]["RECLAIM_TARGETS"])
    assert {
        "pool": "hyperpod-eks",
        "eks_cluster": EKS_POOL.eks_cluster_name,
        "cluster_arn": EKS_POOL.cluster_arn,
        "gpus_per_instance": dict(EKS_POOL.gpus_per_instance),
    } in targets  # the cluster ARN finds the compute quotas (GPU-hour limits)


def test_pool_errors_and_each_teams_starvation_are_alarmed(synthesized):
    template, _, _ = synthesized
    alarms = [a["Properties"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()]
    eks_pool_errors = [
        a
        for a in alarms
        if a.get("MetricName") == "PoolErrors" and {"Name": "Pool", "Value": "hyperpod-eks"} in a["Dimensions"]
    ]
    assert len(eks_pool_errors) == 1
    starved = [
        {d["Name"]: d["Value"] for d in a["Dimensions"]}
        for a in alarms
        if a.get("MetricName") == "StarvedBelowGuarantee"
    ]
    assert {d["Pool"] for d in starved} == {"ec2-gpu", "hyperpod-eks"}
    assert sorted(d["Share"] for d in starved if d["Pool"] == "hyperpod-eks") == sorted(
        t.name for t in MODEL.teams_in("hyperpod-eks")
    )


def _model(*, gpu_hour_limits: bool = True, **pool_changes) -> GovernanceModel:
    document = json.loads(json.dumps(DOCUMENT))
    if not gpu_hour_limits:  # a limit on the pool would need every type's GPUs before the controller is built
        for team in document["teams"]:
            team.pop("gpu_hour_limit", None)
    (pool,) = [p for p in document["pools"] if p["name"] == "hyperpod-eks"]
    pool.update(pool_changes)
    return GovernanceModel.from_dict(document)


def test_a_pool_without_gpus_per_instance_for_each_type_is_refused_naming_the_type():
    model = _model(gpus_per_instance={"ml.p5.48xlarge": 8}, gpu_hour_limits=False)
    stack = Stack(App(), "Capacity", env=Environment(account="111122223333", region="us-east-1"))
    with pytest.raises(GovernanceError) as error:
        ReclaimController(stack, "ReclaimController", model=model, targets=[ReclaimTarget(pool="hyperpod-eks")])
    assert (
        str(error.value)
        .splitlines()[-1]
        .strip()
        .startswith("targets[0].pool: the pool declares no gpus_per_instance for ml.g6e.48xlarge ('hyperpod-eks')")
    )


def test_a_cluster_in_another_account_or_region_is_refused():
    model = _model(cluster_arn="arn:aws:sagemaker:us-west-2:999988887777:cluster/abcd1234efgh")
    stack = Stack(App(), "Capacity", env=Environment(account="111122223333", region="us-east-1"))
    with pytest.raises(GovernanceError) as error:
        ReclaimController(stack, "ReclaimController", model=model, targets=[ReclaimTarget(pool="hyperpod-eks")])
    text = str(error.value)
    assert "another account than the stack" in text and "another region than the stack" in text


def test_the_reference_app_observes_its_hyperpod_eks_pool():
    from constructs_lib.deployment import CapacityAccountStack

    stack = CapacityAccountStack(App(), "Capacity", model=MODEL)
    assert "hyperpod-eks" in [t.pool for t in stack.reclaim_controller.targets]
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::EKS::AccessEntry", {"KubernetesGroups": [EKS_USAGE_READER_GROUP]})
    template.has_resource_properties(
        "Custom::AWSCDK-EKS-KubernetesResource", {"Manifest": Match.string_like_regexp(EKS_USAGE_READER_GROUP)}
    )
