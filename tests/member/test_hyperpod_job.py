"""The HyperPod EKS job manifest: the team's namespace, local queue and priority class, valid for
every supported Kubernetes version, and admitted by the policies the library ships."""

from __future__ import annotations

import kubernetes_validate
import pytest

from constructs_lib.backends.hyperpod_eks import kubernetes, kueue
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import team_setup, training_job_manifest
from constructs_lib.model import KubernetesTenancy, PodSecurityLevel
from tests.hyperpod_eks.admission import JOB_CONTROLLER, Admission

IMAGE = "111122223333.dkr.ecr.us-east-1.amazonaws.com/gpu-governance/research:1"
CLASSES = ("urgent", "standard", "opportunistic")  # the reference organisation's priority classes, all granted
# The shipped policies for three tenancies: baseline, restricted, and dedicated nodes.
TENANCIES = {
    "research": KubernetesTenancy(),
    "training": KubernetesTenancy(pod_security=PodSecurityLevel.RESTRICTED),
    "production": KubernetesTenancy(dedicated_instance_groups=("production-p5",)),
}
ADMISSION = Admission(
    kubernetes.pod_security_objects()
    + [o for t, k in TENANCIES.items() for o in kubernetes.team_objects(t, k, CLASSES)]
)


def manifest(model, team: str, **overrides):
    setup = team_setup(model, team, backend="hyperpod_eks")
    arguments = {
        "job_name": f"{team}-llama",
        "priority_class": "urgent",
        "image": IMAGE,
        "command": ["torchrun", "train.py"],
        "instance_type": "ml.p5.48xlarge",
        "gpus": 8,
        "dedicated_team_nodes": bool(TENANCIES[team].dedicated_instance_groups),
        **overrides,
    }
    return training_job_manifest(setup, **arguments)


@pytest.mark.parametrize("version", ["1.32", "1.33", "1.34"])
def test_the_job_is_valid_for_every_supported_version(model, version):
    for team in TENANCIES:
        kubernetes_validate.validate(manifest(model, team), version, strict=True)


def test_the_job_goes_to_the_teams_namespace_local_queue_and_priority_class(model):
    job = manifest(model, "research")
    assert job["metadata"]["namespace"] == "hyperpod-ns-research"
    cost_centre = next(t.cost_centre for t in model.teams if t.name == "research")
    assert cost_centre
    assert job["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "hyperpod-ns-research-localqueue",
        "kueue.x-k8s.io/priority-class": "urgent-priority",
        "gpu-governance/team": "research",
        "gpu-governance/cost-centre": cost_centre,
    }
    # The pods carry the team and cost centre too: cost tools allocate by the pods' labels.
    assert job["spec"]["template"]["metadata"] == {
        "labels": {"gpu-governance/team": "research", "gpu-governance/cost-centre": cost_centre},
        "annotations": {"gpu-governance/cost-centre": cost_centre},
    }
    assert job["spec"]["suspend"] is True  # Kueue starts it on admission
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == kubernetes.WORKLOAD_SERVICE_ACCOUNT


@pytest.mark.parametrize("team", sorted(TENANCIES))
def test_the_shipped_admission_policies_admit_the_job_at_every_pod_security_level(model, team):
    job = manifest(model, team)
    assert ADMISSION.review(job, kueue.namespace(team)) == []
    assert review_pod(pod_of(job), kueue.namespace(team)) == []


def pod_of(job: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": job["spec"]["template"]["spec"]}


def review_pod(pod: dict, namespace: str) -> list:
    """The refusals of a Job's pod as the job controller makes it, once Kueue admits the Job."""
    return ADMISSION.review(pod, namespace, username=JOB_CONTROLLER)


def test_a_team_with_dedicated_nodes_must_ask_for_them_and_another_team_may_not(model):
    # The dedicated-nodes policy checks pods (the Job's pods are created on admission).
    assert review_pod(pod_of(manifest(model, "production", dedicated_team_nodes=False)), "hyperpod-ns-production")
    intruder = pod_of(manifest(model, "research"))
    intruder["spec"] = {
        **intruder["spec"],
        "tolerations": [
            {"key": kubernetes.DEDICATED_NODE_KEY, "operator": "Equal", "value": "production", "effect": "NoSchedule"}
        ],
    }
    assert review_pod(intruder, "hyperpod-ns-research")


def test_unknown_class_and_instance_type_are_refused_in_one_line(model):
    with pytest.raises(
        GovernanceError, match=r"^priority_class: not a priority class of the organisation \('vip'\) - one of"
    ):
        manifest(model, "research", priority_class="vip")
    with pytest.raises(
        GovernanceError, match=r"^instance_type: not in team research's compute quota \('ml.g6e.12xlarge'\) - one of"
    ):
        manifest(model, "research", instance_type="ml.g6e.12xlarge")
