"""A team's run-time limit (max_run_minutes, issue 43 item 3) held at admission on both Kubernetes
backends, with the policies the constructs apply evaluated by the real CEL (cel-expr-python,
admission.py): on EKS with Kueue every workload of a limited team must carry Kueue's
``kueue.x-k8s.io/max-exec-time-seconds`` where Kueue reads it, at most its class's limit, and the
value Kueue makes of it is a Workload Kueue's own CRD accepts; on HyperPod EKS its Job, pod or
Kubeflow run policy must carry ``activeDeadlineSeconds``, at most the limit, and the Job Kubernetes'
own schema accepts."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from constructs_lib.backends.eks_kueue import BACKEND as EKS_KUEUE, kueue
from constructs_lib.backends.hyperpod_eks import BACKEND as HYPERPOD_EKS, kubernetes
from constructs_lib.model import GovernanceModel, KubernetesTenancy
from constructs_lib.model.explain import caveats, deals
from constructs_lib.model.run_limits import MAX_RUN_MINUTES
from constructs_lib.tenancy.run_time import ACTIVE_DEADLINE, MAX_EXEC_TIME_LABEL, run_time_limits
from tests.eks_kueue import crd
from tests.eks_kueue.org import POOL, example_data

from .admission import JOB_CONTROLLER, RESOURCES, Admission, CelError
from .test_admission_cel import QUEUED_KINDS, as_workload, gpu_pod, pod_templates

LIMITED, FREE = "research", "training"
TEAM_LIMIT, OPPORTUNISTIC = 60 * 60, 30 * 60  # seconds: the team's 60 min, the class's 30
PRIORITY = kubernetes.PRIORITY_CLASS_LABEL


def team(model: GovernanceModel, name: str):
    return next(t for t in model.teams if t.name == name)


def model() -> GovernanceModel:
    """examples/org-eks-kueue.yaml with research limited to 60 min a job, opportunistic to 30."""
    data = example_data()
    next(c for c in data["priority_classes"] if c["name"] == "opportunistic")["max_run_minutes"] = 30
    next(t for t in data["teams"] if t["name"] == LIMITED)["max_run_minutes"] = 60
    return GovernanceModel.from_dict(data)


MODEL = model()
EKS = MODEL.pool(POOL)
KUEUE_OBJECTS = kueue.tenants(EKS).pod_security_objects() + [
    o for t in MODEL.teams_in(POOL) for o in kueue.team_objects(EKS, t, MODEL.groups, MODEL.priority_classes)
]
KUEUE_ADMISSION = Admission(KUEUE_OBJECTS)
POLICY = f"gpu-governance-run-time-{LIMITED}"


def refused(admission: Admission, obj: dict, namespace: str, **kwargs) -> bool:
    """Whether the run-time policy refuses ``obj`` (the other policies are judged elsewhere)."""
    return any(d.policy == POLICY for d in admission.review(obj, namespace, **kwargs))


# --- EKS with Kueue: Kueue's maximum execution time --------------------------------------------


def exec_label_holders(obj: dict) -> list[dict]:
    """The metadata Kueue reads the label from: a CronJob's job template, a Deployment's or
    StatefulSet's pod template (Kueue manages their pods one by one), else the object's own."""
    if obj["kind"] == "CronJob":
        return [obj["spec"]["jobTemplate"].setdefault("metadata", {})]
    if obj["kind"] in ("Deployment", "StatefulSet"):
        return [obj["spec"]["template"]["metadata"]]
    return [obj["metadata"]]


def with_exec_time(obj: dict, value: str | None, where: str = "holder") -> dict:
    obj = copy.deepcopy(obj)
    targets = exec_label_holders(obj) if where == "holder" else [obj["metadata"]]
    if where == "templates":
        targets = [t["metadata"] for t in pod_templates(obj)]
    for metadata in targets:
        if value is not None:
            metadata.setdefault("labels", {})[MAX_EXEC_TIME_LABEL] = value
    return obj


def with_priority(obj: dict, priority_class: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("labels", {})[PRIORITY] = priority_class
    return obj


KUEUE_NS = {team: kueue.NAMES.namespace(team) for team in (LIMITED, FREE)}


@pytest.mark.parametrize("kind", QUEUED_KINDS)
def test_on_eks_kueue_every_workload_of_a_limited_team_carries_a_max_exec_time_at_most_its_limit(kind):
    workload = as_workload(kind, gpu_pod(), gpu_pod())
    ns = KUEUE_NS[LIMITED]
    assert refused(KUEUE_ADMISSION, workload, ns)  # none: Kueue would let it run for ever
    assert not refused(KUEUE_ADMISSION, with_exec_time(workload, str(TEAM_LIMIT)), ns)  # at the limit
    assert not refused(KUEUE_ADMISSION, with_exec_time(workload, "1"), ns)
    assert refused(KUEUE_ADMISSION, with_exec_time(workload, str(TEAM_LIMIT + 1)), ns)
    # Only values Kueue reads as the same positive number (strconv.ParseInt, > 0) and the CEL does too.
    for bad in ("0", "-60", "+60", "060", " 60", "60s", "1e3", "", "99999999999"):
        assert refused(KUEUE_ADMISSION, with_exec_time(workload, bad), ns), bad
    # Only where Kueue reads it.
    if kind in ("CronJob", "Deployment", "StatefulSet"):
        assert refused(KUEUE_ADMISSION, with_exec_time(workload, str(TEAM_LIMIT), "object"), ns)
    elif kind != "Pod":
        assert refused(KUEUE_ADMISSION, with_exec_time(workload, str(TEAM_LIMIT), "templates"), ns)
    # Its class's limit where it is tighter, wherever the workload names the class.
    opportunistic = with_priority(with_exec_time(workload, str(OPPORTUNISTIC + 1)), "opportunistic-priority")
    assert refused(KUEUE_ADMISSION, opportunistic, ns)
    assert not refused(KUEUE_ADMISSION, with_exec_time(opportunistic, str(OPPORTUNISTIC)), ns)
    named = with_exec_time(workload, str(OPPORTUNISTIC + 1))
    for template in pod_templates(named):
        template["spec"]["priorityClassName"] = "opportunistic-priority"
    assert refused(KUEUE_ADMISSION, named, ns)
    # A class no declared class has (the priority policy refuses it too) is held as naming none.
    assert refused(KUEUE_ADMISSION, with_priority(with_exec_time(workload, str(TEAM_LIMIT + 1)), "made-up"), ns)
    # A team with no limit is not held; nor are another team's workloads by this team's policy.
    assert not refused(KUEUE_ADMISSION, workload, KUEUE_NS[FREE])


def test_on_eks_kueue_the_limit_cannot_be_raised_or_dropped_by_an_update():
    job = with_exec_time(as_workload("Job", gpu_pod(), gpu_pod()), str(TEAM_LIMIT))
    ns = KUEUE_NS[LIMITED]
    raised = with_exec_time(job, str(TEAM_LIMIT * 2))
    assert refused(KUEUE_ADMISSION, raised, ns, operation="UPDATE", old_object=job)
    dropped = copy.deepcopy(job)
    del dropped["metadata"]["labels"][MAX_EXEC_TIME_LABEL]
    assert refused(KUEUE_ADMISSION, dropped, ns, operation="UPDATE", old_object=job)


def test_pods_the_clusters_controllers_make_from_a_checked_workload_need_no_label_of_their_own():
    pod = gpu_pod()
    assert refused(KUEUE_ADMISSION, pod, KUEUE_NS[LIMITED])  # a tenant's own pod
    assert not refused(KUEUE_ADMISSION, pod, KUEUE_NS[LIMITED], username=JOB_CONTROLLER)
    # a tenant's own service account is no controller
    tenant_sa = f"system:serviceaccount:{KUEUE_NS[LIMITED]}:gpu-workload"
    assert refused(KUEUE_ADMISSION, pod, KUEUE_NS[LIMITED], username=tenant_sa)


def test_a_class_with_no_limit_leaves_a_workload_naming_it_unheld_and_one_naming_none_held_to_the_longest():
    data = example_data()
    for c in data["priority_classes"]:
        c["max_run_minutes"] = {"urgent": None, "standard": 120, "opportunistic": 30}[c["name"]]
        if c["max_run_minutes"] is None:
            del c["max_run_minutes"]
    classes = GovernanceModel.from_dict(data)
    limited = team(classes, LIMITED)
    limits = run_time_limits(limited, classes.pool(POOL), classes.priority_classes)
    assert limits is not None and limits.unnamed is None  # urgent has none: the longest is none
    assert dict(limits.by_class) == {"urgent-priority": None, "standard-priority": 7200, "opportunistic-priority": 1800}
    admission = Admission(
        kueue.tenants(EKS).pod_security_objects()
        + kueue.team_objects(classes.pool(POOL), limited, classes.groups, classes.priority_classes)
    )
    job = as_workload("Job", gpu_pod(), gpu_pod())
    ns = KUEUE_NS[LIMITED]
    assert not refused(admission, job, ns) and not refused(admission, with_priority(job, "urgent-priority"), ns)
    assert refused(admission, with_priority(job, "standard-priority"), ns)
    assert not refused(admission, with_priority(with_exec_time(job, "7200"), "standard-priority"), ns)
    # Naming two classes (the label and a pod's PriorityClass) holds it to the tighter.
    both = with_priority(with_exec_time(job, "7200"), "standard-priority")
    both["spec"]["template"]["spec"]["priorityClassName"] = "opportunistic-priority"
    assert refused(admission, both, ns)
    assert run_time_limits(team(MODEL, FREE), classes.pool(POOL), []) is None  # no limit anywhere: no policy
    assert not [o for o in kueue.team_objects(EKS, team(MODEL, FREE), MODEL.groups, []) if "run-time" in str(o)]


@pytest.mark.skipif(
    crd.CRDS is None or not (crd.CRDS / "kueue.x-k8s.io_workloads.yaml").exists(),
    reason=f"needs Kueue {crd.KUEUE_RELEASE}'s Workload CRD in $KUEUE_CRDS or ../shared/kueue-crds (docs/eks-kueue.md)",
)
@pytest.mark.parametrize("seconds", [1, TEAM_LIMIT, MAX_RUN_MINUTES * 60])
def test_every_value_the_policy_admits_is_a_maximum_execution_time_kueues_workload_crd_accepts(seconds):
    """Kueue copies the label into its Workload's spec.maximumExecutionTimeSeconds (int32, at
    least 1): the largest limit the governance file allows fits, so the workload Kueue makes of
    an admitted job is valid, and deactivated after that long admitted (Kueue's docs, Workload)."""
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-llama", "namespace": KUEUE_NS[LIMITED]},
        "spec": {
            "queueName": kueue.NAMES.local_queue(LIMITED),
            "maximumExecutionTimeSeconds": seconds,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "trainer", "image": "llama:1"}]}},
                }
            ],
        },
    }
    assert crd.validate(workload) == []
    assert crd.validate({**workload, "spec": {**workload["spec"], "maximumExecutionTimeSeconds": 0}})  # Kueue's floor
    assert seconds < 2**31  # Kueue parses the label as an int32


