"""The fifth backend is its packages (issue 42, Done when), and what ``validate`` refuses on it."""

from __future__ import annotations

import copy

import pytest
import yaml

from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.discovery import describe
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import caveats, deals
from constructs_lib.model.loader import default_config_text
from constructs_lib.model.policy import compile_policy
from tests.foundation.test_backend_ownership import CONTRACT, LISTS, ROOT, SOURCES, namings, owned_by

from .org import POOL, eks_kueue_pool, example_data, with_eks_kueue

NAME = "eks_kueue"


def test_only_its_packages_the_two_lists_and_the_contract_name_it():
    """Positive as well as negative: the lists do name it (it is registered on both sides), its
    packages exist, and no other file of the library or the runtime names it."""
    naming = {str(path.relative_to(ROOT)) for path in SOURCES if namings(path, path.read_text(), NAME)}
    library, runtime = owned_by(NAME)
    assert {path for path in naming if not path.startswith((library, runtime))} == {*LISTS, CONTRACT}
    assert f"{library}__init__.py" in naming and f"{runtime}/__init__.py" in naming
    assert (ROOT / "docs" / "eks-kueue.md").is_file()
    assert "(eks-kueue.md)" in (ROOT / "docs" / "architecture.md").read_text()


def problems_of(data) -> list[str]:
    with pytest.raises(GovernanceError) as raised:
        GovernanceModel.from_dict(data)
    return str(raised.value).splitlines()


def test_a_team_has_one_pool_on_eks_for_its_one_pod_role():
    data = with_eks_kueue(yaml.safe_load(default_config_text()))
    research = next(t for t in data["teams"] if t["name"] == "research")
    assert "hyperpod-eks" in research["quotas"]
    GovernanceModel.from_dict(data)  # the inference team alone on eks-kueue: valid
    research["quotas"][POOL] = {"p5.48xlarge": 1}
    index = data["teams"].index(research)
    assert any(
        line.startswith(f"teams[{index}].quotas.{POOL}: the team has a pod role on pool hyperpod-eks already")
        for line in problems_of(data)
    )


def test_a_node_figure_missing_for_an_instance_type_is_refused_with_its_path():
    data = example_data()
    del data["pools"][0]["vcpus_per_instance"]["g6e.12xlarge"]
    assert any(line.startswith("pools[0].vcpus_per_instance: no figure for g6e.12xlarge") for line in problems_of(data))


def test_two_pools_on_one_cluster_are_refused():
    data = example_data()
    second = copy.deepcopy(eks_kueue_pool())
    second["name"] = "eks-kueue-2"
    data["pools"].append(second)
    assert any(
        line.startswith("pools[1].cluster_arn: EKS cluster acme-gpu is already pool eks-kueue's")
        for line in problems_of(data)
    )


def test_a_capacity_block_node_group_of_the_pools_cluster_feeds_a_window():
    """A window rotates a CAPACITY_BLOCK managed node group of the cluster (the only consumer kind
    on a plain EKS cluster); the policy document carries it to the capacity controller as any other."""
    data = example_data()
    data["capacity_windows"] = [
        {
            "name": "p5-block",
            "team": "research",
            "instance_type": "p5.48xlarge",
            "instance_count": 2,
            "start": "2026-12-10T14:00:00Z",
            "duration_hours": 24,
            "max_price_per_instance_hour": "40",
            "budget": {"amount": 5000, "period": "week"},
            "fallback": "none",
            "feeds": {
                "kind": "eks_node_group",
                "launch_template_name": "gpu-p5-block",
                "cluster_name": "acme-gpu",
                "nodegroup_name": "p5-block",
            },
        }
    ]
    model = GovernanceModel.from_dict(data)
    [window] = compile_policy(model)["capacity_windows"]
    assert window["consumer"] == {
        "kind": "eks_node_group",
        "launch_template_name": "gpu-p5-block",
        "cluster_name": "acme-gpu",
        "nodegroup_name": "p5-block",
    }
    data["capacity_windows"][0]["fallback"] = "on_demand"  # a node group cannot fall back to on demand
    assert any("cannot be moved to an on-demand launch template" in line for line in problems_of(data))


def test_a_gpu_hour_limit_is_published_as_enforced_there():
    """Kueue has no consumption limit; the reclaim controller holds the team's ClusterQueue at it
    (runtime backends/eks_kueue/gpu_hours.py): the team's discovery document says it is enforced
    (docs/discovery.md), and neither validate nor explain warns that it is not."""
    data = example_data()
    data["teams"][0]["gpu_hour_limit"] = {"hours": 100, "period": "week"}
    model = GovernanceModel.from_dict(data)
    document = describe(model, "research", POOL, bucket="bucket", kms_key_arn="key")
    assert document["gpu_hour_limit"] == {"hours": 100, "period": "week", "enforced": True}
    assert not [line for line in caveats(model) if "gpu_hour_limit" in line and "not enforced" in line]
    shown = {(d.team, d.pool): d.gpu_hour_limit for d in deals(model)}
    assert shown["research", POOL] == "100 GPU h per week"
    assert document["namespace"] == "gpu-team-research"
    assert [c["kueue_priority_class"] for c in document["priority_classes"]] == [
        "urgent-priority",
        "standard-priority",
        "opportunistic-priority",
    ]
