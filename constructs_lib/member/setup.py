"""Where a team submits on one pool: queue and share, roles, bucket, key, priority classes, and
the HyperPod namespace or Slurm account. Built offline from the governance model, or from the
team's discovery document (the JSON the platform publishes per team and pool).

No aws_cdk here: members' laptops and notebooks import this without the CDK.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from gpu_governance_runtime import contract
from gpu_governance_runtime.slurm import class_qos_name

from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.hyperpod_eks.kubernetes import namespace as team_namespace
from ..model import ROLE_PATH, SUBMISSION_ROLE_SUFFIX, TRAINING_ROLE_SUFFIX, GovernanceModel

# The backends a member submits to, by the name the CLI takes.
MEMBER_BACKENDS = {"batch": contract.BATCH_QUOTA_SHARE, "hyperpod_eks": contract.HYPERPOD_EKS, "slurm": contract.HYPERPOD_SLURM}
CHECKPOINT_FOLDER = "checkpoints"  # s3://<team bucket>/checkpoints/<job name>/ when the document names no prefix
# What each backend's submission needs beyond the keys every document has.
_NEEDED = {
    contract.BATCH_QUOTA_SHARE: ("job_queue", "quota_share", "execution_role_arn"),
    contract.HYPERPOD_EKS: ("namespace", "local_queue"),
    contract.HYPERPOD_SLURM: ("slurm_account", "slurm_partition", "slurm_qos"),
}


@dataclass(frozen=True, kw_only=True)
class TeamSetup:
    """One team on one pool. Field names are the discovery document's keys (``contract.SETUP_KEYS``).

    ``bucket``, ``kms_key_arn`` and ``image_uri`` are known only once deployed (generated names):
    the model leaves them None and the discovery document fills them in."""

    team: str
    pool: str
    backend: str
    region: str
    priority_classes: Mapping[str, int]  # class name -> weight (Batch scheduling priority, HyperPod weight, Slurm QoS priority)
    quota: Mapping[str, int]  # instance type -> guaranteed instances
    submission_role_arn: str | None = None
    execution_role_arn: str | None = None
    bucket: str | None = None
    kms_key_arn: str | None = None
    checkpoint_prefix: str | None = None  # s3://bucket/prefix/ under which each job checkpoints in <job name>/
    image_uri: str | None = None
    job_queue: str | None = None
    quota_share: str | None = None
    eks_cluster_name: str | None = None
    namespace: str | None = None
    local_queue: str | None = None
    slurm_account: str | None = None
    slurm_partition: str | None = None
    slurm_qos: Mapping[str, str] | None = None  # class name -> QoS

    @classmethod
    def from_parameter(cls, text: str | bytes) -> "TeamSetup":
        """Read the team's discovery document (the SSM parameter's value). Keys this version
        does not know are ignored, so the platform may publish more."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as error:
            raise GovernanceError.single("parameter", "not JSON", str(text)[:60], f"the JSON of a team's discovery document ({error})") from None
        if not isinstance(data, dict):
            raise GovernanceError.single("parameter", "not a JSON object", type(data).__name__, f"an object with keys {list(contract.SETUP_KEYS)}")
        values = {key: data.get(key) for key in contract.SETUP_KEYS}
        problems = [
            Problem(path=f"parameter.{key}", wrong="missing", value=None, allowed="a value in the team's discovery document")
            for key in ("team", "pool", "backend", "region", "priority_classes", "quota", *_NEEDED.get(values["backend"], ()))
            if values[key] in (None, "", {})
        ]
        if values["backend"] not in _NEEDED:
            problems.append(Problem(path="parameter.backend", wrong="not a backend members submit to", value=values["backend"], allowed=f"one of {sorted(_NEEDED)}"))
        for key, kind in (("priority_classes", int), ("quota", int), ("slurm_qos", str)):
            value = values[key]
            if value is not None and not (isinstance(value, dict) and all(isinstance(v, kind) and not isinstance(v, bool) for v in value.values())):
                problems.append(Problem(path=f"parameter.{key}", wrong="invalid", value=value, allowed=f"an object of names to {kind.__name__}s"))
        problems += [Problem(path=f"parameter.{key}", wrong="invalid", value=value, allowed="a string or null")
                     for key, value in values.items()
                     if key not in ("priority_classes", "quota", "slurm_qos") and value is not None and not isinstance(value, str)]
        if problems:
            raise GovernanceError(problems)
        return cls(**values)

    def to_parameter(self) -> str:
        """The discovery document of this setup (what :meth:`from_parameter` reads)."""
        return json.dumps({key: asdict(self)[key] for key in contract.SETUP_KEYS}, indent=2, sort_keys=False)

    def priority(self, priority_class: str) -> int:
        """The weight of a priority class; one-line error naming the classes there are."""
        if priority_class not in self.priority_classes:
            raise GovernanceError.single("priority_class", "not a priority class of the organisation", priority_class, f"one of {sorted(self.priority_classes)}")
        return self.priority_classes[priority_class]

    def require(self, *keys: str) -> None:
        """Refuse, naming every key, when the setup lacks what a submission needs."""
        missing = [key for key in keys if getattr(self, key) in (None, "", {})]
        if missing:
            raise GovernanceError([
                Problem(path=f"setup.{key}", wrong="unknown", value=None, allowed="read the team's discovery document (TeamSetup.from_parameter) or pass it")
                for key in missing
            ])

    def checkpoint_uri(self, job_name: str) -> str:
        prefix = self.checkpoint_prefix or f"s3://{self.bucket}/{CHECKPOINT_FOLDER}/"
        return f"{prefix.rstrip('/')}/{job_name}/"


