"""What a team's tooling needs to find its capacity, computed from the model alone.

One document per team and pool (the keys are the runtime contract's ``DISCOVERY_*``): the
constructs publish it as an SSM parameter the team's roles may read, and ``gpu-governance team
show`` prints the same offline. Only the bucket name and the key ARN are generated at deployment;
offline they are None. No aws_cdk import (the CLI synthesizes nothing).
"""

from __future__ import annotations

from typing import Any

from constructs_lib.backends import backend_of
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import (
    SUBMISSION_ROLE_SUFFIX,
    TRAINING_ROLE_SUFFIX,
    GovernanceModel,
    aws_partition,
    repository_name,
    secrets_prefix,
    team_key_alias,
    team_role_arn,
)
from constructs_lib.model.quota import instance_quota
from constructs_lib.model.run_limits import max_run_minutes
from gpu_governance_runtime.contract import (
    DISCOVERY_PRIORITY_KEY,
    DISCOVERY_VERSION,
    TAG_TEAM,
    discovery_parameter_name,
    submission_tags,
)

CHECKPOINT_PREFIX = "checkpoints/"
"""Where in the team's bucket training jobs keep checkpoints (the bucket is the team's alone)."""

# Each backend's keys of the discovery document and its name for each priority class (in the
# class's order) come from its package's ``discovery`` module: ``keys(model, team, pool, classes)
# -> (keys, priority by class name)``. What a job queue's backends share:


def job_queue_keys(model: GovernanceModel, pool) -> tuple[dict[str, Any], str]:
    """The keys of a pool that is an AWS Batch job queue of the capacity account, and its ARN."""
    account = model.capacity_account
    queue_arn = f"arn:{aws_partition(account.region)}:batch:{account.region}:{account.account_id}:job-queue/{pool.name}"
    return {"job_queue": pool.name, "job_queue_arn": queue_arn}, queue_arn


def scheduling_priorities(classes) -> dict[str, Any]:
    """A priority class as an AWS Batch job's ``schedulingPriority``: its weight."""
    return {c.name: c.weight for c in classes}


def describe(
    model: GovernanceModel, team_name: str, pool_name: str, *, bucket: Any = None, kms_key_arn: Any = None
) -> dict[str, Any]:
    """The discovery document of ``team_name`` in ``pool_name``. ``bucket`` and ``kms_key_arn``
    are the deployed values (tokens at synthesis), None offline."""
    team = next((t for t in model.teams if t.name == team_name), None)
    if team is None:
        raise GovernanceError.single("team", "no such team", team_name, f"one of {[t.name for t in model.teams]}")
    if pool_name not in team.quotas:
        raise GovernanceError.single(
            "pool", f"team {team_name} has no quota in this pool", pool_name, f"one of {sorted(team.quotas)}"
        )
    pool, account = model.pool(pool_name), model.capacity_account
    partition = aws_partition(account.region)
    url_suffix = "amazonaws.com.cn" if account.region.startswith("cn-") else "amazonaws.com"
    classes = sorted(model.priority_classes, key=lambda c: (-c.weight, c.name))
    document: dict[str, Any] = {
        "version": DISCOVERY_VERSION,
        "organisation": model.organisation,
        "team": team.name,
        "pool": pool.name,
        "backend": pool.backend,
        "account": account.account_id,
        "region": account.region,
        "submission_role_arn": team_role_arn(account.account_id, team.name, SUBMISSION_ROLE_SUFFIX, partition),
        "execution_role_arn": team_role_arn(account.account_id, team.name, TRAINING_ROLE_SUFFIX, partition),
        "bucket": bucket,
        "kms_key_arn": kms_key_arn,
        "kms_key_alias": team_key_alias(model.organisation, team.name),
        "checkpoint_prefix": CHECKPOINT_PREFIX,
        "ecr_repository_uri": f"{account.account_id}.dkr.ecr.{account.region}.{url_suffix}/{repository_name(model.organisation, team.name)}",
        "secrets_prefix": secrets_prefix(model.organisation, team.name),
        "team_tag": {TAG_TEAM: team.name},
        "submission_tags": submission_tags(team.name, team.cost_centre),
        "quota": instance_quota(team, pool),
        "state": "paused" if team.paused else "active",
        # why a job may wait although capacity is free (docs/governance-file.md, GPU-hour limits)
        "gpu_hour_limit": {
            "hours": team.gpu_hour_limit.hours,
            "period": team.gpu_hour_limit.period.value,
            "enforced": not backend_of(pool).gpu_hour_limit_caveat,
        }
        if team.gpu_hour_limit
        else None,
    }
    keys, priority = backend_of(pool).part("discovery").keys(model, team, pool, classes)
    document.update(keys)
    key = DISCOVERY_PRIORITY_KEY[pool.backend]
    # Last, after the backend's keys (the order of the contract's note).
    # Each class's run-time limit in this pool, where it has one (docs/governance-file.md, Run-time and per-member limits).
    document["priority_classes"] = [
        {"name": c.name, "weight": c.weight, key: priority[c.name]}
        | ({"max_run_minutes": limit} if (limit := max_run_minutes(team, pool, c)) is not None else {})
        for c in classes
    ]
    return document


def describe_team(model: GovernanceModel, team_name: str) -> dict[str, dict[str, Any]]:
    """Parameter name -> document, for every pool the team has a quota in (declaration order)."""
    team = next((t for t in model.teams if t.name == team_name), None)
    if team is None:
        raise GovernanceError.single("team", "no such team", team_name, f"one of {[t.name for t in model.teams]}")
    pools = [p.name for p in model.pools if p.name in team.quotas]
    return {
        discovery_parameter_name(model.organisation, team_name, pool): describe(model, team_name, pool)
        for pool in pools
    }
