"""A group tree three levels deep as Kueue hierarchical cohorts (issue 43, item 1): a Cohort per
group under its parent group's (spec.parentName), nominal quota = the group's headroom above its
teams and child groups, borrowingLimit and lendingLimit from the file; every object valid against
Kueue v0.15.8's CRDs, and the tree's nominal quotas adding up to the pool's capacity."""

from __future__ import annotations

import pytest

from constructs_lib.model import GovernanceModel

from .crd import needs_kueue_crds, validate
from .org import POOL, example_data
from .test_kueue_objects import G6E, P5, by_kind, flavor, kueue_objects


def tree_model() -> GovernanceModel:
    """ml (production) > vision (training) > perception (research)."""
    data = example_data()
    data["groups"] = [
        {"name": "perception", "parent": "vision", "teams": ["research"], "quotas": {POOL: {P5: 3, G6E: 2}}}
        | {"lending_limits": {POOL: {G6E: 0}}},
        {"name": "vision", "parent": "ml", "teams": ["training"], "quotas": {POOL: {P5: 5, G6E: 4}}}
        | {"borrowing_limits": {POOL: {P5: 1}}},
        {"name": "ml", "teams": ["production"], "quotas": {POOL: {P5: 7, G6E: 5}}, "lending_limits": {POOL: {P5: 1}}},
    ]
    return GovernanceModel.from_dict(data)


MODEL = tree_model()


def gpus(cohort: dict, instance_type: str) -> dict[str, str]:
    return flavor(cohort, instance_type)["nvidia.com/gpu"]


def test_a_cohort_per_level_under_its_parents_parents_first():
    cohorts = by_kind("Cohort", MODEL)
    assert list(cohorts) == ["eks-kueue", "eks-kueue-ml", "eks-kueue-vision", "eks-kueue-perception"]
    assert {name: c["spec"].get("parentName") for name, c in cohorts.items()} == {
        "eks-kueue": None,
        "eks-kueue-ml": "eks-kueue",
        "eks-kueue-vision": "eks-kueue-ml",
        "eks-kueue-perception": "eks-kueue-vision",
    }
    queues = by_kind("ClusterQueue", MODEL)
    assert {
        t: queues[f"gpu-team-{t}-clusterqueue"]["spec"]["cohortName"] for t in ("research", "training", "production")
    } == {
        "research": "eks-kueue-perception",
        "training": "eks-kueue-vision",
        "production": "eks-kueue-ml",
    }


def test_each_level_holds_its_headroom_and_its_limits():
    cohorts = by_kind("Cohort", MODEL)
    # ml: 7 p5 less production's 2 and vision's 5; lends 1 p5 (8 GPUs) outside itself at most.
    assert gpus(cohorts["eks-kueue-ml"], P5) == {"nominalQuota": "0", "borrowingLimit": "0", "lendingLimit": "8"}
    assert gpus(cohorts["eks-kueue-ml"], G6E) == {"nominalQuota": "4", "borrowingLimit": "0"}
    # vision: 5 p5 less training's 2 and perception's 3; may borrow 1 p5 beyond its quota.
    assert gpus(cohorts["eks-kueue-vision"], P5) == {"nominalQuota": "0", "borrowingLimit": "8"}
    assert gpus(cohorts["eks-kueue-vision"], G6E) == {"nominalQuota": "0", "borrowingLimit": "0"}
    # perception: 3 p5 less research's 2; lends none of its g6e outside itself.
    assert gpus(cohorts["eks-kueue-perception"], P5) == {"nominalQuota": "8", "borrowingLimit": "0"}
    assert gpus(cohorts["eks-kueue-perception"], G6E) == {
        "nominalQuota": "0",
        "borrowingLimit": "0",
        "lendingLimit": "0",
    }
    # the root: what no top group or team outside a group holds
    assert gpus(cohorts["eks-kueue"], P5) == {"nominalQuota": "8"} and gpus(cohorts["eks-kueue"], G6E) == {
        "nominalQuota": "12"
    }


@pytest.mark.parametrize("instance_type", [P5, G6E])
def test_the_tree_still_holds_exactly_the_pools_capacity(instance_type):
    nodes = [*by_kind("ClusterQueue", MODEL).values(), *by_kind("Cohort", MODEL).values()]
    total = sum(
        int(gpus(n, instance_type)["nominalQuota"])
        for n in nodes
        if instance_type in [f["name"] for f in n["spec"]["resourceGroups"][0]["flavors"]]
    )
    pool = MODEL.pool(POOL)
    assert total == pool.capacity[instance_type] * pool.gpus_per_instance[instance_type]


@needs_kueue_crds
def test_every_object_of_the_tree_is_valid_against_kueues_crds():
    made = kueue_objects(MODEL)
    assert sum(o["kind"] == "Cohort" for o in made) == 4
    for manifest in made:
        assert validate(manifest) == [], manifest["metadata"]["name"]