def team_setup(model: GovernanceModel, team_name: str, *, backend: str | None = None, pool: str | None = None) -> TeamSetup:
    """A team's setup on one pool from the model, offline. ``backend`` (batch, hyperpod_eks,
    slurm) and ``pool`` choose the pool; either is enough when it names one pool of the team."""
    teams = {t.name: t for t in model.teams}
    team = teams.get(team_name)
    if team is None:
        raise GovernanceError.single("team", "not a team of the model", team_name, f"one of {sorted(teams)}")
    if backend is not None and backend not in MEMBER_BACKENDS:
        raise GovernanceError.single("backend", "not a backend members submit to", backend, f"one of {sorted(MEMBER_BACKENDS)}")
    wanted = MEMBER_BACKENDS.get(backend) if backend else None
    candidates = [p for p in model.pools if p.name in team.quotas and p.backend in _NEEDED and (wanted is None or p.backend == wanted)]
    if pool is not None:
        chosen = [p for p in candidates if p.name == pool]
    else:
        chosen = candidates if len(candidates) == 1 else []
    if not chosen:
        wrong = f"not a pool of team {team.name}" + (f" on {backend}" if backend else "") if pool else f"team {team.name} has {len(candidates)} such pools"
        raise GovernanceError.single("pool", wrong, pool, f"one of {sorted(p.name for p in candidates)}")
    selected = chosen[0]
    capacity = model.capacity_account
    roles = f"arn:aws:iam::{capacity.account_id}:role{ROLE_PATH}{team.name}"
    values: dict[str, Any] = {
        "team": team.name, "pool": selected.name, "backend": selected.backend, "region": capacity.region,
        "priority_classes": {c.name: c.weight for c in model.priority_classes}, "quota": dict(team.quotas[selected.name]),
        "submission_role_arn": f"{roles}{SUBMISSION_ROLE_SUFFIX}",
    }
    if selected.backend == contract.BATCH_QUOTA_SHARE:
        # The queue is named after the pool and each quota share after its team (batch.QuotaManagedTrainingQueue).
        values |= {"job_queue": selected.name, "quota_share": team.name, "execution_role_arn": f"{roles}{TRAINING_ROLE_SUFFIX}"}
    elif selected.backend == contract.HYPERPOD_EKS:
        values |= {"eks_cluster_name": selected.eks_cluster_name, "namespace": team_namespace(team.name), "local_queue": local_queue(team.name)}
    else:  # Slurm: an account and a partition per team, a QoS per class (constructs_lib.model.slurm)
        values |= {"slurm_account": team.name, "slurm_partition": team.name,
                   "slurm_qos": {c.name: class_qos_name(team.name, c.name) for c in model.priority_classes}}
    return TeamSetup(**values)


def local_queue(team: str) -> str:
    """The Kueue local queue HyperPod task governance makes in the team's namespace."""
    return f"{team_namespace(team)}-localqueue"
