"""The capacity stack of examples/org-eks-kueue.yaml, synthesized once with the standard packs:
the AWS side of each team's isolation (access entries as its own group, pod identity to its own
role from its own namespace's service account), the Kueue objects applied as the library makes
them and in dependency order, and the reclaim controller observing the pool."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from constructs_lib.backends.eks_kueue import kueue
from constructs_lib.backends.eks_kueue.construct import EksKueueGovernance
from constructs_lib.cli.report import summarise
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime.contract import EKS_USAGE_READER_GROUP, ENV_RECLAIM_TARGETS
from tests.foundation.org import synthesize_reference

from .org import POOL, example_data, example_model

MODEL = example_model()
EKS = MODEL.pool(POOL)
TEAMS = [t.name for t in MODEL.teams_in(POOL)]
CLUSTER = "acme-gpu"


def synthesize(model, outdir):
    """The stack holding ``model``'s eks_kueue pools, its template and ``outdir``; synthesis raises on
    any unacknowledged finding of the standard packs."""
    stacks = synthesize_reference(model, outdir)
    [capacity] = [s for s in stacks if hasattr(s, "eks_kueue_clusters")]
    return capacity, Template.from_stack(capacity), outdir


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    return synthesize(MODEL, tmp_path_factory.mktemp("cdk.out"))


def of_type(template, kind) -> list[dict]:
    return [r["Properties"] for r in template.find_resources(kind).values()]


def test_the_standard_packs_are_clean(synthesized):
    _, _, outdir = synthesized
    assert summarise(outdir).open_findings == []


def test_each_teams_principals_map_to_its_own_group_and_nothing_else(synthesized):
    _, template, _ = synthesized
    entries = of_type(template, "AWS::EKS::AccessEntry")
    groups: dict[str, list[str]] = {}
    for entry in entries:
        assert entry["ClusterName"] == CLUSTER
        for group in entry.get("KubernetesGroups", ()):
            assert "AccessPolicies" not in entry  # RBAC decides, in the team's namespace
            groups.setdefault(group, []).append(entry["PrincipalArn"])
    assert set(groups) == {f"gpu-team-{t}-members" for t in TEAMS} | {EKS_USAGE_READER_GROUP}
    admins = [e for e in entries if "AccessPolicies" in e]
    assert set(MODEL.platform_admins) <= {e["PrincipalArn"] for e in admins if isinstance(e["PrincipalArn"], str)}
    assert all(p["PolicyArn"].endswith("AmazonEKSClusterAdminPolicy") for e in admins for p in e["AccessPolicies"])


def test_pod_identity_binds_each_teams_service_account_to_its_own_role(synthesized):
    capacity, template, _ = synthesized
    construct = capacity.eks_kueue_clusters[POOL]
    associations = {a["Namespace"]: a for a in of_type(template, "AWS::EKS::PodIdentityAssociation")}
    assert set(associations) == {f"gpu-team-{t}" for t in TEAMS}
    for team, role in construct.workload_roles.items():
        association = associations[f"gpu-team-{team}"]
        assert (association["ServiceAccount"], association["ClusterName"]) == ("gpu-workload", CLUSTER)
        assert association["RoleArn"] == Stack.of(capacity).resolve(role.role_arn)
        trust = template.find_resources("AWS::IAM::Role")[Stack.of(capacity).get_logical_id(role.node.default_child)][
            "Properties"
        ]["AssumeRolePolicyDocument"]["Statement"][0]
        assert trust["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-namespace"] == f"gpu-team-{team}"
        assert trust["Condition"]["StringEquals"]["aws:RequestTag/eks-cluster-name"] == CLUSTER


def unpruned(objects: list[dict]) -> list[dict]:
    """The objects without the label aws_eks_v2 adds to each for kubectl's prune."""
    for manifest in objects:
        labels = manifest["metadata"]["labels"]
        for key in [k for k in labels if k.startswith("aws.cdk.eks/prune-")]:
            del labels[key]
    return objects


