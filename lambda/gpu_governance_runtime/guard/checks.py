"""What a service job's payload may hold, checked against the team that submitted it: pure
functions, no AWS call (the handler looks up what a check must read, a training plan's owner or a
training job's tags, and passes the lookups in).

IAM authorises ``SubmitServiceJob`` on the queue, the quota share and the Batch job's own tags
(``aws:RequestTag``), never on the SageMaker ``CreateTrainingJob`` request inside
``serviceRequestPayload``: its tags, role, training plans and image are the submitter's to write,
and Batch passes it through without validation [aws: sm-job.payload-passed-through]. The
submitting team is the Batch job's ``gpu-governance:team`` tag, which the queue's submit statement
forces to the submitter's own team (docs/batch.md).

Every member of the payload is read (``members.MEMBERS`` classifies each one; a member it lacks is
refused), a key named twice anywhere is refused (which copy SageMaker reads is not documented), and
the training job Batch created is read back: it must carry the team's tags, whichever way Batch
copies them [aws: sm-job.service-job-tags-reach-the-training-job].
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..contract import PLATFORM_TAG_KEYS, TAG_COST_CENTRE, TAG_TEAM, submission_tags
from .members import CONTAINERS, MEMBERS

PAYLOAD = "serviceRequestPayload"
TRAINING_JOB_ARN = "TrainingJobArn"  # a service job attempt's serviceResourceId name


class Unread(RuntimeError):
    """What a check must read could not be read (throttled, timed out, not there yet): no decision
    is made, and the event is retried (docs/security.md, row 4)."""


@dataclass(frozen=True, kw_only=True)
class TeamRules:
    """What a team's service jobs may name: its execution role, its image repository (URIs
    without tag or digest) or a shared one, its cost centre (None: it declares none), and the longest
    run its jobs may ask for (``max_runtime_seconds``, None: no limit), tighter for the classes whose
    scheduling priority ``max_runtime_by_priority`` names (the governance file's ``max_run_minutes``)."""

    execution_role_arn: str
    repositories: tuple[str, ...]
    cost_centre: str | None
    max_runtime_seconds: int | None = None
    max_runtime_by_priority: Mapping[int, int] = field(default_factory=dict)

    def max_runtime_for(self, priority: Any) -> int | None:
        """The run-time limit of a job of this scheduling priority: its class's where that is tighter."""
        if isinstance(priority, int) and priority in self.max_runtime_by_priority:
            return self.max_runtime_by_priority[priority]
        return self.max_runtime_seconds


def rules_from(document: Mapping[str, Any]) -> dict[str, TeamRules]:
    """A queue's teams from the ``GUARD_QUEUES`` entry the construct wrote: ``{"teams": {team:
    {"execution_role_arn", "repository", "cost_centre"}}, "shared_repositories": [...]}``."""
    shared = tuple(document.get("shared_repositories", ()))
    return {
        team: TeamRules(
            execution_role_arn=rules["execution_role_arn"],
            repositories=(rules["repository"], *shared),
            cost_centre=rules.get("cost_centre"),
            max_runtime_seconds=rules.get("max_runtime_seconds"),
            max_runtime_by_priority={int(p): s for p, s in (rules.get("max_runtime_by_priority") or {}).items()},
        )
        for team, rules in document["teams"].items()
    }


def training_jobs(job: Mapping[str, Any]) -> list[str]:
    """The training jobs a service job's attempts created (a ``DescribeServiceJob`` response or a
    state change event's detail), oldest first."""
    attempts = [*(job.get("attempts") or ()), job.get("latestAttempt") or {}]
    arns = [
        (attempt.get("serviceResourceId") or {}).get("value")
        for attempt in attempts
        if isinstance(attempt, dict) and (attempt.get("serviceResourceId") or {}).get("name") == TRAINING_JOB_ARN
    ]
    return list(dict.fromkeys(arn for arn in arns if isinstance(arn, str)))


def violations(
    job: Mapping[str, Any],
    teams: Mapping[str, TeamRules],
    *,
    plan_owner: Callable[[str], str | None],
    training_job_tags: Callable[[str], Mapping[str, str]] | None,
) -> tuple[str | None, list[str]]:
    """(the submitting team, what the job does that the team may not), from a ``DescribeServiceJob``
    response; no violation: ``[]``. ``plan_owner(arn)`` is the team a training plan is tagged for
    (None: untagged, another account's or not found); ``training_job_tags(arn)`` the tags of a
    training job the service job created (None: do not read them, the job has ended). Either may
    raise ``Unread``."""
    team = (job.get("tags") or {}).get(TAG_TEAM)
    if team not in teams:
        return team, [f"tags.{TAG_TEAM}: {team!r} - a team of this queue ({', '.join(sorted(teams))})"]
    rules, found = teams[team], []
    if job.get("quotaShareName") not in (None, team):
        found.append(f"quotaShareName: {job.get('quotaShareName')!r} - the team's own share {team!r}")
    payload, problems = parse(job.get(PAYLOAD))
    found += problems
    if payload is not None:
        present, problems = classify(payload)
        found += problems
        found += [
            f"{where}: {_shown(value)} - {MEMBERS[path].why}"
            for path, occurrences in present.items()
            for where, value in occurrences
            if MEMBERS[path].refuses(value)
        ]
        context = _Context(team=team, rules=rules, plan_owner=plan_owner, priority=job.get("schedulingPriority"))
        for path, check in CHECKS.items():
            found += check(present.get(path, []), context)
    if training_job_tags is not None:
        for arn in training_jobs(job):
            found += tag_problems(training_job_tags(arn).items(), f"{arn} tags", team, rules, required=True)
    return team, found


def parse(text: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The payload as a JSON object, and what is wrong with it: not JSON, not an object, nested too
    deep to read, or a key named twice in one object (refused: which copy SageMaker reads is
    undocumented [aws: sm-job.duplicate-keys-read-one-way]; the payload is read anyway, the last
    copy of each key as Python keeps it, so every other problem is found too)."""
    twice: list[str] = []

    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        twice.extend(dict.fromkeys(key for key in keys if keys.count(key) > 1))
        return dict(pairs)

    try:
        payload = json.loads(text if isinstance(text, str) else "", object_pairs_hook=once)
    except (ValueError, RecursionError):
        payload = None
    if not isinstance(payload, dict):
        return None, [f"{PAYLOAD}: {_shown(text)} - a CreateTrainingJob request (JSON object)"]
    return payload, [f"{PAYLOAD}: key {key!r} twice in one object - each key once" for key in twice]


def classify(payload: Mapping[str, Any]) -> tuple[dict[str, list[tuple[str, Any]]], list[str]]:
    """Each classified member the payload holds: its path in ``MEMBERS`` -> [(where it is, its
    value)] (a member of a list's items occurs once per item); and the problems: a member the table
    does not classify, a structure or list that is not one. A null member is absent."""
    present: dict[str, list[tuple[str, Any]]] = {}
    problems: list[str] = []

    def structure(value: Any, path: str, where: str) -> None:
        if not isinstance(value, dict):
            problems.append(f"{where}: {_shown(value)} - a JSON object")
            return
        for key, child in value.items():
            member(child, f"{path}.{key}" if path else key, f"{where}.{key}" if where else key)

    def member(value: Any, path: str, where: str) -> None:
        if value is None:
            return
        if path in MEMBERS:
            present.setdefault(path, []).append((where, value))
        elif f"{path}[]" in CONTAINERS:
            if not isinstance(value, list):
                problems.append(f"{where}: {_shown(value)} - a JSON list")
                return
            for index, item in enumerate(value):
                structure(item, f"{path}[]", f"{where}[{index}]")
        elif path in CONTAINERS:
            structure(value, path, where)
        else:
            problems.append(
                f"{where}: {_shown(value)} - none: not a CreateTrainingJob member this guard classifies "
                "(gpu_governance_runtime/guard/members.py)"
            )

    structure(payload, "", "")
    return present, problems


def tag_problems(
    pairs: Iterable[tuple[Any, Any]], where: str, team: str, rules: TeamRules, *, required: bool
) -> list[str]:
    """The tags (key, value) are the team's to write except: the team and cost-centre tags name the
    team's own (and, ``required``, are there: the training job that carries the cost), no key of the
    platform's (contract.PLATFORM_TAG_KEYS) and no look-alike of one of the platform's keys in
    another case or with spaces (tag keys are case-sensitive; cost reports that group them may
    not be), each key once."""
    wanted = submission_tags(team, rules.cost_centre)
    governed = {key.casefold(): key for key in (TAG_TEAM, TAG_COST_CENTRE, *PLATFORM_TAG_KEYS)}
    found, seen = [], set()
    for key, value in pairs:
        folded = str(key).strip().casefold()
        canonical = governed.get(folded)
        if folded in seen:
            found.append(f"{where}.{key}: {value!r} - each key once")
        elif canonical in PLATFORM_TAG_KEYS:
            found.append(f"{where}.{key}: {value!r} - none: {canonical} is a key only the platform writes")
        elif canonical is not None and key != canonical:
            found.append(f"{where}.{key}: {value!r} - none: a look-alike of {canonical} (write that key exactly)")
        elif canonical is not None and canonical not in wanted:
            found.append(f"{where}.{key}: {value!r} - none: the team declares no cost centre")
        elif canonical is not None and value != wanted[canonical]:
            found.append(f"{where}.{key}: {value!r} - the team's own {wanted[canonical]!r}")
        seen.add(folded)
    if required:
        found += [f"{where}.{key}: missing - {value!r}" for key, value in wanted.items() if key.casefold() not in seen]
    return found


@dataclass(frozen=True, kw_only=True)
class _Context:
    team: str
    rules: TeamRules
    plan_owner: Callable[[str], str | None]
    priority: Any = None  # the service job's schedulingPriority


Occurrences = list[tuple[str, Any]]


def _role(occurrences: Occurrences, context: _Context) -> list[str]:
    role = occurrences[0][1] if occurrences else None
    if role == context.rules.execution_role_arn:
        return []
    return [f"RoleArn: {role!r} - the team's execution role {context.rules.execution_role_arn}"]


def _image(occurrences: Occurrences, context: _Context) -> list[str]:
    image = occurrences[0][1] if occurrences else None
    repositories = context.rules.repositories
    if isinstance(image, str) and image.startswith(tuple(f"{r}{sep}" for r in repositories for sep in ":@")):
        return []
    return [f"AlgorithmSpecification.TrainingImage: {image!r} - an image of {', '.join(repositories)}"]


def _plans(occurrences: Occurrences, context: _Context) -> list[str]:
    """ResourceConfig.TrainingPlanArn, and each of ResourceConfig.InstancePreferences[].TrainingPlanArns
    (a preference's plans are capacity the job runs on too [aws: sm-job.instance-preferences-name-plans])."""
    named = []
    for where, value in occurrences:
        if isinstance(value, list):
            named += [(f"{where}[{index}]", arn) for index, arn in enumerate(value)]
        else:
            named.append((where, value))
    found = []
    for where, arn in named:
        owner = context.plan_owner(arn) if isinstance(arn, str) else None
        if owner != context.team:
            found.append(
                f"{where}: {arn!r} - a training plan bought for team {context.team} (its {TAG_TEAM} tag: {owner!r})"
            )
    return found


def _named_after_team(occurrences: Occurrences, context: _Context) -> list[str]:
    prefix = f"{context.team}-"
    return [
        f"{where}: {value!r} - a name starting with {prefix!r} (experiments and trials are shared by name across the account)"
        for where, value in occurrences
        if not (isinstance(value, str) and value.startswith(prefix))
    ]


def _tags(occurrences: Occurrences, context: _Context) -> list[str]:
    """The payload's own Tags: optional (the SageMaker SDK moves them to the Batch job), refused
    where they name another team, cost centre or a key of the platform's."""
    found = []
    for where, tags in occurrences:
        if not isinstance(tags, list) or not all(isinstance(t, dict) and set(t) <= {"Key", "Value"} for t in tags):
            found.append(f"{where}: {_shown(tags)} - a list of {{Key, Value}}")
            continue
        found += tag_problems(
            ((t.get("Key"), t.get("Value")) for t in tags), where, context.team, context.rules, required=False
        )
    return found


def _runtime(occurrences: Occurrences, context: _Context) -> list[str]:
    """The job's own limit, after which SageMaker stops it, SIGTERM first [aws: sm-job.max-runtime-stops-the-job]:
    given, and at most the team's; a missing one would be SageMaker's default of a day
    [aws: sm-job.max-runtime-defaults-to-a-day], which the guard does not assume."""
    limit = context.rules.max_runtime_for(context.priority)
    if limit is None:
        return []
    value = occurrences[0][1] if occurrences else None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit:
        return []
    where = occurrences[0][0] if occurrences else "StoppingCondition.MaxRuntimeInSeconds"
    return [f"{where}: {_shown(value)} - at most {limit} s, the team's run-time limit (max_run_minutes)"]


# The check of each member MEMBERS calls checked (tests/guard/test_members.py keeps the two equal).
CHECKS: dict[str, Callable[[Occurrences, _Context], list[str]]] = {
    "RoleArn": _role,
    "AlgorithmSpecification.TrainingImage": _image,
    "ResourceConfig.TrainingPlanArn": _plans,
    "ResourceConfig.InstancePreferences[].TrainingPlanArns": _plans,
    "ExperimentConfig.ExperimentName": _named_after_team,
    "ExperimentConfig.TrialName": _named_after_team,
    "Tags": _tags,
    "StoppingCondition.MaxRuntimeInSeconds": _runtime,
}


def _shown(value: Any) -> str:
    """A value in a message: short enough for an alert subject's neighbours, and never a traceback."""
    return repr(value if isinstance(value, str | int | float | bool) or value is None else json.dumps(value))[:100]
