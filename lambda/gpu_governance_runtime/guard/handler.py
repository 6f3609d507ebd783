"""The submission guard Lambda: on each Batch service-job state change of a governed quota-share
queue, reads the job (``DescribeServiceJob``: the event carries neither ``tags`` nor
``serviceRequestPayload``, https://docs.aws.amazon.com/batch/latest/userguide/service-job-events.html)
and checks its SageMaker payload, and the training job Batch created from it, against the
submitting team (``checks.py``). A violation is recorded in the ledger first (who submitted
what), then the job is stopped with ``TerminateServiceJob`` (``DRY_RUN=false`` only) and the
platform's and the team owner's topics hear of it [aws: events.sns-publish-delivers], once per job
however often the events come [aws: events.batch-job-state-change-at-least-once].

It fails closed (docs/security.md, "Beyond IAM, row 4"): what it must read and cannot (throttled,
timed out, not there yet) is retried by the client with backoff, then raised, so Lambda retries
the event twice and then puts it in the dead-letter queue [aws: events.lambda-async-retries]; every
ten minutes a scheduled run takes the dead-letter queue's events and checks them again (``redrive``)
until they are read. A job found clean is recorded as admitted, so its later events cost no
``DescribeServiceJob``; a job that ended before the guard read it is still checked, recorded and
reported.

Environment (and ``guard.json`` in the package, contract.GUARD_FILE_NAME):
  GUARD_QUEUES       JSON list, one per guarded queue: {"job_queue": ARN, "pool"}
  GUARD_NAMES        JSON: the team execution role and owner topic ARNs with "{team}" for the name, the ECR registry host
  LEDGER_TABLE       DynamoDB table of actions (partition key ``action_id``), the reclaim ledger's format
  TOPIC_ARN          the platform's topic
  DEAD_LETTERS_URL   the function's dead-letter queue, which ``redrive`` empties
  DRY_RUN            "false" to stop jobs; anything else records and alerts only
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from .. import api_check
from ..common.action_ledger import CLAIMED, DONE, FAILED, FUNCTION_TIMEOUT_SECONDS, RETENTION_SECONDS, ActionKey, Ledger
from ..common.clients import WITHIN_A_TICK
from ..common.handler import Environment, Event, EventKind, recognise, time_left
from ..common.log import write as log
from ..contract import (
    ENV_DEAD_LETTERS_URL,
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
from . import checks

ACTION = "guard-terminate"
# A dry run's decision is claimed under its own action: once the guard is switched to act, a job it
# only reported is still claimed afresh, and stopped if it still violates.
DRY_RUN_ACTION = "guard-report"
# A job found clean: its team and the training jobs whose tags were read. Its payload cannot change
# (UpdateServiceJob takes only a scheduling priority) [aws: sm-job.payload-is-fixed-at-submission].
ADMITTED_ACTION = "guard-admitted"
ENDED = "ended"  # a violation found only after the job had ended or was being stopped: recorded and reported
# No training job exists before SCHEDULED: "the job moves to SCHEDULED and the job has been passed to SageMaker AI"
# [aws: sm-job.training-job-created-at-scheduled].
BEFORE_SAGEMAKER = ("SUBMITTED", "PENDING", "RUNNABLE")
# What a plan lookup may answer for an ARN that is not one of this account's plans: owned by no team.
NOT_A_PLAN_OF_OURS = ("ResourceNotFound", "ValidationException", "AccessDeniedException")
REDRIVE_RESERVE_SECONDS = 10  # a redrive starts no event with less time left than this
SERVICE_JOB_STATE_CHANGE, REDRIVE = "service_job_state_change", "redrive"
EVENTS = (EventKind(SERVICE_JOB_STATE_CHANGE, *SERVICE_JOB_EVENT), EventKind(REDRIVE, "aws.events", "Scheduled Event"))

batch = boto3.client("batch", config=WITHIN_A_TICK)
sagemaker = boto3.client("sagemaker", config=WITHIN_A_TICK)
sns = boto3.client("sns", config=WITHIN_A_TICK)
sqs = boto3.client("sqs", config=WITHIN_A_TICK)
dynamodb = boto3.resource("dynamodb", config=WITHIN_A_TICK)
# Checked against the runtime's boto3 at cold start (api_check); a test keeps it equal to the calls in the code.
REQUIRED_OPERATIONS = {
    "batch": ("DescribeServiceJob", "TerminateServiceJob"),
    "sagemaker": ("ListTags",),
    "sns": ("Publish",),
    "sqs": ("DeleteMessage", "ReceiveMessage"),
    "dynamodb": ("GetItem", "PutItem", "UpdateItem"),
}
if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
    api_check.require(
        {"batch": batch, "sagemaker": sagemaker, "sns": sns, "sqs": sqs, "dynamodb": dynamodb.meta.client},
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
    dead_letters: str
    dry_run: bool

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> GuardSettings:
        read = Environment(environ)
        return cls(
            queues=tuple(read.json(ENV_GUARD_QUEUES, list)),
            names=read.json(ENV_GUARD_NAMES, dict),
            ledger_table=read.text(ENV_LEDGER_TABLE, allowed="the DynamoDB table of actions"),
            platform_topic=read.text(ENV_TOPIC_ARN, allowed="the SNS topic ARN"),
            dead_letters=read.text(ENV_DEAD_LETTERS_URL, allowed="the SQS dead-letter queue URL"),
            dry_run=read.dry_run(),
        )


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    settings = GuardSettings.from_environ(os.environ)

    def check(one: Mapping[str, Any]) -> dict[str, Any]:
        return guard(
            one,
            queues=_guarded_queues(json.dumps(settings.queues), json.dumps(settings.names)),
            ledger=Ledger(dynamodb.Table(settings.ledger_table)),
            dry_run=settings.dry_run,
            platform_topic=settings.platform_topic,
            batch=batch,
            sagemaker=sagemaker,
            sns=sns,
            now=time.time(),
        )

    if recognise(event, EVENTS).kind == REDRIVE:
        return redrive(sqs, settings.dead_letters, check, time_left(context))
    return check(event)


@lru_cache(maxsize=1)
def _guarded_queues(queues: str, names: str) -> dict[str, Any]:
    """Keyed by the settings as text (hashable): warm invocations reuse the bundled document's reading."""
    return queues_from(
        json.loads(queues),
        json.loads(names),
        json.loads((Path(__file__).resolve().parents[1] / GUARD_FILE_NAME).read_text()),
    )


