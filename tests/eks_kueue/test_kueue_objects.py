"""The Kueue objects of an ``eks_kueue`` pool (issue 42 item 2): a ClusterQueue per team with a
nominal quota per ResourceFlavor, the borrowing and lending limits and the preemption of its
sharing preset; a Cohort per pool and per group; a LocalQueue per team namespace;
WorkloadPriorityClasses from the file's priority classes. Every object is checked against the
schema and CEL rules of Kueue's own CRDs (Kueue v0.15.8, outside the repository: crd.py)."""

from __future__ import annotations

import copy

import pytest

from constructs_lib.backends.eks_kueue import kueue
from constructs_lib.model import GovernanceModel

from .crd import needs_kueue_crds, schema_of, validate
from .org import POOL, example_data, example_model

MODEL = example_model()
EKS = MODEL.pool(POOL)
TEAMS = {t.name: t for t in MODEL.teams_in(POOL)}
P5, G6E = "p5.48xlarge", "g6e.12xlarge"


def objects(model: GovernanceModel = MODEL) -> list[dict]:
    pool = model.pool(POOL)
    teams = model.teams_in(POOL)
    found = kueue.cluster_objects(pool, teams, model.groups, model.priority_classes)
    for team in teams:
        found += kueue.team_objects(pool, team, model.groups, model.priority_classes)
    return found


def kueue_objects(model: GovernanceModel = MODEL) -> list[dict]:
    return [o for o in objects(model) if o["apiVersion"].startswith("kueue.x-k8s.io/")]


def by_kind(kind: str, model: GovernanceModel = MODEL) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in kueue_objects(model) if o["kind"] == kind}


def flavor(queue: dict, instance_type: str) -> dict[str, dict]:
    """resource -> its quotas in the queue's (or cohort's) flavor for ``instance_type``."""
    [group] = queue["spec"]["resourceGroups"]
    [entry] = [f for f in group["flavors"] if f["name"] == instance_type]
    return {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in entry["resources"]}


# --- Kueue's own schema ---------------------------------------------------------------------


@needs_kueue_crds
def test_every_kueue_object_is_valid_against_kueues_crds():
    made = kueue_objects()
    assert {o["kind"] for o in made} == {
        "ResourceFlavor",
        "WorkloadPriorityClass",
        "Cohort",
        "ClusterQueue",
        "LocalQueue",
    }
    assert {o["apiVersion"] for o in made} == {"kueue.x-k8s.io/v1beta2"}
    for manifest in made:
        assert validate(manifest) == [], manifest["metadata"]["name"]


@needs_kueue_crds
@pytest.mark.parametrize(
    "preset_edit",
    [
        {"preset": "background", "sharing": {"lending_limit": 25}},
        {"preset": "steady"},
        {"preset": "critical", "paused": True},
    ],
)
def test_every_preset_and_a_paused_team_stay_valid(preset_edit):
    data = example_data()
    data["teams"][0].update(preset_edit)
    for manifest in kueue_objects(GovernanceModel.from_dict(data)):
        assert validate(manifest) == [], manifest["metadata"]["name"]


@needs_kueue_crds
def test_the_validator_refuses_what_the_api_server_refuses():
    """The stand-in is only worth its verdicts if it says no: each of these the real API server
    (schema or CEL rule of the CRD) refuses."""
    queue = by_kind("ClusterQueue")["gpu-team-research-clusterqueue"]

    def broken(edit) -> list[str]:
        copied = copy.deepcopy(queue)
        edit(copied["spec"])
        return validate(copied)

    # v1beta1's field name is unknown in v1beta2 (strict field validation)
    assert any('unknown field "cohort"' in e for e in broken(lambda s: s.update(cohort="x")))
    # a borrowing limit without a cohort (CEL rule on spec)
    assert any("borrowingLimit" in e for e in broken(lambda s: s.pop("cohortName")))
    # a flavor that does not cover every covered resource (CEL rule on the resource group)
    assert any(
        "coveredResources" in e for e in broken(lambda s: s["resourceGroups"][0]["flavors"][0]["resources"].pop())
    )
    # a preemption policy Kueue does not know (enum)
    assert any(
        "reclaimWithinCohort" in e for e in broken(lambda s: s["preemption"].update(reclaimWithinCohort="Always"))
    )
    # a quantity that is not one (pattern)
    assert any(
        "nominalQuota" in e
        for e in broken(lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota="8 GPUs"))
    )
    with pytest.raises(LookupError, match="v1alpha1 is not served"):
        schema_of("ClusterQueue", "v1alpha1")


# --- ClusterQueue per team ------------------------------------------------------------------


