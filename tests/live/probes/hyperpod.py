"""SageMaker HyperPod task governance (register section ``hyperpod.*``): what a compute quota set
``Disabled`` (as the reclaim controller sets it at a GPU-hour limit or a pause,
``reclaim/gpu_hours.py``) does to a task of the team's that is queued while it is. No page says;
docs/governance-file.md and ``gpu-governance status`` tell users the team's queued tasks may still
start.

Through the caller's kubeconfig (``kubectl``; ``--kube-context`` picks the cluster's context) it
creates small Jobs in team A's namespace, naming the team's Kueue local queue as the admission
policies require. A first one with the quota Enabled must start, or the probe proves nothing; then
the quota is set Disabled at the version read, as the controller does, and a second one is
created. The Jobs are deleted and the quota set Enabled again whatever happens.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from constructs_lib.backends.hyperpod_eks.kubernetes import PRIORITY_CLASS_LABEL, QUEUE_LABEL
from constructs_lib.backends.hyperpod_eks.kueue import local_queue, namespace
from gpu_governance_runtime.backends.hyperpod_eks.gpu_hours import ComputeQuotaSwitch
from gpu_governance_runtime.quotas import describe_team_compute_quota  # plain Python: no aws_cdk

from ..framework import Cleanup, Context, Option, Probe, Verdict, failed, inconclusive, passed
from ._batch import TEAM_A, TIMEOUT

CLUSTER = Option("--hyperpod-cluster-arn", "the HyperPod EKS cluster (ARN) with a compute quota for team A")
KUBE_CONTEXT = Option("--kube-context", "the kubeconfig context of its EKS cluster (default: the current context)")
POD_IMAGE = Option(
    "--pod-image",
    "an image with sleep that the cluster's nodes can pull",
    default="public.ecr.aws/docker/library/busybox:stable",
)
PRIORITY_CLASS = Option(
    "--hyperpod-priority-class", "a priority class the governance file grants team A on HyperPod (default: none)"
)
OPTIONS = [TEAM_A, TIMEOUT, CLUSTER, KUBE_CONTEXT, POD_IMAGE, PRIORITY_CLASS]

RUN_SECONDS = 60  # each pod sleeps this long
DEADLINE_SECONDS = 120  # the Job's activeDeadlineSeconds: what a pod may run at most
SETTLED = ("Created", "Updated")  # a compute quota's Status once a change is applied


def _kubectl(context: Context, *argv: str, stdin: str | None = None) -> str:
    where = ("--context", context.args.kube_context) if context.args.kube_context else ()
    return context.command(["kubectl", *where, *argv], stdin)


def _job(context: Context, name: str) -> dict[str, Any]:
    """A Job of one pod of team A's that sleeps RUN_SECONDS, in its namespace and local queue."""
    args, team = context.args, context.args.team_a
    labels = {
        QUEUE_LABEL: local_queue(team),
        **({PRIORITY_CLASS_LABEL: args.hyperpod_priority_class} if args.hyperpod_priority_class else {}),
    }
    locked_down = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    small = {"cpu": "100m", "memory": "64Mi"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace(team), "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "sleep",
                            "image": args.pod_image,
                            "command": ["sleep", str(RUN_SECONDS)],
                            "resources": {"requests": small, "limits": small},
                            "securityContext": locked_down,
                        }
                    ],
                },
            },
        },
    }


def _create(context: Context, cleanup: Cleanup, kind: str) -> str:
    name = f"verify-live-{kind}-{uuid.uuid4().hex[:8]}"
    ns = namespace(context.args.team_a)
    _kubectl(context, "create", "-f", "-", "-o", "name", stdin=json.dumps(_job(context, name)))
    cleanup.add(
        f"delete job {ns}/{name}",
        lambda: _kubectl(context, "-n", ns, "delete", "job", name, "--ignore-not-found", "--wait=false"),
    )
    return name


