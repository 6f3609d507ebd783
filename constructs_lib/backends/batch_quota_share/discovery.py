"""A team's keys of the discovery document on a ``batch_quota_share`` pool: its quota share."""

from __future__ import annotations

from typing import Any

from constructs_lib.member.discovery import job_queue_keys, scheduling_priorities
from gpu_governance_runtime.contract import team_training_plans_parameter


def keys(model, team, pool, classes) -> tuple[dict[str, Any], dict[str, Any]]:
    found, queue_arn = job_queue_keys(model, pool)
    found.update(
        quota_share=team.name,
        quota_share_arn=f"{queue_arn}/quota-share/{team.name}",
        training_job_name_prefix=f"{team.name}-",
        training_plans_parameter=team_training_plans_parameter(model.organisation, team.name),
    )
    return found, scheduling_priorities(classes)
