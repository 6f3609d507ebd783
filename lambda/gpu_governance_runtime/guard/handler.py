"""The submission guard Lambda: on each Batch service-job state change of a governed quota-share
queue, reads the job (``DescribeServiceJob``: the event carries neither ``tags`` nor
``serviceRequestPayload``, https://docs.aws.amazon.com/batch/latest/userguide/service-job-events.html)
and checks its SageMaker payload against the submitting team (``checks.py``). A violation is
recorded in the ledger first (who submitted what), then the job is stopped with
``TerminateServiceJob`` (``DRY_RUN=false`` only) and the platform's and the team owner's topics
hear of it, once per job however often the events come.

Environment (and ``guard.json`` in the package, contract.GUARD_FILE_NAME):
  GUARD_QUEUES   JSON list, one per guarded queue: {"job_queue": ARN, "pool"}
  GUARD_NAMES    JSON: the team execution role and owner topic ARNs with "{team}" for the name, the ECR registry host
  LEDGER_TABLE   DynamoDB table of actions (partition key ``action_id``), the reclaim ledger's format
  TOPIC_ARN      the platform's topic
  DRY_RUN        "false" to stop jobs; anything else records and alerts only
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from .. import api_check
from ..common.clients import WITHIN_A_TICK
from ..common.handler import Environment, EventKind, recognise
from ..common.log import write as log
from ..contract import (
    ENV_GUARD_NAMES,
    ENV_GUARD_QUEUES,
    ENV_LEDGER_TABLE,
    ENV_TOPIC_ARN,
    GUARD_FILE_NAME,
    GUARD_NAMESPACE,
    GUARDED_STATES,
    SERVICE_JOB_EVENT,
    TAG_TEAM,
    TEAM_PLACEHOLDER,
)
from ..reclaim.ledger import DONE, FAILED, ActionKey, Ledger
from . import checks

ACTION = "guard-terminate"
# A dry run's decision is claimed under its own action: once the guard is switched to act, a job it
# only reported is still claimed afresh, and stopped if it still violates.
DRY_RUN_ACTION = "guard-report"
SERVICE_JOB_STATE_CHANGE = "service_job_state_change"
EVENTS = (EventKind(SERVICE_JOB_STATE_CHANGE, *SERVICE_JOB_EVENT),)

batch = boto3.client("batch", config=WITHIN_A_TICK)
sagemaker = boto3.client("sagemaker", config=WITHIN_A_TICK)
sns = boto3.client("sns", config=WITHIN_A_TICK)
dynamodb = boto3.resource("dynamodb", config=WITHIN_A_TICK)
# Checked against the runtime's boto3 at cold start (api_check); a test keeps it equal to the calls in the code.
REQUIRED_OPERATIONS = {
    "batch": ("DescribeServiceJob", "TerminateServiceJob"),
    "sagemaker": ("ListTags",),
    "sns": ("Publish",),
    "dynamodb": ("GetItem", "PutItem", "UpdateItem"),
}
if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
    api_check.require(
        {"batch": batch, "sagemaker": sagemaker, "sns": sns, "dynamodb": dynamodb.meta.client},
        REQUIRED_OPERATIONS,
        namespace=GUARD_NAMESPACE,
    )


@dataclass(frozen=True, kw_only=True)
class GuardSettings:
    """The function's environment (the module docstring lists it), read once per invocation."""

    queues: tuple[Mapping[str, Any], ...]
    names: Mapping[str, str]
    ledger_table: str
    platform_topic: str
    dry_run: bool

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> GuardSettings:
        read = Environment(environ)
        return cls(
            queues=tuple(read.json(ENV_GUARD_QUEUES, list)),
            names=read.json(ENV_GUARD_NAMES, dict),
            ledger_table=read.text(ENV_LEDGER_TABLE, allowed="the DynamoDB table of actions"),
            platform_topic=read.text(ENV_TOPIC_ARN, allowed="the SNS topic ARN"),
            dry_run=read.dry_run(),
        )


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    settings = GuardSettings.from_environ(os.environ)
    return guard(
        event,
        queues=_guarded_queues(json.dumps(settings.queues), json.dumps(settings.names)),
        ledger=Ledger(dynamodb.Table(settings.ledger_table)),
        dry_run=settings.dry_run,
        platform_topic=settings.platform_topic,
        batch=batch,
        sagemaker=sagemaker,
        sns=sns,
        now=time.time(),
    )


@lru_cache(maxsize=1)
def _guarded_queues(queues: str, names: str) -> dict[str, Any]:
    """Keyed by the settings as text (hashable): warm invocations reuse the bundled document's reading."""
    return queues_from(
        json.loads(queues),
        json.loads(names),
        json.loads((Path(__file__).resolve().parents[1] / GUARD_FILE_NAME).read_text()),
    )


def queues_from(
    queues: list[Mapping[str, Any]], names: Mapping[str, str], document: Mapping[str, Any]
) -> dict[str, Any]:
    """Job queue ARN -> its settings (``guard``'s ``queues``): the environment's queues and names,
    with the bundled document's teams of each queue's pool."""

    def named(pattern: str, team: str) -> str:
        return pattern.replace(TEAM_PLACEHOLDER, team)

    shared = list(document.get("shared_repositories", ()))
    settings = {}
    for queue in queues:
        teams = document["pools"][queue["pool"]]["teams"]
        settings[queue["job_queue"]] = {
            "job_queue": queue["job_queue"],
            "pool": queue["pool"],
            "shared_repositories": shared,
            "teams": {
                team: {
                    "execution_role_arn": named(names["execution_role_arn"], team),
                    "repository": f"{names['registry']}/{rules['repository_name']}",
                    "cost_centre": rules.get("cost_centre"),
                }
                for team, rules in teams.items()
            },
            "team_topics": {
                team: named(names["team_topic"], team) for team, rules in teams.items() if rules.get("owner")
            },
        }
    return settings


