"""The probe of a Disabled HyperPod compute quota, offline: botocore's Stubber plays SageMaker and a
scripted kubectl plays the cluster (the Job it is sent is checked against what the admission
policies require); its verdicts, and that the Jobs are deleted and the quota set Enabled again."""

from __future__ import annotations

import json

import pytest

from constructs_lib.backends.hyperpod_eks.kubernetes import PRIORITY_CLASS_LABEL, QUEUE_LABEL
from tests.live import framework
from tests.live.framework import FAIL, INCONCLUSIVE, PASS
from tests.live.probes import hyperpod

from .conftest import TICK

CLUSTER = "arn:aws:sagemaker:us-east-1:111122223333:cluster/abc123"
QUOTA = "arn:aws:sagemaker:us-east-1:111122223333:compute-quota/q-research"
ARGS = dict(team_a="research", hyperpod_cluster_arn=CLUSTER, timeout_minutes=1.0, kube_context="hyperpod")
WAITS = int(ARGS["timeout_minutes"] * 60 // TICK)  # readings until the probe's timeout


class Kubectl:
    """The cluster as kubectl shows it: each Job created answers ``get`` from its kind's script
    (``started``: whether Kueue admitted it, per reading; the last one repeats)."""

    def __init__(self, **started: list[bool]):
        self.started = started
        self.created: dict[str, dict] = {}
        self.deleted: list[str] = []
        self.calls: list[list[str]] = []

    def __call__(self, argv, stdin):
        self.calls.append(list(argv))
        assert argv[:3] == ["kubectl", "--context", "hyperpod"]
        verb = argv[3:]
        if verb[:2] == ["create", "-f"]:
            job = json.loads(stdin)
            self.created[job["metadata"]["name"]] = job
            return f"job.batch/{job['metadata']['name']}\n"
        namespace, command, _, name = verb[1], verb[2], verb[3], verb[4]
        assert namespace == "hyperpod-ns-research" and name in self.created
        if command == "delete":
            self.deleted.append(name)
            return ""
        script = self.started[name.split("-")[2]]
        admitted = script.pop(0) if len(script) > 1 else script[0]
        status = {"startTime": "2026-12-01T09:00:00Z", "active": 1} if admitted else {}
        return json.dumps({"spec": {"suspend": not admitted}, "status": status})

    def kinds(self, names):
        return [n.split("-")[2] for n in names]


def _quota(sagemaker, state, version, status="Created"):
    sagemaker.add_response(
        "list_compute_quotas",
        {
            "ComputeQuotaSummaries": [
                {
                    "ComputeQuotaArn": QUOTA,
                    "ComputeQuotaId": "q-research",
                    "Name": "research",
                    "Status": status,
                    "ComputeQuotaTarget": {"TeamName": "research"},
                    "CreationTime": 1,
                }
            ]
        },
        {"ClusterArn": CLUSTER, "NameContains": "research"},
    )
    sagemaker.add_response(
        "describe_compute_quota",
        {
            "ComputeQuotaArn": QUOTA,
            "ComputeQuotaId": "q-research",
            "Name": "research",
            "ComputeQuotaVersion": version,
            "Status": status,
            "ComputeQuotaTarget": {"TeamName": "research"},
            "ActivationState": state,
            "CreationTime": 1,
        },
        {"ComputeQuotaId": "q-research"},
    )


def _switched(sagemaker, state, version):
    sagemaker.add_response(
        "update_compute_quota",
        {"ComputeQuotaArn": QUOTA, "ComputeQuotaVersion": version + 1},
        {"ComputeQuotaId": "q-research", "TargetVersion": version, "ActivationState": state},
    )


def run(context, kubectl, **args):
    (probe,) = hyperpod.PROBES
    made = context(**{**ARGS, **args})
    made.command = kubectl
    return framework.run_one(probe, made)


def _disabled_and_back(sagemaker):
    """Disabled at the version read, applied, and (the undo step) Enabled again at the version then read."""
    _quota(sagemaker, "Enabled", 3)
    _switched(sagemaker, "Disabled", 3)
    _quota(sagemaker, "Disabled", 4, status="Updating")
    _quota(sagemaker, "Disabled", 4, status="Updated")


def _enabled_again(sagemaker):
    _quota(sagemaker, "Disabled", 4, status="Updated")
    _switched(sagemaker, "Enabled", 4)


def test_a_task_that_starts_while_the_quota_is_disabled_passes_and_all_is_put_back(stubs, context):
    sagemaker = stubs("sagemaker")
    _disabled_and_back(sagemaker)
    _enabled_again(sagemaker)
    kubectl = Kubectl(enabled=[False, True], disabled=[True])
    result = run(context, kubectl)
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()
    assert kubectl.kinds(kubectl.created) == ["enabled", "disabled"]
    assert kubectl.kinds(kubectl.deleted) == ["disabled", "enabled"]


def test_a_task_held_while_the_quota_is_disabled_fails_the_row(stubs, context):
    sagemaker = stubs("sagemaker")
    _disabled_and_back(sagemaker)
    _enabled_again(sagemaker)
    kubectl = Kubectl(enabled=[True], disabled=[False])
    result = run(context, kubectl)
    assert result.verdict.outcome == FAIL and "understate the pause" in result.verdict.detail
    assert result.cleanup_failures == () and len(kubectl.deleted) == 2


def test_a_task_that_does_not_start_with_the_quota_enabled_proves_nothing_and_the_quota_is_untouched(stubs, context):
    _quota(stubs("sagemaker"), "Enabled", 3)
    kubectl = Kubectl(enabled=[False])
    result = run(context, kubectl)
    assert result.verdict.outcome == INCONCLUSIVE and "would prove nothing" in result.verdict.detail
    assert kubectl.kinds(kubectl.deleted) == ["enabled"]  # no UpdateComputeQuota was scripted: none was made


def test_a_quota_already_disabled_is_left_alone(stubs, context):
    _quota(stubs("sagemaker"), "Disabled", 3)
    kubectl = Kubectl()
    verdict = run(context, kubectl).verdict
    assert verdict.outcome == INCONCLUSIVE and kubectl.calls == []


def test_the_quota_is_enabled_again_when_disabling_it_answered_an_error(stubs, context):
    """The update's answer is lost after the quota changed: the undo step reads it and enables it."""
    sagemaker = stubs("sagemaker")
    _quota(sagemaker, "Enabled", 3)
    sagemaker.add_client_error("update_compute_quota", "InternalFailure", "timed out", http_status_code=500)
    _enabled_again(sagemaker)
    kubectl = Kubectl(enabled=[True])
    result = run(context, kubectl)
    assert result.verdict.outcome == INCONCLUSIVE and result.cleanup_failures == ()
    assert kubectl.kinds(kubectl.deleted) == ["enabled"]


def test_a_failed_undo_step_is_reported_and_the_jobs_are_still_deleted(stubs, context):
    sagemaker = stubs("sagemaker")
    _disabled_and_back(sagemaker)
    _quota(sagemaker, "Disabled", 4, status="Updated")
    sagemaker.add_client_error("update_compute_quota", "ConflictException", "the version changed")
    kubectl = Kubectl(enabled=[True], disabled=[True])
    result = run(context, kubectl)
    assert result.verdict.outcome == PASS and len(kubectl.deleted) == 2
    (failure,) = result.cleanup_failures
    assert failure.startswith("set team research's compute quota Enabled again: ")


@pytest.mark.parametrize("priority", [None, "research-training"])
def test_the_job_names_the_teams_local_queue_and_only_a_granted_class(stubs, context, priority):
    """What the admission policies require of a tenant's Job: its own local queue; a class only if granted."""
    sagemaker = stubs("sagemaker")
    _disabled_and_back(sagemaker)
    _enabled_again(sagemaker)
    kubectl = Kubectl(enabled=[True], disabled=[True])
    run(context, kubectl, hyperpod_priority_class=priority)
    for job in kubectl.created.values():
        labels = job["metadata"]["labels"]
        assert job["metadata"]["namespace"] == "hyperpod-ns-research"
        assert labels[QUEUE_LABEL] == "hyperpod-ns-research-localqueue"
        assert labels.get(PRIORITY_CLASS_LABEL) == priority
        assert job["spec"]["template"]["metadata"]["labels"] == labels
        assert job["spec"]["activeDeadlineSeconds"] == hyperpod.DEADLINE_SECONDS


def test_kubectl_runs_for_real_and_a_failure_raises_with_its_error():
    assert framework.run_command(["sh", "-c", "cat"], "job.batch/x") == "job.batch/x"
    with pytest.raises(RuntimeError, match="forbidden"):
        framework.run_command(["sh", "-c", "echo 'Error: jobs is forbidden' >&2; exit 1"])
