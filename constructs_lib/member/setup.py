"""Where a team submits on one pool, as its tooling reads it: the team's discovery document
(``constructs_lib.member.discovery.describe``, the one writer; the platform publishes it per team
and pool as an SSM parameter). ``TeamSetup.from_parameter`` reads the published JSON;
``team_setup`` reads the same document built from the governance model, offline.

No aws_cdk here: members' laptops and notebooks import this without the CDK.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from constructs_lib.backends import BACKENDS
from constructs_lib.core.errors import GovernanceError, Problem
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime import contract

from .discovery import describe

# The backends a member submits to, by the name the CLI takes.
MEMBER_BACKENDS = {b.member_tool: name for name, b in BACKENDS.items() if b.member_tool}
# SageMaker's TrainingJobName (botocore model): 1-63 characters.
TRAINING_JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
# Keys that are null in a valid document: generated at deployment (null offline), or absent by design.
_MAY_BE_NULL = frozenset(
    (
        "bucket",
        "kms_key_arn",
        "cluster_arn",
        "eks_cluster_name",
        "borrow_partition",
        "borrow_qos",
        "state",
        "gpu_hour_limit",
    )
)
_NOT_STRINGS = {
    "version": int,
    "team_tag": dict,
    "submission_tags": dict,
    "quota": dict,
    "priority_classes": list,
    "qos": list,
    "gpu_hour_limit": dict,
}


@dataclass(frozen=True, kw_only=True)
class TeamSetup:
    """One team on one pool: the discovery document's keys (``contract.DISCOVERY_KEYS`` and, for
    its backend, ``contract.DISCOVERY_BACKEND_KEYS``), by the same names; the other backends'
    keys are None. ``bucket`` and ``kms_key_arn`` are known only once deployed (None offline)."""

    version: int
    organisation: str
    team: str
    pool: str
    backend: str
    account: str
    region: str
    submission_role_arn: str
    execution_role_arn: str
    bucket: str | None
    kms_key_arn: str | None
    kms_key_alias: str
    checkpoint_prefix: str  # in the bucket; each job checkpoints in <prefix><job name>/
    ecr_repository_uri: str
    secrets_prefix: str
    team_tag: Mapping[str, str]
    submission_tags: Mapping[str, str]  # every job must carry them: the team tag, and the cost centre's when declared
    quota: Mapping[str, int]  # instance type -> guaranteed instances
    state: str | None  # "active" or "paused" (no new job starts); None in a document older than pausing
    # {"hours", "period", "enforced"}: the team's GPU-hour limit; None without one (or in an older document)
    gpu_hour_limit: Mapping[str, Any] | None
    priority_classes: Sequence[Mapping[str, Any]]  # most urgent first: name, weight, DISCOVERY_PRIORITY_KEY[backend]
    job_queue: str | None = None
    job_queue_arn: str | None = None
    quota_share: str | None = None
    quota_share_arn: str | None = None
    training_job_name_prefix: str | None = None
    training_plans_parameter: str | None = (
        None  # SSM: the team's active training plans (contract.team_training_plans_parameter)
    )
    share_identifier: str | None = None
    job_definition_prefix: str | None = None
    cluster_arn: str | None = None
    eks_cluster_name: str | None = None
    namespace: str | None = None
    local_queue: str | None = None
    service_account: str | None = None
    cluster_name: str | None = None
    slurm_account: str | None = None
    partition: str | None = None
    qos: Sequence[str] | None = None
    default_qos: str | None = None
    borrow_partition: str | None = None
    borrow_qos: str | None = None

    @classmethod
    def from_parameter(cls, text: str | bytes) -> TeamSetup:
        """Read the team's discovery document (the SSM parameter's value)."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as error:
            raise GovernanceError.single(
                "parameter", "not JSON", str(text)[:60], f"the JSON of a team's discovery document ({error})"
            ) from None
        return cls.from_document(data)

    @classmethod
    def from_document(cls, data: Any) -> TeamSetup:
        """Check and read a discovery document. Keys this version does not know are ignored, so
        the platform may publish more; every key of the document's backend must be there."""
        if not isinstance(data, dict):
            raise GovernanceError.single(
                "parameter", "not a JSON object", type(data).__name__, "a team's discovery document"
            )
        if data.get("version") != contract.DISCOVERY_VERSION:
            raise GovernanceError.single(
                "parameter.version",
                "not a version this library reads",
                data.get("version"),
                str(contract.DISCOVERY_VERSION),
            )
        backend = data.get("backend")
        if backend not in contract.DISCOVERY_BACKEND_KEYS:
            raise GovernanceError.single(
                "parameter.backend", "not a backend", backend, f"one of {list(contract.DISCOVERY_BACKEND_KEYS)}"
            )
        keys = (*contract.DISCOVERY_KEYS, *contract.DISCOVERY_BACKEND_KEYS[backend])
        problems = []
        for key in keys:
            value, kind = data.get(key), _NOT_STRINGS.get(key, str)
            if value is None and key not in _MAY_BE_NULL:
                problems.append(
                    Problem(
                        path=f"parameter.{key}",
                        wrong="missing",
                        value=None,
                        allowed="a value in the team's discovery document",
                    )
                )
            elif value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                problems.append(
                    Problem(path=f"parameter.{key}", wrong="invalid", value=value, allowed=f"a {kind.__name__}")
                )
        if not problems:
            problems += _class_problems(data["priority_classes"], contract.DISCOVERY_PRIORITY_KEY[backend])
            problems += [
                Problem(path=f"parameter.quota.{name}", wrong="invalid", value=count, allowed="a whole number")
                for name, count in data["quota"].items()
                if not isinstance(count, int) or isinstance(count, bool)
            ]
        if problems:
            raise GovernanceError(problems)
        return cls(**{key: data.get(key) for key in keys})  # only a null-able key may be absent (checked above)

    def priority(self, priority_class: str) -> Any:
        """What the backend takes for a priority class: Batch's scheduling priority (the
        weight), the Kueue priority class, the team's Slurm QoS; one-line error naming the classes."""
        for entry in self.priority_classes:
            if entry["name"] == priority_class:
                return entry[contract.DISCOVERY_PRIORITY_KEY[self.backend]]
        raise GovernanceError.single(
            "priority_class",
            "not a priority class of the organisation",
            priority_class,
            f"one of {[c['name'] for c in self.priority_classes]}",
        )

    def run_time_limit(self, priority_class: str) -> int | None:
        """The class's run-time limit in this pool, in seconds (the discovery document's
        ``max_run_minutes``); None: none. An unknown class is refused naming the classes."""
        self.priority(priority_class)
        minutes = next(c for c in self.priority_classes if c["name"] == priority_class).get("max_run_minutes")
        return minutes * 60 if isinstance(minutes, int) else None

    def max_runtime_seconds(self, priority_class: str, asked: int | None, default: int) -> int:
        """How long a job of the class asks to run: ``asked``, or ``default`` cut to the class's
        run-time limit in this pool (the discovery document's ``max_run_minutes``); refused above it,
        as the submission guard would stop the job."""
        limit = self.run_time_limit(priority_class)
        if asked is None:
            return default if limit is None else min(default, limit)
        if limit is not None and asked > limit:
            raise GovernanceError.single(
                "max_runtime_seconds",
                f"longer than class {priority_class}'s run-time limit on pool {self.pool}",
                asked,
                f"at most {limit}",
            )
        return asked

    def least_urgent(self) -> str:
        """The class a job that names none should use."""
        return min(self.priority_classes, key=lambda c: (c["weight"], c["name"]))["name"]

    def require(self, *keys: str) -> None:
        """Refuse, naming every key, when the setup lacks what a submission needs."""
        missing = [key for key in keys if getattr(self, key) in (None, "", {})]
        if missing:
            raise GovernanceError(
                [
                    Problem(
                        path=f"setup.{key}",
                        wrong="unknown",
                        value=None,
                        allowed="read the team's discovery document (TeamSetup.from_parameter) or pass it",
                    )
                    for key in missing
                ]
            )

    def checkpoint_uri(self, job_name: str) -> str:
        return f"s3://{self.bucket}/{self.checkpoint_prefix.strip('/')}/{job_name}/"