def test_the_eks_kueue_descriptor_no_longer_says_the_limit_is_not_held():
    assert EKS_KUEUE.max_run_caveat is None
    lines = [line for line in caveats(MODEL) if "max_run_minutes" in line]
    assert lines == []
    shown = {d.team: d.max_run for d in deals(MODEL) if d.pool == POOL}
    assert shown[LIMITED] == "60 min per job; opportunistic 30 min"
    assert EKS_KUEUE.user_limit_caveat  # a member's own limit is still not held there


# --- HyperPod EKS: Kubernetes' activeDeadlineSeconds -------------------------------------------

TENANCY = KubernetesTenancy()
LIMITS = run_time_limits(team(MODEL, LIMITED), EKS, MODEL.priority_classes)
HYPERPOD_ADMISSION = Admission(
    kubernetes.pod_security_objects()
    + kubernetes.team_objects(LIMITED, TENANCY, ("urgent", "standard", "opportunistic"), LIMITS)
)
HYPERPOD_NS = kubernetes.TENANTS.namespace(LIMITED)
# The kinds whose whole run a deadline stops (ACTIVE_DEADLINE), and where each says it.
DEADLINED = {
    "Pod": ("spec",),
    "Job": ("spec",),
    "CronJob": ("spec", "jobTemplate", "spec"),
    **{kind: ("spec", "runPolicy") for kind in ("PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob")},
}
NOT_DEADLINED = ("HyperPodPyTorchJob", "JobSet", "Deployment", "StatefulSet")


