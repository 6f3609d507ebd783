"""What the library ships to the reference organisation's clusters, as the stand-in tools need
it: the admission policies of the HyperPod EKS pool and the Slurm plan of the Slurm pool."""

from __future__ import annotations

from functools import cache

from constructs_lib.backends.hyperpod_eks import kubernetes, kueue
from constructs_lib.model import KubernetesTenancy
from constructs_lib.model.loader import load_model
from constructs_lib.slurm import slurm_plan
from tests.hyperpod_eks.admission import Admission

EKS_POOL, SLURM_POOL = "hyperpod-eks", "hyperpod-slurm"


@cache
def _admission() -> Admission:
    model = load_model(None)
    objects = kubernetes.pod_security_objects()
    for team in model.teams_in(EKS_POOL):
        tenancy = team.kubernetes.get(EKS_POOL, KubernetesTenancy())
        objects += kubernetes.team_objects(team.name, tenancy, tenancy.granted_priority_classes(model.priority_classes))
    return Admission(objects)


def namespace_of(namespace: str) -> str:
    """The team whose namespace this is; refuses any other namespace (the team's group has no
    rights elsewhere)."""
    teams = {kueue.namespace(t.name): t.name for t in load_model(None).teams_in(EKS_POOL)}
    if namespace not in teams:
        raise SystemExit(
            f"Error from server (Forbidden): namespace {namespace!r} is not a team namespace: {sorted(teams)}"
        )
    return teams[namespace]


def admission_for(namespace: str) -> Admission:
    namespace_of(namespace)
    return _admission()


def slurm_refusal(account: str | None, partition: str | None, qos: str | None, user: str) -> str:
    """Slurm's refusal of a job, or "" when it accepts it (EnforcePartLimits=ALL, associations)."""
    plan = slurm_plan(load_model(None), SLURM_POOL)
    accounts = {a.name: a for a in plan.accounts}
    partitions = {p.name: p for p in plan.partitions}
    if account not in accounts or (user and (user, account) not in {(u.name, u.account) for u in plan.users}):
        return "Invalid account or account/partition combination specified"
    if partition not in partitions or account not in partitions[partition].allow_accounts:
        return "Invalid account or account/partition combination specified"
    if qos not in accounts[account].qos or qos not in partitions[partition].allow_qos:
        return "Invalid qos specification"
    return ""