# A team's run-time limits in the bundled document, passed on as they are (checks.rules_from reads them).
RUNTIME_LIMITS = ("max_runtime_seconds", "max_runtime_by_priority")


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
                    **{key: rules[key] for key in RUNTIME_LIMITS if key in rules},
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
    """One event: what was found and done. A bad or foreign event is logged and ignored; what
    must be read and cannot be raises ``checks.Unread`` (Lambda retries the event), and so does a
    stop that failed (its claim is recorded failed, so the retry claims it again)."""
    recognised = recognise(event, EVENTS)
    detail = recognised.detail
    ignored = _ignored(recognised, queues)
    if ignored is not None:
        return _logged(ignored)
    job_id, settings = detail["jobId"], queues[detail["jobQueue"]]
    admitted_key = ActionKey(pool=settings["pool"], job_id=job_id, attempt="0", action=ADMITTED_ACTION)
    admitted = ledger.get(admitted_key.id)
    if admitted is not None and _still_admitted(admitted, detail):
        return _logged({"event": "guard_already_admitted", "job_id": job_id, "team": admitted.get("team")})
    job = _read("DescribeServiceJob", job_id, lambda: batch.describe_service_job(jobId=job_id))
    ended = bool(job.get("isTerminated")) or job.get("status") not in GUARDED_STATES
    team, found = checks.violations(
        job,
        checks.rules_from(settings),
        plan_owner=lambda arn: _plan_owner(sagemaker, arn),
        # An ended job's training jobs may never have been created; its payload still tells.
        training_job_tags=None if ended else lambda arn: _training_job_tags(sagemaker, arn),
    )
    if not found:
        return _admit(ledger, admitted_key.id, job_id, job, team, pool=settings["pool"], ended=ended, now=now)
    record = _violation_record(job, job_id, team, settings["pool"], found)
    key = ActionKey(pool=settings["pool"], job_id=job_id, attempt="0", action=DRY_RUN_ACTION if dry_run else ACTION)
    # The ledger keeps one line (the log, a year, and the alerts keep the whole record with the payload).
    said = (
        f"team {team} submitted {record['job_name']} ({job_id}) into share {record['quota_share']}: {'; '.join(found)}"
    )
    if not ledger.claim(key, now=now, reason=said):
        if (ledger.get(key.id) or {}).get("status") == CLAIMED:
            # Claimed, not finished: by an invocation still at work or killed, or by this one, its claim's answer
            # lost and the client's retry refused by its own write. Retried once the claim is stale, never dropped.
            raise _unread("claim", key.id, RuntimeError("claimed and not finished"))
        return _logged({"event": "guard_already_handled", **record})
    outcome, detail_text, error = _stop(batch, job, job_id, found, dry_run=dry_run, ended=ended)
    ledger.record(key, status=outcome, detail=detail_text)
    _alert(sns, [platform_topic, settings.get("team_topics", {}).get(team)], record, outcome)
    result = _logged(
        {"event": "guard_violation", "outcome": outcome, "dry_run": dry_run, "detail": detail_text, **record}
    )
    if error is not None:
        raise checks.Unread(f"TerminateServiceJob {job_id}: {error}") from error
    return result


