"""Tenant isolation on an ``eks_kueue`` cluster is HyperPod EKS's (issue 42 item 2): the same
namespace, RBAC, network policies, service account and admission policies, with the teams'
objects named ``gpu-team-<team>`` instead of task governance's ``hyperpod-ns-<team>``; and the
admission policies, evaluated with the real CEL (cel-expr-python, tests/hyperpod_eks/admission.py),
keep each team to its own namespace's queue and granted priority classes and to its Pod Security
level."""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest
import yaml

from constructs_lib import cli
from constructs_lib.backends.eks_kueue import kueue
from constructs_lib.backends.hyperpod_eks import kubernetes as hyperpod
from constructs_lib.member import team_setup, training_job_manifest
from constructs_lib.model import KubernetesTenancy, PodSecurityLevel
from constructs_lib.organisation.audit import audit
from constructs_lib.tenancy.kubernetes import PRIORITY_CLASS_LABEL, QUEUE_LABEL, TENANT_QUEUE_POLICY
from tests.hyperpod_eks.admission import Admission
from tests.hyperpod_eks.test_admission_cel import as_workload, changed, gpu_pod, hardened, sc

from .org import EXAMPLE, POOL, example_model

MODEL = example_model()
EKS = MODEL.pool(POOL)
TEAMS = {t.name: t for t in MODEL.teams_in(POOL)}


def as_hyperpod_names(objects: list[dict]) -> str:
    """HyperPod EKS's objects, with its tenants renamed as an eks_kueue cluster names them."""
    text = json.dumps(objects, sort_keys=True)
    return text.replace(hyperpod.TENANTS.namespace_prefix, kueue.NAMES.namespace_prefix).replace(
        hyperpod.TENANTS.group_suffix, kueue.NAMES.group_suffix
    )


@pytest.mark.parametrize(
    "tenancy",
    [
        KubernetesTenancy(),
        KubernetesTenancy(pod_security=PodSecurityLevel.RESTRICTED, gpu_quota=32),
        KubernetesTenancy(priority_classes=("standard",)),
    ],
    ids=["baseline", "restricted-with-gpu-quota", "one-class"],
)
def test_each_teams_isolation_is_hyperpod_eks_s_under_this_backends_names(tenancy):
    tenants = kueue.tenants(EKS.model_copy(update={"operator_namespaces": hyperpod.OPERATOR_NAMESPACES}))
    granted = tenancy.granted_priority_classes(MODEL.priority_classes)
    ours = tenants.team_objects("research", tenancy, granted)
    assert json.dumps(ours, sort_keys=True) == as_hyperpod_names(hyperpod.team_objects("research", tenancy, granted))
    assert {o["kind"] for o in ours} >= {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "NetworkPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert json.dumps(tenants.pod_security_objects(), sort_keys=True) == as_hyperpod_names(
        hyperpod.pod_security_objects()
    )


def test_the_pools_operator_namespaces_are_the_ones_its_pods_may_reach():
    [operators] = [
        p for p in kueue.tenants(EKS).network_policies("research") if p["metadata"]["name"] == "allow-operators"
    ]
    [rule] = operators["spec"]["ingress"]
    assert rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kueue-system", "kubeflow"]


# --- what the shipped policies admit, by the real CEL -----------------------------------------

SHIPPED = kueue.tenants(EKS).pod_security_objects() + [
    o for team in TEAMS.values() for o in kueue.team_objects(EKS, team, MODEL.groups, MODEL.priority_classes)
]
ADMISSION = Admission([o for o in SHIPPED if o["apiVersion"].startswith("admissionregistration.k8s.io/")])
NS = {team: kueue.namespace(team) for team in TEAMS}


def submitted(obj: dict, queue: str | None, priority: str | None = None) -> dict:
    obj = copy.deepcopy(obj)
    labels = obj.setdefault("metadata", {}).setdefault("labels", {})
    for key, value in ((QUEUE_LABEL, queue), (PRIORITY_CLASS_LABEL, priority)):
        if value is not None:
            labels[key] = value
    return obj


def denials(obj: dict, namespace: str, **kwargs) -> list[str]:
    return [d.policy for d in ADMISSION.review(obj, namespace, **kwargs)]


def job(pod: dict | None = None) -> dict:
    pod = pod or gpu_pod()
    return as_workload("Job", pod, pod)


def test_a_team_submits_to_its_own_local_queue_and_no_other():
    own = kueue.NAMES.local_queue("research")
    assert denials(submitted(job(), own), NS["research"]) == []
    for wrong in (
        kueue.NAMES.local_queue("training"),  # another team's queue
        hyperpod.TENANTS.local_queue("research"),  # the same team's name on a HyperPod cluster
        None,  # no queue: Kueue would leave the job alone, outside every quota
    ):
        assert denials(submitted(job(), wrong), NS["research"]) == [TENANT_QUEUE_POLICY], wrong


