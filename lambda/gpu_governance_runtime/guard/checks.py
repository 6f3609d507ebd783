"""What a service job's payload may hold, checked against the team that submitted it: pure
functions, no AWS call (the plan's owner is looked up by the handler and passed in).

IAM authorises ``SubmitServiceJob`` on the queue, the quota share and the Batch job's own tags
(``aws:RequestTag``), never on the SageMaker ``CreateTrainingJob`` request inside
``serviceRequestPayload``: its tags, role, training plan and image are the submitter's to write.
The submitting team is the Batch job's ``gpu-governance:team`` tag, which the queue's submit
statement forces to the submitter's own team (docs/batch.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..contract import TAG_COST_CENTRE, TAG_TEAM


@dataclass(frozen=True, kw_only=True)
class TeamRules:
    """What a team's service jobs may name: its execution role, its image repository (URIs
    without tag or digest) or a shared one, its cost centre (None: it declares none)."""

    execution_role_arn: str
    repositories: tuple[str, ...]
    cost_centre: str | None


def rules_from(document: Mapping[str, Any]) -> dict[str, TeamRules]:
    """A queue's teams from the ``GUARD_QUEUES`` entry the construct wrote: ``{"teams": {team:
    {"execution_role_arn", "repository", "cost_centre"}}, "shared_repositories": [...]}``."""
    shared = tuple(document.get("shared_repositories", ()))
    return {
        team: TeamRules(
            execution_role_arn=rules["execution_role_arn"],
            repositories=(rules["repository"], *shared),
            cost_centre=rules.get("cost_centre"),
        )
        for team, rules in document["teams"].items()
    }


def violations(
    job: Mapping[str, Any], teams: Mapping[str, TeamRules], plan_owner: Callable[[str], str | None]
) -> tuple[str | None, list[str]]:
    """(the submitting team, what the job's payload does that the team may not), from a
    ``DescribeServiceJob`` response; no violation: ``[]``. ``plan_owner(arn)`` is the team a
    training plan is tagged for (None: untagged or not found)."""
    team = (job.get("tags") or {}).get(TAG_TEAM)
    if team not in teams:
        return team, [f"tags.{TAG_TEAM}: {team!r} - a team of this queue ({', '.join(sorted(teams))})"]
    rules, found = teams[team], []
    if job.get("quotaShareName") not in (None, team):
        found.append(f"quotaShareName: {job.get('quotaShareName')!r} - the team's own share {team!r}")
    try:
        payload = json.loads(job.get("serviceRequestPayload") or "")
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return team, [
            *found,
            f"serviceRequestPayload: {str(job.get('serviceRequestPayload'))[:100]!r} - a CreateTrainingJob request (JSON object)",
        ]
    found += _tags(payload.get("Tags"), team, rules)
    role = payload.get("RoleArn")
    if role != rules.execution_role_arn:
        found.append(f"RoleArn: {role!r} - the team's execution role {rules.execution_role_arn}")
    image = (payload.get("AlgorithmSpecification") or {}).get("TrainingImage")
    if not isinstance(image, str) or not any(
        image.startswith((f"{repository}:", f"{repository}@")) for repository in rules.repositories
    ):
        found.append(f"AlgorithmSpecification.TrainingImage: {image!r} - an image of {', '.join(rules.repositories)}")
    plan = (payload.get("ResourceConfig") or {}).get("TrainingPlanArn")
    if plan is not None:
        owner = plan_owner(plan) if isinstance(plan, str) else None
        if owner != team:
            found.append(
                f"ResourceConfig.TrainingPlanArn: {plan!r} - a training plan bought for team {team} (its {TAG_TEAM} tag: {owner!r})"
            )
    return team, found


def _tags(tags: Any, team: str, rules: TeamRules) -> list[str]:
    """The training job's tags go to cost allocation (TeamSpendUsd, budgets): team and cost centre
    must be the team's own. Absent is allowed; the submission's own Batch tags carry them anyway."""
    if tags is None:
        return []
    if not isinstance(tags, list) or not all(isinstance(t, dict) for t in tags):
        return [f"Tags: {str(tags)[:100]!r} - a list of {{Key, Value}}"]
    wanted = {TAG_TEAM: team, TAG_COST_CENTRE: rules.cost_centre}
    return [
        f"Tags.{tag.get('Key')}: {tag.get('Value')!r} - "
        + (
            f"the team's own {wanted[tag.get('Key')]!r}"
            if wanted[tag.get("Key")] is not None
            else "none: the team declares no cost centre"
        )
        for tag in tags
        if tag.get("Key") in wanted and tag.get("Value") != wanted[tag.get("Key")]
    ]