def _started(context: Context, name: str) -> bool:
    """Whether the Job started (Kueue admitted it: not suspended, a start time) within the timeout."""
    deadline = context.clock() + context.args.timeout_minutes * 60
    while True:
        job = json.loads(_kubectl(context, "-n", namespace(context.args.team_a), "get", "job", name, "-o", "json"))
        if not job.get("spec", {}).get("suspend") and job.get("status", {}).get("startTime"):
            return True
        if context.clock() >= deadline:
            return False
        context.sleep(15)


def _settled(context: Context, sagemaker: Any) -> dict[str, Any]:
    """The team's compute quota once its last change is applied (or as it is at the timeout)."""
    deadline = context.clock() + context.args.timeout_minutes * 60
    while True:
        quota = describe_team_compute_quota(sagemaker, context.args.hyperpod_cluster_arn, context.args.team_a)
        if quota.get("Status") in SETTLED or context.clock() >= deadline:
            return quota
        context.sleep(15)


def _enable_again(context: Context, sagemaker: Any) -> None:
    switch = ComputeQuotaSwitch(sagemaker, context.args.hyperpod_cluster_arn, context.args.team_a)
    if not switch.enabled():
        switch.set(True)


def disabled_compute_quota_task(context: Context, cleanup: Cleanup) -> Verdict:
    args, team = context.args, context.args.team_a
    sagemaker = context.client("sagemaker", None)
    switch = ComputeQuotaSwitch(sagemaker, args.hyperpod_cluster_arn, team)
    if not switch.enabled():
        return inconclusive(f"team {team}'s compute quota was Disabled before the probe: nothing changed")
    control = _create(context, cleanup, "enabled")
    if not _started(context, control):
        return inconclusive(
            f"job {control} did not start in {args.timeout_minutes:g} minutes with team {team}'s compute quota Enabled: "
            "a held job would prove nothing"
        )
    # Registered before the change, so it runs after the Jobs are deleted, and also when the
    # update's answer is lost after the quota changed.
    cleanup.add(f"set team {team}'s compute quota Enabled again", lambda: _enable_again(context, sagemaker))
    switch.set(False)
    quota = _settled(context, sagemaker)
    if quota.get("Status") not in SETTLED or quota.get("ActivationState") != "Disabled":
        return inconclusive(
            f"the compute quota is {quota.get('Status')}, {quota.get('ActivationState')}: not Disabled yet"
        )
    queued = _create(context, cleanup, "disabled")
    if _started(context, queued):
        return passed(
            f"job {queued} started with team {team}'s compute quota Disabled (job {control} had with it Enabled): a "
            "paused or over-limit team's queued tasks still run, as docs/governance-file.md and status say"
        )
    return failed(
        f"job {queued} was held {args.timeout_minutes:g} minutes with team {team}'s compute quota Disabled (job {control} "
        "started with it Enabled): HyperPod holds a disabled team's queued tasks; the row, docs/governance-file.md and "
        "status understate the pause"
    )


def _cost(args) -> str:
    return (
        f"two pods of 100m CPU and 64 MiB for at most {DEADLINE_SECONDS} s each (activeDeadlineSeconds) on the "
        "cluster's existing nodes, paid whether the probe runs or not; nothing is bought"
    )


PROBES = [
    Probe(
        name="disabled-compute-quota-task",
        row="hyperpod.compute-quota-disabled",
        does=(
            "with kubectl, creates a Job of one small pod in team A's namespace and local queue (it must start); sets A's "
            "compute quota on --hyperpod-cluster-arn Disabled at the version read, as the reclaim controller does; "
            "creates a second one and waits; deletes both and sets the quota Enabled again"
        ),
        passes_when=(
            "the second Job starts, as docs/governance-file.md and status warn; it fails when HyperPod holds it for "
            "--timeout-minutes (the docs then understate the pause)"
        ),
        needs=(TEAM_A.flag, CLUSTER.flag),
        cost=_cost,
        run=disabled_compute_quota_task,
    )
]