def test_a_team_names_only_the_priority_classes_it_is_granted():
    own = kueue.NAMES.local_queue("production")  # granted urgent and standard
    for granted in ("urgent-priority", "standard-priority"):
        assert denials(submitted(job(hardened(gpu_pod())), own, granted), NS["production"]) == []
    refused = denials(submitted(job(hardened(gpu_pod())), own, "opportunistic-priority"), NS["production"])
    assert refused == ["gpu-governance-priority-production"]
    # research is granted every class: production's grant binds production's namespace only
    research = kueue.NAMES.local_queue("research")
    assert denials(submitted(job(), research, "opportunistic-priority"), NS["research"]) == []


def test_pod_security_holds_at_each_teams_level_and_in_undeclared_tenant_namespaces():
    production = kueue.NAMES.local_queue("production")  # restricted
    # refused once per hardening the plain pod lacks, by the restricted policy alone
    assert set(denials(submitted(job(gpu_pod()), production), NS["production"])) == {
        "gpu-governance-pod-security-restricted"
    }
    assert denials(submitted(job(hardened(gpu_pod())), production), NS["production"]) == []
    privileged = changed(gpu_pod(), lambda s, c, m: sc(c).update(privileged=True))
    newcomer = kueue.NAMES.local_queue("newcomer")
    relabelled = {"pod-security.kubernetes.io/enforce": "privileged"}
    assert denials(submitted(privileged, newcomer), "gpu-team-newcomer", namespace_labels=relabelled) == [
        "gpu-governance-pod-security-baseline"
    ]


# --- what a member submits ------------------------------------------------------------------


@pytest.mark.parametrize("team", sorted(TEAMS))
def test_the_members_job_is_valid_and_admitted_in_its_namespace_at_its_level(team):
    """`team submit-example --backend eks_kueue`'s Job (member/kueue.py) from the team's setup:
    valid for the cluster's version, in its namespace, on its queue, admitted by every shipped
    policy (production is restricted and granted urgent and standard)."""
    setup = team_setup(MODEL, team, pool=POOL)
    job = training_job_manifest(
        setup,
        job_name=f"{team}-llama",
        priority_class="standard",
        image="111122223333.dkr.ecr.us-east-1.amazonaws.com/llama:1",
        command=["torchrun", "train.py"],
        instance_type="p5.48xlarge",
        gpus=8,
    )
    kubernetes_validate.validate(job, EKS.kubernetes_version, strict=True)
    assert (job["metadata"]["namespace"], job["metadata"]["labels"][QUEUE_LABEL]) == (
        NS[team],
        kueue.NAMES.local_queue(team),
    )
    assert job["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "standard-priority"
    assert ADMISSION.review(job, NS[team]) == []
    assert denials(job, NS["training" if team != "training" else "research"]) != []  # not in another's namespace


def test_audit_shows_each_team_its_own_group_namespace_and_queue_only():
    rows = [r for r in audit(MODEL) if r.layer in ("cluster", "workload") and r.team in TEAMS]
    for team in TEAMS:
        own = [r for r in rows if r.team == team]
        cluster = [r for r in own if r.layer == "cluster"]
        assert any(r.who == f"gpu-team-{team}-members" and "namespace gpu-team-" + team in r.on for r in cluster)
        others = {f"gpu-team-{t}" for t in TEAMS if t != team}
        assert not [r for r in own if any(f"namespace {ns} " in f"{r.on} " for ns in others)]
        [queue] = [r for r in own if r.layer == "workload"]
        cohort = "eks-kueue" if team == "production" else "eks-kueue-vision"
        assert f"ClusterQueue gpu-team-{team}-clusterqueue in cohort {cohort}" in queue.on


def test_submit_example_prints_a_job_the_teams_namespace_admits(capsys):
    image = "111122223333.dkr.ecr.us-east-1.amazonaws.com/llama:1"
    argv = ["team", "submit-example", "production", "--backend", "eks_kueue", "--config", str(EXAMPLE)]
    assert cli.main([*argv, "--priority-class", "urgent", "--gpus", "8", "--image", image]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    assert job["metadata"]["namespace"] == NS["production"]
    assert ADMISSION.review(job, NS["production"]) == []
    # a class production is not granted: refused at submission by the cluster, as the team is told
    assert cli.main([*argv, "--priority-class", "opportunistic", "--gpus", "8", "--image", image]) == 0
    refused = yaml.safe_load(capsys.readouterr().out)
    assert denials(refused, NS["production"]) == ["gpu-governance-priority-production"]
