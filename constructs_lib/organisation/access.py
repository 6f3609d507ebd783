"""One row of ``gpu-governance audit`` (who can do what, on what, at which governance layer) and
the roles the library creates for a team: what ``organisation/audit.py`` and each backend's
``audit`` module build the review from."""

from __future__ import annotations

from dataclasses import dataclass

from constructs_lib.backends import backend_of
from constructs_lib.model import (
    POD_ROLE_SUFFIX,
    SUBMISSION_ROLE_SUFFIX,
    TRAINING_ROLE_SUFFIX,
    GovernanceModel,
    Team,
    aws_partition,
    team_role_arn,
)


@dataclass(frozen=True, kw_only=True)
class Access:
    team: str
    layer: str
    who: str  # an IAM principal ARN, a Kubernetes group, a Slurm user or a named set of them
    can: str
    on: str


def team_roles(model: GovernanceModel, team: Team) -> dict[str, str]:
    """The roles the library creates for ``team``: kind -> ARN (the pod role only on HyperPod EKS)."""
    account = model.capacity_account
    roles = {"submission": SUBMISSION_ROLE_SUFFIX, "training": TRAINING_ROLE_SUFFIX}
    if any(backend_of(model.pool(p)).team_pod_role for p in team.quotas):
        roles["pods"] = POD_ROLE_SUFFIX
    return {
        kind: team_role_arn(account.account_id, team.name, suffix, aws_partition(account.region))
        for kind, suffix in roles.items()
    }