def _ignored(recognised: Event, queues: Mapping[str, Any]) -> dict[str, Any] | None:
    """Why the event is none of the guard's business, or None for a guarded state of a job of a governed queue."""
    detail = recognised.detail
    if recognised.kind != SERVICE_JOB_STATE_CHANGE or not isinstance(detail, dict):
        return {"event": "guard_ignored", "reason": "not a Batch service job state change", "id": recognised.id}
    job_id, queue, status = detail.get("jobId"), detail.get("jobQueue"), detail.get("status")
    if queue not in queues or status not in GUARDED_STATES or not isinstance(job_id, str):
        return {
            "event": "guard_ignored",
            "job_id": job_id,
            "queue": queue,
            "status": status,
            "reason": "not a governed queue, a guarded state or a job id",
        }
    return None


def _admit(
    ledger: Ledger,
    key: str,
    job_id: str,
    job: Mapping[str, Any],
    team: str | None,
    *,
    pool: str,
    ended: bool,
    now: float,
) -> dict[str, Any]:
    """A job within its team's rules: recorded admitted with the training jobs whose tags were read."""
    training_jobs = [] if ended else checks.training_jobs(job)  # only those whose tags were read
    ledger.put(
        key,
        pool=pool,
        job_id=job_id,
        action=ADMITTED_ACTION,
        status="admitted",
        team=team,
        training_jobs=training_jobs,
        expires_at=int(now) + RETENTION_SECONDS,
    )
    return _logged(
        {"event": "guard_admitted", "job_id": job_id, "team": team, "pool": pool, "training_jobs": training_jobs}
    )


def _violation_record(
    job: Mapping[str, Any], job_id: str, team: str | None, pool: str, found: list[str]
) -> dict[str, Any]:
    """Who submitted what: the team (its submit permission forces the tag), the job, the share and the payload as sent."""
    return {
        "team": team,
        "job_id": job_id,
        "job_name": job.get("jobName"),
        "job_arn": job.get("jobArn"),
        "status": job.get("status"),
        "pool": pool,
        "quota_share": job.get("quotaShareName"),
        "violations": found,
        "tags": job.get("tags") or {},
        "payload": (job.get(checks.PAYLOAD) or "")[:2000],
    }


def _stop(
    batch: Any, job: Mapping[str, Any], job_id: str, found: list[str], *, dry_run: bool, ended: bool
) -> tuple[str, str, Exception | None]:
    """Terminates the violating job unless dry run or already ended: (outcome, detail, the error of a failed stop)."""
    if dry_run:
        return "planned", "dry run: the job was left running", None
    if ended:
        return ENDED, f"the job was {job.get('status')} (terminated: {job.get('isTerminated')}) when read", None
    try:
        batch.terminate_service_job(jobId=job_id, reason=f"gpu-governance submission guard: {'; '.join(found)}"[:1000])
    except (ClientError, BotoCoreError) as failure:  # recorded failed: the retried event claims it again
        return FAILED, str(failure), failure
    return DONE, "terminated", None