def test_the_kueue_objects_are_applied_as_made_and_before_any_teams(synthesized):
    capacity, template, _ = synthesized
    construct = capacity.eks_kueue_clusters[POOL]
    stack = Stack.of(capacity)
    applied = {
        lid: unpruned(json.loads(r["Properties"]["Manifest"]))
        for lid, r in template.find_resources("Custom::AWSCDK-EKS-KubernetesResource").items()
    }
    shared = stack.get_logical_id(construct.kueue_objects.node.default_child)
    assert applied[shared] == kueue.cluster_objects(EKS, MODEL.teams_in(POOL), MODEL.groups, MODEL.priority_classes)
    resources = template.to_json()["Resources"]
    for team in MODEL.teams_in(POOL):
        lid = stack.get_logical_id(construct.manifests[team.name].node.default_child)
        assert applied[lid] == kueue.team_objects(EKS, team, MODEL.groups, MODEL.priority_classes)
        assert shared in resources[lid]["DependsOn"]  # cohorts and flavors before the ClusterQueue naming them


def test_the_reclaim_controller_observes_the_pool(synthesized):
    capacity, template, _ = synthesized
    [function] = [
        f
        for f in of_type(template, "AWS::Lambda::Function")
        if ENV_RECLAIM_TARGETS in f.get("Environment", {}).get("Variables", {})
    ]
    targets = json.loads(function["Environment"]["Variables"][ENV_RECLAIM_TARGETS])
    assert {"pool": POOL, "eks_cluster": CLUSTER, "gpus_per_instance": {"g6e.12xlarge": 4, "p5.48xlarge": 8}} in targets


@pytest.mark.parametrize(
    ("account", "region", "field"), [("999988887777", "us-east-1", "account"), ("111122223333", "eu-west-1", "region")]
)
def test_a_cluster_of_another_account_or_region_is_refused_before_anything_is_made(account, region, field):
    stack = Stack(App(), "Elsewhere", env=Environment(account=account, region=region))
    with pytest.raises(GovernanceError) as raised:
        EksKueueGovernance(
            stack,
            "Pool",
            pool=EKS,
            teams=MODEL.teams_in(POOL),
            priority_classes=MODEL.priority_classes,
            groups=MODEL.groups,
            platform_admins=MODEL.platform_admins,
            tenants={},
        )
    assert f"pool.cluster_arn: cluster is in another {field} than the stack" in str(raised.value)
    assert stack.node.children == []  # nothing half-built


def test_a_limited_team_lets_the_reclaim_controller_hold_its_queue_and_send_the_notice(tmp_path):
    """A team with a GPU-hour limit: the reclaim group's ClusterRole may patch its ClusterQueue (and no
    other team's), and the reclaim function may send the 80 % notice (events:PutEvents)."""
    data = example_data()
    data["teams"][0]["gpu_hour_limit"] = {"hours": 100, "period": "week"}
    model = GovernanceModel.from_dict(data)
    limited = data["teams"][0]["name"]
    [capacity] = [s for s in synthesize_reference(model, tmp_path, packs=False) if hasattr(s, "eks_kueue_clusters")]
    template = Template.from_stack(capacity)
    construct = capacity.eks_kueue_clusters[POOL]
    reader = template.to_json()["Resources"][
        Stack.of(capacity).get_logical_id(construct.usage_reader.node.default_child)
    ]
    role, _ = unpruned(json.loads(reader["Properties"]["Manifest"]))
    assert role["rules"][1:] == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["clusterqueues"],
            "resourceNames": [f"gpu-team-{limited}-clusterqueue"],
            "verbs": ["patch"],
        }
    ]
    [function] = [
        f
        for f in of_type(template, "AWS::Lambda::Function")
        if ENV_RECLAIM_TARGETS in f.get("Environment", {}).get("Variables", {})
    ]
    role_id = function["Role"]["Fn::GetAtt"][0]
    actions = {
        action
        for policy in of_type(template, "AWS::IAM::Policy")
        if {"Ref": role_id} in policy["Roles"]
        for statement in policy["PolicyDocument"]["Statement"]
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
    }
    assert "events:PutEvents" in actions