def guard(
    event: Mapping[str, Any],
    *,
    queues: Mapping[str, Any],
    ledger: Ledger,
    dry_run: bool,
    platform_topic: str,
    batch: Any,
    sagemaker: Any,
    sns: Any,
    now: float,
) -> dict[str, Any]:
    """One event: what was found and done. Never raises for a bad event or a failed call: it is
    logged, and the job's next state change (or EventBridge's retry of this one) comes back."""
    recognised = recognise(event, EVENTS)
    detail = recognised.detail
    if recognised.kind != SERVICE_JOB_STATE_CHANGE or not isinstance(detail, dict):
        return _logged(
            {"event": "guard_ignored", "reason": "not a Batch service job state change", "id": recognised.id}
        )
    job_id, queue, status = detail.get("jobId"), detail.get("jobQueue"), detail.get("status")
    if queue not in queues or status not in GUARDED_STATES or not isinstance(job_id, str):
        return _logged(
            {
                "event": "guard_ignored",
                "job_id": job_id,
                "queue": queue,
                "status": status,
                "reason": "not a governed queue, a guarded state or a job id",
            }
        )
    settings = queues[queue]
    try:
        job = batch.describe_service_job(jobId=job_id)
    except (ClientError, BotoCoreError) as error:
        return _logged({"event": "guard_failed", "job_id": job_id, "step": "DescribeServiceJob", "error": str(error)})
    if job.get("isTerminated") or job.get("status") not in GUARDED_STATES:
        return _logged(
            {
                "event": "guard_ignored",
                "job_id": job_id,
                "status": job.get("status"),
                "reason": "already stopping or done",
            }
        )
    team, found = checks.violations(job, checks.rules_from(settings), lambda arn: _plan_owner(sagemaker, arn))
    if not found:
        return _logged({"event": "guard_admitted", "job_id": job_id, "team": team, "pool": settings["pool"]})
    # Who submitted what: the team (its submit permission forces the tag), the job, the share and the payload as sent.
    record = {
        "team": team,
        "job_id": job_id,
        "job_name": job.get("jobName"),
        "job_arn": job.get("jobArn"),
        "pool": settings["pool"],
        "quota_share": job.get("quotaShareName"),
        "violations": found,
        "tags": job.get("tags") or {},
        "payload": (job.get("serviceRequestPayload") or "")[:2000],
    }
    key = ActionKey(pool=settings["pool"], job_id=job_id, attempt="0", action=DRY_RUN_ACTION if dry_run else ACTION)
    # The ledger keeps one line (the log, a year, and the alerts keep the whole record with the payload).
    said = (
        f"team {team} submitted {record['job_name']} ({job_id}) into share {record['quota_share']}: {'; '.join(found)}"
    )
    if not ledger.claim(key, now=now, reason=said):
        return _logged({"event": "guard_already_handled", **record})
    if dry_run:
        outcome, detail_text = "planned", "dry run: the job was left running"
    else:
        try:
            batch.terminate_service_job(
                jobId=job_id, reason=f"gpu-governance submission guard: {'; '.join(found)}"[:1000]
            )
            outcome, detail_text = DONE, "terminated"
        except (ClientError, BotoCoreError) as error:  # recorded failed: the job's next event claims it again
            outcome, detail_text = FAILED, str(error)
    ledger.record(key, status=outcome, detail=detail_text)
    _alert(sns, [platform_topic, settings.get("team_topics", {}).get(team)], record, outcome)
    return _logged(
        {"event": "guard_violation", "outcome": outcome, "dry_run": dry_run, "detail": detail_text, **record}
    )


def _plan_owner(sagemaker: Any, arn: str) -> str | None:
    """The team a training plan is tagged for: the capacity controller tags every plan it buys."""
    try:
        tags = [tag for page in sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn) for tag in page["Tags"]]
    except (ClientError, BotoCoreError):  # another account's, deleted or malformed: owned by no team of ours
        return None
    return next((t["Value"] for t in tags if t["Key"] == TAG_TEAM), None)


def _alert(sns: Any, topics: list[str | None], record: Mapping[str, Any], outcome: str) -> None:
    done = {
        "planned": "would stop (dry run)",
        DONE: "stopped",
        FAILED: "could not stop (retried on its next state change)",
    }[outcome]
    subject = f"GPU submission guard {done} a job of team {record['team']}"[:100]
    for topic in filter(None, topics):
        try:
            sns.publish(
                TopicArn=topic,
                Subject=subject,
                Message=json.dumps({**record, "outcome": outcome}, indent=2, sort_keys=True),
            )
        except (ClientError, BotoCoreError) as error:  # the ledger and the log keep the record
            log({"event": "guard_alert_failed", "topic": topic, "error": str(error)})


def _logged(document: dict[str, Any]) -> dict[str, Any]:
    log(document)
    return document