def _still_admitted(admitted: Mapping[str, Any], detail: Mapping[str, Any]) -> bool:
    """Nothing new to read: the job is still before SageMaker, or every training job the event names
    was read (a retried attempt creates another; a job past SCHEDULED whose training job was never
    read is read now, even when the event names none)."""
    verified = set(admitted.get("training_jobs") or ())
    named = set(checks.training_jobs(detail))
    return detail.get("status") in BEFORE_SAGEMAKER or (bool(verified) and named <= verified)


def _read(operation: str, subject: str, call: Callable[[], Any]) -> Any:
    """One read the decision needs. The client retries throttling and transient errors with backoff
    (WITHIN_A_TICK: 5 attempts); still unread, it raises ``Unread`` and the event is retried."""
    try:
        return call()
    except (ClientError, BotoCoreError) as error:
        raise _unread(operation, subject, error) from error


def _unread(operation: str, subject: str, error: Exception) -> checks.Unread:
    log({"event": "guard_unread", "step": operation, "subject": subject, "error": str(error)})
    return checks.Unread(f"{operation} {subject}: {error}")


def _plan_owner(sagemaker: Any, arn: str) -> str | None:
    """The team a training plan is tagged for [aws: sm-plan.list-tags]: the capacity controller tags
    every plan it buys. An ARN that is not one of this account's plans is no team's; a read that failed is no decision."""
    try:
        tags = [tag for page in sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn) for tag in page["Tags"]]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in NOT_A_PLAN_OF_OURS:
            return None
        raise _unread("ListTags", arn, error) from error
    except BotoCoreError as error:
        raise _unread("ListTags", arn, error) from error
    return next((t["Value"] for t in tags if t["Key"] == TAG_TEAM), None)


def _training_job_tags(sagemaker: Any, arn: str) -> dict[str, str]:
    """The tags the training job carries (a training job just created may not be readable yet: that
    is unread, retried)."""
    pages = _read("ListTags", arn, lambda: list(sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn)))
    return {tag["Key"]: tag["Value"] for page in pages for tag in page["Tags"]}


def redrive(
    sqs: Any, queue_url: str, check: Callable[[Mapping[str, Any]], Any], left: Callable[[], float]
) -> dict[str, Any]:
    """Each event in the dead-letter queue checked again, oldest first as SQS hands them out, while
    time is left: one checked is deleted; one that fails again stays (out of sight for a function
    timeout, then back for the next redrive; SQS keeps it 14 days and the DeadLetters alarm stays
    on). Lambda and EventBridge write the event itself as the message body [aws: events.dead-letter-body-is-the-event].
    A short poll may answer fewer messages than are waiting, or none [aws: events.sqs-receive-short-poll]: what it missed
    is the next run's; each is deleted by the handle it came with [aws: events.sqs-delete-by-latest-receipt-handle]."""
    checked = failed = 0
    seen: set[str] = set()  # a message SQS hands out again within this run is left for the next one
    while left() > REDRIVE_RESERVE_SECONDS:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=FUNCTION_TIMEOUT_SECONDS, WaitTimeSeconds=0
        ).get("Messages", [])
        fresh = [message for message in messages if message["MessageId"] not in seen]
        if not fresh:
            break
        for message in fresh:
            seen.add(message["MessageId"])
            if left() <= REDRIVE_RESERVE_SECONDS:
                break
            try:
                check(json.loads(message["Body"]))
            except Exception as error:  # noqa: BLE001 - one event that fails again must not hold up the others
                failed += 1
                log({"event": "guard_redrive_failed", "message_id": message["MessageId"], "error": str(error)})
                continue
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            checked += 1
    return _logged({"event": "guard_redrive", "checked": checked, "failed": failed})


def _alert(sns: Any, topics: list[str | None], record: Mapping[str, Any], outcome: str) -> None:
    done = {
        "planned": "would stop (dry run)",
        DONE: "stopped",
        FAILED: "could not stop (retried)",
        ENDED: "found too late to stop",
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