def with_deadline(obj: dict, seconds) -> dict:
    obj = copy.deepcopy(obj)
    place = obj
    for key in DEADLINED[obj["kind"]]:
        place = place.setdefault(key, {})
    place["activeDeadlineSeconds"] = seconds
    return obj


def test_the_deadlined_kinds_are_the_policys_and_the_rest_are_the_caveats():
    assert {RESOURCES[kind][::2] for kind in DEADLINED} == {("", "pods"), *ACTIVE_DEADLINE.workloads}
    assert set(DEADLINED) | set(NOT_DEADLINED) == set(QUEUED_KINDS)
    for kind in NOT_DEADLINED:
        assert kind in HYPERPOD_EKS.max_run_caveat, kind


@pytest.mark.parametrize("kind", sorted(DEADLINED))
def test_on_hyperpod_eks_every_deadlined_workload_of_a_limited_team_says_a_deadline_at_most_its_limit(kind):
    workload = as_workload(kind, gpu_pod(), gpu_pod())
    assert refused(HYPERPOD_ADMISSION, workload, HYPERPOD_NS)
    assert not refused(HYPERPOD_ADMISSION, with_deadline(workload, TEAM_LIMIT), HYPERPOD_NS)
    assert refused(HYPERPOD_ADMISSION, with_deadline(workload, TEAM_LIMIT + 1), HYPERPOD_NS)
    for bad in (0, -1):
        assert refused(HYPERPOD_ADMISSION, with_deadline(workload, bad), HYPERPOD_NS), bad
    with pytest.raises(CelError):  # cannot be evaluated: the API server refuses (failurePolicy Fail)
        refused(HYPERPOD_ADMISSION, with_deadline(workload, "60"), HYPERPOD_NS)
    opportunistic = with_priority(with_deadline(workload, OPPORTUNISTIC + 1), "opportunistic-priority")
    if kind == "CronJob":  # Kueue reads a CronJob's Jobs' labels: its job template's
        opportunistic = with_deadline(workload, OPPORTUNISTIC + 1)
        opportunistic["spec"]["jobTemplate"]["metadata"] = {"labels": {PRIORITY: "opportunistic-priority"}}
    assert refused(HYPERPOD_ADMISSION, opportunistic, HYPERPOD_NS)
    assert not refused(HYPERPOD_ADMISSION, with_deadline(opportunistic, OPPORTUNISTIC), HYPERPOD_NS)
    # The pod template's own deadline is not the Job's: a Job's pods are replaced under it.
    if kind == "Job":
        templated = copy.deepcopy(workload)
        templated["spec"]["template"]["spec"]["activeDeadlineSeconds"] = TEAM_LIMIT
        assert refused(HYPERPOD_ADMISSION, templated, HYPERPOD_NS)
    if kind != "Pod":  # the controllers' pods of a deadlined workload
        assert not refused(HYPERPOD_ADMISSION, gpu_pod(), HYPERPOD_NS, username=JOB_CONTROLLER)