def test_a_cluster_queue_per_team_with_a_nominal_quota_per_flavor():
    queues = by_kind("ClusterQueue")
    assert set(queues) == {f"gpu-team-{t}-clusterqueue" for t in TEAMS}
    research = queues["gpu-team-research-clusterqueue"]
    [group] = research["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert [f["name"] for f in group["flavors"]] == [G6E, P5]  # one flavor per instance type of its quota
    # 2 p5 instances: what two nodes have; 8 g6e GPUs: two 4-GPU nodes
    assert {r: q["nominalQuota"] for r, q in flavor(research, P5).items()} == {
        "cpu": "380",
        "memory": "3800Gi",
        "nvidia.com/gpu": "16",
    }
    assert flavor(research, G6E)["nvidia.com/gpu"]["nominalQuota"] == "8"
    assert flavor(research, G6E)["cpu"]["nominalQuota"] == "92"
    # production declares no g6e quota: no flavor it could be admitted on
    assert [f["name"] for f in queues["gpu-team-production-clusterqueue"]["spec"]["resourceGroups"][0]["flavors"]] == [
        P5
    ]


def test_borrowing_and_lending_limits_follow_each_teams_sharing():
    queues = by_kind("ClusterQueue")
    research = flavor(queues["gpu-team-research-clusterqueue"], P5)["nvidia.com/gpu"]
    training = flavor(queues["gpu-team-training-clusterqueue"], P5)["nvidia.com/gpu"]
    production = flavor(queues["gpu-team-production-clusterqueue"], P5)["nvidia.com/gpu"]
    # background: borrows up to its quota again (borrow_limit 100%), lends all of it (no lendingLimit)
    assert research == {"nominalQuota": "16", "borrowingLimit": "16"}
    # steady with lending_limit 50: never borrows, lends half (1 of 2 instances)
    assert training == {"nominalQuota": "16", "borrowingLimit": "0", "lendingLimit": "8"}
    # critical: reserved, neither lends nor borrows
    assert production == {"nominalQuota": "16", "borrowingLimit": "0", "lendingLimit": "0"}


def test_preemption_comes_from_the_sharing_preset():
    queues = by_kind("ClusterQueue")
    preemption = {t: queues[f"gpu-team-{t}-clusterqueue"]["spec"]["preemption"] for t in TEAMS}
    # every team takes its guarantee back from any borrower; only in-share preemption lets it
    # preempt its own lower-priority work; none preempts another's to borrow (borrowWithinCohort unset)
    assert preemption == {
        "research": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},  # background
        "training": {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"},  # steady
        "production": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},  # critical
    }


def test_a_queue_admits_only_its_teams_namespace_and_carries_its_weight_and_pause():
    queues = by_kind("ClusterQueue")
    for team in TEAMS:
        spec = queues[f"gpu-team-{team}-clusterqueue"]["spec"]
        assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": f"gpu-team-{team}"}}
        assert spec["fairSharing"] == {"weight": str(TEAMS[team].fair_share_weight)}
        assert "stopPolicy" not in spec
    data = example_data()
    data["teams"][1]["paused"] = True
    data["pools"][0]["fair_share"] = False
    changed = by_kind("ClusterQueue", GovernanceModel.from_dict(data))
    assert changed["gpu-team-training-clusterqueue"]["spec"]["stopPolicy"] == "Hold"
    assert "stopPolicy" not in changed["gpu-team-research-clusterqueue"]["spec"]
    assert not any("fairSharing" in q["spec"] for q in changed.values())


# --- Cohorts: one per pool, one per group ---------------------------------------------------


def test_a_cohort_per_pool_and_per_group_and_each_team_in_its_groups():
    cohorts = by_kind("Cohort")
    assert set(cohorts) == {"eks-kueue", "eks-kueue-vision"}
    assert "parentName" not in cohorts["eks-kueue"]["spec"]  # the pool's is the root
    assert cohorts["eks-kueue-vision"]["spec"]["parentName"] == "eks-kueue"
    queues = by_kind("ClusterQueue")
    assert {t: queues[f"gpu-team-{t}-clusterqueue"]["spec"]["cohortName"] for t in TEAMS} == {
        "research": "eks-kueue-vision",
        "training": "eks-kueue-vision",
        "production": "eks-kueue",
    }
    # the group's 5 p5 less its teams' 2 + 2: 1 instance of headroom, never borrowed from the rest
    assert flavor(cohorts["eks-kueue-vision"], P5)["nvidia.com/gpu"] == {"nominalQuota": "8", "borrowingLimit": "0"}
    assert flavor(cohorts["eks-kueue-vision"], G6E)["nvidia.com/gpu"] == {"nominalQuota": "0", "borrowingLimit": "0"}


@pytest.mark.parametrize("instance_type", [P5, G6E])
def test_the_tree_holds_exactly_the_pools_capacity(instance_type):
    """Nominal quotas over every ClusterQueue and Cohort add up to the pool's capacity: Kueue can
    admit no more than the cluster has, and none of it is left out of the tree."""
    nodes = [*by_kind("ClusterQueue").values(), *by_kind("Cohort").values()]
    gpus = sum(
        int(flavor(n, instance_type)["nvidia.com/gpu"]["nominalQuota"])
        for n in nodes
        if instance_type in [f["name"] for f in n["spec"]["resourceGroups"][0]["flavors"]]
    )
    assert gpus == EKS.capacity[instance_type] * EKS.gpus_per_instance[instance_type]


# --- LocalQueues, flavors, priority classes -------------------------------------------------


def test_a_local_queue_per_team_namespace_pointing_at_its_own_cluster_queue():
    local = by_kind("LocalQueue")
    assert {(q["metadata"]["namespace"], n, q["spec"]["clusterQueue"]) for n, q in local.items()} == {
        (f"gpu-team-{t}", f"gpu-team-{t}-localqueue", f"gpu-team-{t}-clusterqueue") for t in TEAMS
    }


def test_a_flavor_per_instance_type_selecting_its_nodes():
    assert {n: f["spec"]["nodeLabels"] for n, f in by_kind("ResourceFlavor").items()} == {
        t: {"node.kubernetes.io/instance-type": t} for t in (P5, G6E)
    }


def test_workload_priority_classes_from_the_files_priority_classes():
    assert {n: c["value"] for n, c in by_kind("WorkloadPriorityClass").items()} == {
        "urgent-priority": 90,
        "standard-priority": 50,
        "opportunistic-priority": 10,
    }
