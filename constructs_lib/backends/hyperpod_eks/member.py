"""A training job for the team's namespace on a HyperPod EKS cluster: a ``batch/v1`` Job that
HyperPod task governance (Kueue) admits through the team's local queue at its priority class.

It passes the cluster's admission policies as shipped (``kubernetes``): Pod
Security baseline and restricted alike (non-root, no privilege escalation, all capabilities
dropped, RuntimeDefault seccomp), no node name, and on dedicated instance groups the node
selector and toleration of the team's nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from constructs_lib.core.errors import GovernanceError
from constructs_lib.member.setup import TeamSetup, check_job_name
from gpu_governance_runtime.contract import TAG_COST_CENTRE
from gpu_governance_runtime.dedicated_nodes import DEDICATED_NODE_KEY

from .kubernetes import PRIORITY_CLASS_LABEL, QUEUE_LABEL, cost_metadata

# What constructs_lib.member re-exports.
__all__ = ["training_job_manifest"]

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
NON_ROOT_UID = 1000


def training_job_manifest(
    setup: TeamSetup,
    *,
    job_name: str,
    priority_class: str,
    image: str,
    command: Sequence[str],
    instance_type: str,
    gpus: int,
    dedicated_team_nodes: bool = False,
) -> dict[str, Any]:
    """A suspended-until-admitted ``batch/v1`` Job in the team's namespace with the local queue
    and priority-class labels, running as the team's workload service account (its pod identity
    role reads the team's bucket). ``dedicated_team_nodes``: the team owns dedicated instance
    groups, and its pods must select and tolerate them."""
    setup.require("namespace", "local_queue", "service_account")
    check_job_name(setup.team, job_name)
    kueue_class = setup.priority(priority_class)
    if instance_type not in setup.quota:
        raise GovernanceError.single(
            "instance_type", f"not in team {setup.team}'s compute quota", instance_type, f"one of {sorted(setup.quota)}"
        )
    pod_spec: dict[str, Any] = {
        "serviceAccountName": setup.service_account,
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "nodeSelector": {INSTANCE_TYPE_LABEL: instance_type},
        "containers": [
            {
                "name": "trainer",
                "image": image,
                "command": list(command),
                "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    if dedicated_team_nodes:
        pod_spec["nodeSelector"][DEDICATED_NODE_KEY] = setup.team
        pod_spec["tolerations"] = [
            {"key": DEDICATED_NODE_KEY, "operator": "Equal", "value": setup.team, "effect": "NoSchedule"}
        ]
    # The team and its cost centre on the Job and its pods, which cost tools allocate by.
    cost = cost_metadata(setup.team, setup.submission_tags.get(TAG_COST_CENTRE))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **cost,
            "name": job_name,
            "namespace": setup.namespace,
            "labels": {QUEUE_LABEL: setup.local_queue, PRIORITY_CLASS_LABEL: kueue_class, **cost["labels"]},
        },
        # Kueue unsuspends the job when it admits it; created suspended, no pod starts before.
        "spec": {"suspend": True, "backoffLimit": 0, "template": {"metadata": cost, "spec": pod_spec}},
    }