@pytest.mark.parametrize("kind", NOT_DEADLINED)
def test_on_hyperpod_eks_kinds_with_no_deadline_are_not_refused_and_the_caveat_says_so(kind):
    assert not refused(HYPERPOD_ADMISSION, as_workload(kind, gpu_pod(), gpu_pod()), HYPERPOD_NS)


def test_a_deadline_raised_by_an_update_is_refused():
    job = with_deadline(as_workload("Job", gpu_pod(), gpu_pod()), TEAM_LIMIT)
    raised = with_deadline(job, TEAM_LIMIT * 2)
    assert refused(HYPERPOD_ADMISSION, raised, HYPERPOD_NS, operation="UPDATE", old_object=job)


@pytest.mark.parametrize("kind", ["Job", "CronJob", "Pod"])
def test_the_admitted_deadline_is_where_kubernetes_schema_has_it(kind):
    workload = with_deadline(as_workload(kind, gpu_pod(), gpu_pod()), TEAM_LIMIT)
    workload["metadata"]["name"] = "llama"
    if kind != "Pod":
        pod_templates(workload)[0]["spec"]["restartPolicy"] = "Never"
    kubernetes_validate.validate(workload, "1.33", strict=True)


# --- what a member submits -----------------------------------------------------------------


def member_job(priority_class: str, **kwargs) -> dict:
    from constructs_lib.member import team_setup, training_job_manifest

    return training_job_manifest(
        team_setup(MODEL, LIMITED, pool=POOL),
        job_name="research-llama",
        priority_class=priority_class,
        image="111122223333.dkr.ecr.us-east-1.amazonaws.com/llama:1",
        command=["torchrun", "train.py"],
        instance_type="p5.48xlarge",
        gpus=8,
        **kwargs,
    )


@pytest.mark.parametrize("priority_class, limit", [("standard", TEAM_LIMIT), ("opportunistic", OPPORTUNISTIC)])
def test_a_members_job_says_its_class_limit_both_ways_and_every_shipped_policy_admits_it(priority_class, limit):
    job = member_job(priority_class)
    assert (
        job["metadata"]["labels"][MAX_EXEC_TIME_LABEL] == str(limit) and job["spec"]["activeDeadlineSeconds"] == limit
    )
    kubernetes_validate.validate(job, EKS.kubernetes_version, strict=True)
    assert KUEUE_ADMISSION.review(job, KUEUE_NS[LIMITED]) == []
    # the same Job under HyperPod's names passes the deadline policy
    hyperpod_job = copy.deepcopy(job)
    hyperpod_job["metadata"]["labels"][kubernetes.QUEUE_LABEL] = kubernetes.TENANTS.local_queue(LIMITED)
    assert not refused(HYPERPOD_ADMISSION, hyperpod_job, HYPERPOD_NS)
    shorter = member_job(priority_class, max_runtime_seconds=600)
    assert shorter["spec"]["activeDeadlineSeconds"] == 600 and KUEUE_ADMISSION.review(shorter, KUEUE_NS[LIMITED]) == []


def test_a_member_asking_for_longer_than_the_limit_is_told_before_submitting():
    from constructs_lib.core.errors import GovernanceError

    with pytest.raises(GovernanceError) as error:
        member_job("opportunistic", max_runtime_seconds=OPPORTUNISTIC + 1)
    assert "max_runtime_seconds" in str(error.value) and f"at most {OPPORTUNISTIC}" in str(error.value)
