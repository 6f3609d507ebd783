"""What the model refuses for HyperPod EKS pools, and how `explain` shows HyperPod's semantics."""

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import deal
from tests.foundation.org import default_data


def hyperpod_data() -> dict:
    data = default_data()
    assert any(p["backend"] == "hyperpod_eks" for p in data["pools"]), (
        "the default organisation shows a HyperPod EKS cluster"
    )
    return data


def team(data, name):
    return next(t for t in data["teams"] if t["name"] == name)


def problems(data) -> str:
    with pytest.raises(GovernanceError) as error:
        GovernanceModel.from_dict(data)
    return str(error.value)


def test_default_organisation_declares_kubernetes_tenancy():
    model = GovernanceModel.from_dict(hyperpod_data())
    production = next(t for t in model.teams if t.name == "production")
    assert production.kubernetes["hyperpod-eks"].dedicated_instance_groups == ("production-p5",)
    assert model.pool("hyperpod-eks").kubernetes_version == "1.33"


def test_borrow_limit_outside_hyperpods_range_is_refused():
    data = hyperpod_data()
    team(data, "research")["sharing"] = {"borrow_limit": 600}
    assert (
        "teams[0].sharing.borrow_limit: outside HyperPod's documented borrow limit range (600) - a percent 1-500"
        in problems(data)
    )


def test_kubernetes_settings_must_name_a_hyperpod_eks_pool_of_the_team():
    data = hyperpod_data()
    team(data, "training")["kubernetes"] = {"ec2-gpu": {"gpu_quota": 4}}
    assert (
        "teams[1].kubernetes.ec2-gpu: not a hyperpod_eks or eks_kueue pool the team has a quota in ('ec2-gpu') - one of ['hyperpod-eks']"
        in problems(data)
    )


def test_an_instance_group_is_dedicated_to_one_team_only():
    data = hyperpod_data()
    team(data, "research")["kubernetes"]["hyperpod-eks"]["dedicated_instance_groups"] = ["production-p5"]
    text = problems(data)
    assert "dedicated_instance_groups[0]: already dedicated to team research ('production-p5')" in text


def test_pod_security_defaults_to_baseline_and_offers_restricted_only_besides():
    data = hyperpod_data()
    model = GovernanceModel.from_dict(data)
    assert {t.kubernetes["hyperpod-eks"].pod_security.value for t in model.teams if "hyperpod-eks" in t.kubernetes} == {
        "baseline"
    }
    team(data, "research")["kubernetes"]["hyperpod-eks"]["pod_security"] = "restricted"
    research = next(t for t in GovernanceModel.from_dict(data).teams if t.name == "research")
    assert research.kubernetes["hyperpod-eks"].pod_security.value == "restricted"
    # privileged would let a tenant pod onto the node, where other tenants' credentials are.
    team(data, "research")["kubernetes"]["hyperpod-eks"]["pod_security"] = "privileged"
    text = problems(data)
    assert "teams[0].kubernetes.hyperpod-eks.pod_security: " in text and "'privileged'" in text and "restricted" in text


def test_unknown_kubernetes_version_is_refused_with_the_allowed_ones():
    data = hyperpod_data()
    next(p for p in data["pools"] if p["backend"] == "hyperpod_eks")["kubernetes_version"] = "1.20"
    assert "kubernetes_version: invalid ('1.20')" in problems(data)


def test_explain_shows_hyperpod_preemption_and_dontlend_semantics():
    model = GovernanceModel.from_dict(hyperpod_data())
    pool = model.pool("hyperpod-eks")
    by_team = {t.name: deal(t, pool) for t in model.teams_in(pool.name)}
    assert by_team["production"].lends_idle.startswith("no (DontLend")
    assert by_team["training"].in_share_preemption == "no (PreemptTeamTasks Never)"
    assert by_team["research"].in_share_preemption.endswith("(PreemptTeamTasks LowerPriority)")
    # the reference declares research's p5 quota in GPUs (12, borrowing at most 8 more)
    assert by_team["research"].max_with_borrowing == "4 x ml.g6e.48xlarge, 20 GPUs x ml.p5.48xlarge"


def test_explain_shows_no_borrowing_when_the_cluster_shares_no_idle_compute():
    data = hyperpod_data()
    next(p for p in data["pools"] if p["backend"] == "hyperpod_eks")["idle_resource_sharing"] = False
    model = GovernanceModel.from_dict(data)
    research = deal(next(t for t in model.teams if t.name == "research"), model.pool("hyperpod-eks"))
    assert research.max_with_borrowing == research.guaranteed
    # in the unit the quota is declared in (the reference declares research's p5 quota in GPUs)
    assert research.guaranteed == "2 x ml.g6e.48xlarge, 12 GPUs x ml.p5.48xlarge"
    assert research.lends_idle == research.reclaimable == "no (idle resource sharing off on the cluster)"


def test_a_team_is_granted_only_declared_priority_classes_and_every_one_by_default():
    data = hyperpod_data()
    team(data, "research")["kubernetes"]["hyperpod-eks"]["priority_classes"] = ["standard", "top-secret"]
    assert (
        "teams[0].kubernetes.hyperpod-eks.priority_classes[1]: undeclared priority class ('top-secret') - "
        "one of ['urgent', 'standard', 'opportunistic']"
    ) in problems(data)
    team(data, "research")["kubernetes"]["hyperpod-eks"]["priority_classes"] = ["standard"]
    model = GovernanceModel.from_dict(data)
    research, production = (next(t for t in model.teams if t.name == name) for name in ("research", "production"))
    assert research.kubernetes["hyperpod-eks"].granted_priority_classes(model.priority_classes) == ("standard",)
    assert production.kubernetes["hyperpod-eks"].granted_priority_classes(model.priority_classes) == (
        "urgent",
        "standard",
        "opportunistic",
    )