def _class_problems(classes: list[Any], key: str) -> list[Problem]:
    return [
        Problem(
            path=f"parameter.priority_classes[{index}]",
            wrong="invalid",
            value=entry,
            allowed=f"an object with name, weight and {key}",
        )
        for index, entry in enumerate(classes)
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("weight"), int)
            and entry.get(key) is not None
        )
    ]


def team_setup(
    model: GovernanceModel,
    team_name: str,
    *,
    backend: str | None = None,
    pool: str | None = None,
    bucket: str | None = None,
    kms_key_arn: str | None = None,
) -> TeamSetup:
    """A team's setup on one pool from the model, offline: the discovery document ``describe``
    builds (``bucket`` and ``kms_key_arn``: the deployed values, None unless given).
    ``backend`` (batch, hyperpod_eks, slurm) and ``pool`` choose the pool; either is enough
    when it names one pool of the team."""
    teams = {t.name: t for t in model.teams}
    team = teams.get(team_name)
    if team is None:
        raise GovernanceError.single("team", "not a team of the model", team_name, f"one of {sorted(teams)}")
    if backend is not None and backend not in MEMBER_BACKENDS:
        raise GovernanceError.single(
            "backend", "not a backend members submit to", backend, f"one of {sorted(MEMBER_BACKENDS)}"
        )
    wanted = MEMBER_BACKENDS.get(backend) if backend else None
    candidates = [
        p
        for p in model.pools
        if p.name in team.quotas and p.backend in MEMBER_BACKENDS.values() and (wanted is None or p.backend == wanted)
    ]
    if pool is not None:
        chosen = [p for p in candidates if p.name == pool]
    else:
        chosen = candidates if len(candidates) == 1 else []
    if not candidates:  # `one of []` said nothing: name the backends the team does have
        offered = sorted(
            b for b, kind in MEMBER_BACKENDS.items() if any(model.pool(p).backend == kind for p in team.quotas)
        )
        raise GovernanceError.single(
            "backend" if backend else "pool",
            f"team {team.name} has no pool members submit to" + (f" on {backend}" if backend else ""),
            backend or pool,
            f"a backend of the team's pools: one of {offered}" if offered else "a team with a quota in such a pool",
        )
    if not chosen:
        wrong = (
            f"not a pool of team {team.name}" + (f" on {backend}" if backend else "")
            if pool
            else f"team {team.name} has {len(candidates)} such pools"
        )
        raise GovernanceError.single("pool", wrong, pool, f"one of {sorted(p.name for p in candidates)}")
    return TeamSetup.from_document(describe(model, team.name, chosen[0].name, bucket=bucket, kms_key_arn=kms_key_arn))


def unique_job_name(team: str, base: str, now: datetime | None = None) -> str:
    """``<team>-<base>-<UTC time>``: the execution role trusts only training jobs named
    ``<team>-*`` (docs/security.md), and a time suffix keeps retries apart."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return check_job_name(team, f"{team}-{base}-{stamp}")


def check_job_name(team: str, name: str) -> str:
    if not name.startswith(f"{team}-") or not TRAINING_JOB_NAME.fullmatch(name):
        raise GovernanceError.single(
            "job_name",
            "not a training job name of the team",
            name,
            f"'{team}-' then letters, digits and '-', at most 63 characters",
        )
    return name
