"""A team's keys of the discovery document on a ``batch_fair_share`` pool: its share identifier."""

from __future__ import annotations

from typing import Any

from constructs_lib.member.discovery import job_queue_keys, scheduling_priorities


def keys(model, team, pool, classes) -> tuple[dict[str, Any], dict[str, Any]]:
    found, _ = job_queue_keys(model, pool)
    found.update(share_identifier=team.name, job_definition_prefix=f"{team.name}-")
    return found, scheduling_priorities(classes)
