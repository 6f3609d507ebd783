"""A team's run-time limit (``max_run_minutes``, issue 43 item 3) held at admission on a Kubernetes
cluster: every workload a team with a limit creates or changes must say how long it may run, where
the cluster itself stops it at that time, and no longer than the limit of its priority class (the
tightest of its team's, its pool's and its class's, ``model.run_limits``).

Each kind of cluster has its own way to stop a workload, a :class:`RunTimeHold`: on EKS with Kueue,
Kueue's maximum execution time (the label ``kueue.x-k8s.io/max-exec-time-seconds``, which Kueue copies
to the Workload's ``spec.maximumExecutionTimeSeconds`` and deactivates the workload after that long
admitted); on HyperPod EKS, Kubernetes' ``activeDeadlineSeconds`` of a Job, a pod, a Kubeflow job's
run policy (docs/governance-file.md, Run-time limits, says where each is documented). A ValidatingAdmissionPolicy,
in the team's namespace, evaluated by the API server: nothing runs beside the cluster.

A workload's class is every class it names where Kueue or the scheduler reads one (the Kueue label
on the object, its job template and its pods; a pod's ``priorityClassName``; a Kubeflow job's run
policy): it is held to the tightest of theirs, and a workload naming none to the longest any class
allows (``any_class_max_run_minutes``). Pods and child jobs the cluster's controllers make from a
checked workload are not checked again, as the queue policy does not check them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from constructs_lib.model.run_limits import any_class_max_run_minutes, max_run_minutes

from .kubernetes import (
    _OBJECT_LABELS,
    _WORKLOAD_VARIABLES,
    PRIORITY_CLASS_LABEL,
    QUEUED_WORKLOADS,
    Manifest,
    Tenants,
    _by_resource,
    _namespaces,
    _workload_rules,
    admission_binding,
    admission_policy,
    workload_priority_class,
)

MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
"""Kueue reads a job's maximum execution time from this label (Kueue's docs, Labels and annotations)."""

_SECONDS = "^[1-9][0-9]{0,9}$"
"""A label value both Kueue (Go's strconv) and the API server's CEL read as the same positive number."""


@dataclass(frozen=True)
class RunTimeLimits:
    """A team's run-time limits in one pool, in seconds, as its admission policy holds them."""

    by_class: Mapping[str, int | None]
    """WorkloadPriorityClass name (``<class>-priority``) of each declared class -> the limit of a
    workload of that class; None: none."""
    unnamed: int | None
    """The limit of a workload that names no declared class; None: none."""

    def shown(self) -> str:
        parts = [f"{name} {seconds} s" for name, seconds in self.by_class.items() if seconds is not None]
        if self.unnamed is not None:
            parts.append(f"naming no class {self.unnamed} s")
        return ", ".join(parts)


def run_time_limits(team: Any, pool: Any, classes: Sequence[Any]) -> RunTimeLimits | None:
    """The team's limits in ``pool`` under the declared ``classes``; None when none is declared."""
    by_class = {
        workload_priority_class(c.name): None if minutes is None else minutes * 60
        for c in classes
        for minutes in [max_run_minutes(team, pool, c)]
    }
    unnamed = any_class_max_run_minutes(team, pool, classes)
    if unnamed is None and all(seconds is None for seconds in by_class.values()):
        return None
    return RunTimeLimits(by_class=by_class, unnamed=None if unnamed is None else unnamed * 60)


@dataclass(frozen=True)
class RunTimeHold:
    """Where one kind of cluster reads how long a workload may run."""

    workloads: tuple[tuple[str, str], ...]
    """(API group, resource) of each workload kind it stops, besides pods (every hold stops pods)."""
    declared: str
    """CEL: the seconds the workload under review declares, 0 when it declares none."""
    asked: str
    """What the refusal asks for."""
    variables: tuple[tuple[str, str], ...] = ()
    """(name, CEL) that ``declared`` reads, beside the policies' shared ones."""


# Kueue reads the label from the object it makes a Workload of: a job's own labels, a CronJob's
# Jobs' (its job template), and each pod's where Kueue manages pods one by one (plain pods, a
# Deployment's or StatefulSet's pods, whose labels come from the template).
_TEMPLATE_LABELS = "object.spec.template.?metadata.?labels.orValue({})"
_KUEUE_LABELS = _by_resource(
    {
        "cronjobs": "object.spec.jobTemplate.?metadata.?labels.orValue({})",
        "deployments": _TEMPLATE_LABELS,
        "statefulsets": _TEMPLATE_LABELS,
    },
    _OBJECT_LABELS,
)
KUEUE_MAX_EXEC_TIME = RunTimeHold(
    workloads=tuple(QUEUED_WORKLOADS),
    variables=(("runTimeLabels", _KUEUE_LABELS),),
    declared=(
        f"'{MAX_EXEC_TIME_LABEL}' in variables.runTimeLabels && "
        f"variables.runTimeLabels['{MAX_EXEC_TIME_LABEL}'].matches('{_SECONDS}') ? "
        f"int(variables.runTimeLabels['{MAX_EXEC_TIME_LABEL}']) : 0"
    ),
    asked=f'label {MAX_EXEC_TIME_LABEL}: "<seconds>" (on a CronJob in spec.jobTemplate.metadata.labels, on a '
    "Deployment or StatefulSet in spec.template.metadata.labels)",
)
"""EKS with Kueue: every workload kind Kueue queues there."""

_KUBEFLOW_JOBS = ("pytorchjobs", "mpijobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs")
ACTIVE_DEADLINE = RunTimeHold(
    workloads=(("batch", "jobs"), ("batch", "cronjobs"), *(("kubeflow.org", r) for r in _KUBEFLOW_JOBS)),
    declared=(
        "(request.resource.resource == 'cronjobs' ? object.spec.jobTemplate.spec.?activeDeadlineSeconds : "
        "request.resource.resource in ['pods', 'jobs'] ? object.spec.?activeDeadlineSeconds : "
        "object.spec.?runPolicy.?activeDeadlineSeconds).orValue(0)"
    ),
    asked="activeDeadlineSeconds (a Job's or pod's spec, a CronJob's spec.jobTemplate.spec, a Kubeflow job's "
    "spec.runPolicy)",
)
"""Kubernetes' own deadline: Jobs, pods and the Kubeflow jobs, whose run policy has one. A
HyperPodPyTorchJob, a JobSet, a Deployment or StatefulSet has none that stops the whole workload."""

_NAMED_CLASSES = (
    f"variables.labelSets.filter(l, '{PRIORITY_CLASS_LABEL}' in l).map(l, l['{PRIORITY_CLASS_LABEL}']) + "
    "variables.priorityClassNames.filter(c, c != '')"
)


def run_time_admission(tenants: Tenants, hold: RunTimeHold, team: str, limits: RunTimeLimits | None) -> list[Manifest]:
    """The team's run-time policy and its binding to the team's namespace; none without a limit."""
    if limits is None:
        return []
    name = f"gpu-governance-run-time-{team}"
    # 0: a class without a limit; a name no declared class has (refused by the priority policy) is held
    # as a workload naming none.
    by_class = "{" + ", ".join(f"'{c}': {s or 0}" for c, s in limits.by_class.items()) + "}"
    unnamed = limits.unnamed or 0
    policy = admission_policy(
        name,
        team,
        _workload_rules(["CREATE", "UPDATE"], hold.workloads),
        variables=[
            *_WORKLOAD_VARIABLES,
            *hold.variables,
            ("namedClasses", _NAMED_CLASSES),
            (
                "runTimeLimits",
                f"(variables.namedClasses.size() == 0 ? [{unnamed}] : "
                f"variables.namedClasses.map(c, c in {by_class} ? {by_class}[c] : {unnamed})).filter(l, l > 0)",
            ),
            ("declaredRunTime", hold.declared),
        ],
        validations=[
            (
                f"({tenants.platform_request}) || "
                "variables.runTimeLimits.all(l, variables.declaredRunTime > 0 && variables.declaredRunTime <= l)",
                f"team {team}'s workloads must say how long they may run, at most the run-time limit of their "
                f"priority class ({limits.shown()}): {hold.asked}",
            )
        ],
    )
    return [policy, admission_binding(name, team, name, _namespaces([tenants.namespace(team)])["namespaceSelector"])]
