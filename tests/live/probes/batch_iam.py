"""Batch IAM (register section ``batch-iam.*``): what team A's submission role can do, asked as
that role in a quota-share queue holding shares for teams A and B.

- quota-share-of-another-team: does Batch authorise the quota share a submission names? The
  policy names only A's share as the optional quota-share resource of SubmitServiceJob.
- pass-role-of-another-team: does Batch check the submitter's iam:PassRole for the payload's
  RoleArn? The job is named with B's prefix, so B's trust condition (jobs named after B) does not
  decide the outcome.
- training-job-name: the name Batch gives the training job, which the execution role's trust and
  log scope assume to be ``AWSBatch<payload TrainingJobName>``.
- payload-*-of-another-team: does Batch or SageMaker refuse, in A's own share and as A's own
  execution role, a payload with one thing of B's (its Tags, its TrainingPlanArn, an image in B's
  repository)? IAM never sees the payload: the submission guard (``guard_mode: act``) stops them.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from gpu_governance_runtime.contract import TAG_TEAM  # plain Python: no aws_cdk

from ..framework import Cleanup, Context, Option, Probe, Verdict, failed, inconclusive, passed
from ._batch import (
    BATCH_TRAINING_JOB_PREFIX,
    OPTIONS as BATCH_OPTIONS,
    STARTED,
    SUBMITS,
    TEAM_B,
    cost_of_service_jobs,
    denied,
    refused,
    submit,
    tags_of,
    team_payload,
    until_started_or_failed,
)

PLAN_B = Option("--plan-b", "a training plan ARN bought for team B (tagged gpu-governance:team = B)")
IMAGE_B = Option("--image-b", "an image URI in team B's repository")
OPTIONS = [*BATCH_OPTIONS, PLAN_B, IMAGE_B]


def _as_team_a(context: Context):
    return context.client("batch", context.team_role(context.args.team_a, "submit"))


def _own(context: Context, cleanup: Cleanup, batch, name: str) -> str:
    """A job of team A in its own share, submitted as its tooling does."""
    a = context.args.team_a
    return submit(
        context,
        cleanup,
        batch,
        share=a,
        tags=tags_of(context.args, a),
        body=team_payload(context, f"{a}-{name}", a),
        name=name,
    )


def quota_share_of_another_team(context: Context, cleanup: Cleanup) -> Verdict:
    """A's own share must work (else the probe proves nothing); B's must be refused."""
    a, b = context.args.team_a, context.args.team_b
    batch = _as_team_a(context)
    try:
        _own(context, cleanup, batch, "verify-live-own")
    except ClientError as error:
        return inconclusive(f"team {a} cannot submit into its own share: {error}")
    try:
        job_id = submit(
            context,
            cleanup,
            batch,
            share=b,
            tags=tags_of(context.args, a),
            body=team_payload(context, f"{a}-verify-live-a", a),
            name="verify-live-a",
        )
    except ClientError as error:
        if denied(error):
            return passed(f"SubmitServiceJob into share {b} refused: {error}")
        return inconclusive(f"refused for another reason: {error}")
    return failed(f"team {a} submitted job {job_id} into share {b} (terminated)")


def pass_role_of_another_team(context: Context, cleanup: Cleanup) -> Verdict:
    """Into A's own share, a payload that runs as B's execution role."""
    a, b = context.args.team_a, context.args.team_b
    batch = _as_team_a(context)
    try:
        job_id = submit(
            context,
            cleanup,
            batch,
            share=a,
            tags=tags_of(context.args, a),
            body=team_payload(context, f"{b}-verify-live-b", b),
            name="verify-live-b",
        )
    except ClientError as error:
        return (passed if denied(error) else inconclusive)(f"SubmitServiceJob refused: {error}")
    job = until_started_or_failed(context, batch, job_id)
    status, reason = job.get("status", "?"), job.get("statusReason", "")
    if status in STARTED:
        return failed(f"job {job_id} of team {a} reached {status} as team {b}'s role (terminated)")
    if status == "FAILED" and ("PassRole" in reason or "not authorized" in reason):
        return passed(f"job failed: {reason}")
    return inconclusive(f"job ended {status} ({reason or 'no capacity before the timeout?'})")


def training_job_name(context: Context, cleanup: Cleanup) -> Verdict:
    """A's own job, until Batch has created its training job: is it named as assumed?"""
    a = context.args.team_a
    batch = _as_team_a(context)
    try:
        job_id = _own(context, cleanup, batch, "verify-live-name")
    except ClientError as error:
        return inconclusive(f"team {a} cannot submit into its own share: {error}")
    job = until_started_or_failed(context, batch, job_id)
    given = ((job.get("latestAttempt") or {}).get("serviceResourceId") or {}).get("value", "")
    expected = f"{BATCH_TRAINING_JOB_PREFIX}{a}-verify-live-name"
    if not given:
        return inconclusive(f"no training job yet (job {job.get('status', '?')}): no capacity before the timeout?")
    if given.rsplit("/", 1)[-1].startswith(expected):
        return passed(f"Batch named the training job {given}")
    return failed(f"Batch named the training job {given}; the trust and log scope assume {expected}...")


def _payload_with_one_thing_of_b(check: str, change) -> Probe:
    def run(context: Context, cleanup: Cleanup) -> Verdict:
        a = context.args.team_a
        batch = _as_team_a(context)
        body = change(context, team_payload(context, f"{a}-verify-live-{check}", a))
        try:
            job_id = submit(
                context, cleanup, batch, share=a, tags=tags_of(context.args, a), body=body, name=f"verify-live-{check}"
            )
        except ClientError as error:
            if refused(error):
                return failed(f"SubmitServiceJob refused it: {error} (the guard is then a second line)")
            return inconclusive(f"SubmitServiceJob failed: {error}")
        job = until_started_or_failed(context, batch, job_id)
        status, reason = job.get("status", "?"), job.get("statusReason", "")
        if status in STARTED:
            return passed(f"job {job_id} reached {status} (terminated): only the submission guard stops it")
        if status == "FAILED":
            return failed(f"job failed before starting: {reason} (the guard is then a second line)")
        return inconclusive(f"job ended {status} ({reason or 'no capacity before the timeout?'})")

    return run


def _tags(context: Context, body: dict) -> dict:
    return {**body, "Tags": [{"Key": TAG_TEAM, "Value": context.args.team_b}]}


def _plan(context: Context, body: dict) -> dict:
    return {**body, "ResourceConfig": {**body["ResourceConfig"], "TrainingPlanArn": context.args.plan_b}}


def _image(context: Context, body: dict) -> dict:
    return {**body, "AlgorithmSpecification": {**body["AlgorithmSpecification"], "TrainingImage": context.args.image_b}}


PAYLOAD_ROW = "batch-iam.service-job-payload-unchecked"
PAYLOAD_PASSES = "it starts (then it is terminated): Batch and SageMaker take it, so only the submission guard stops it"
PROBES = [
    Probe(
        name="quota-share-of-another-team",
        row="batch-iam.quota-share-resource",
        does="as team A's submission role, submits into A's own share (it must be accepted), then into B's",
        passes_when="SubmitServiceJob into B's share is refused",
        needs=(*SUBMITS, TEAM_B.flag),
        cost=cost_of_service_jobs(2),
        run=quota_share_of_another_team,
    ),
    Probe(
        name="pass-role-of-another-team",
        row="batch-iam.submitter-pass-role",
        does="as team A's submission role, submits into A's share a payload whose RoleArn is B's execution role",
        passes_when="refused at submission, or the job fails for iam:PassRole before it starts",
        needs=(*SUBMITS, TEAM_B.flag),
        cost=cost_of_service_jobs(1, started=True),
        run=pass_role_of_another_team,
    ),
    Probe(
        name="training-job-name",
        row="batch-iam.training-job-name",
        does="as team A's submission role, submits one of A's own jobs and waits for Batch to create its training job",
        passes_when=f"the training job is named {BATCH_TRAINING_JOB_PREFIX}<payload TrainingJobName>...",
        needs=SUBMITS,
        cost=cost_of_service_jobs(1, started=True),
        run=training_job_name,
    ),
    Probe(
        name="payload-tags-of-another-team",
        row=PAYLOAD_ROW,
        does="as team A, into A's share, A's own payload but for its Tags, which name team B",
        passes_when=PAYLOAD_PASSES,
        needs=(*SUBMITS, TEAM_B.flag),
        cost=cost_of_service_jobs(1, started=True),
        run=_payload_with_one_thing_of_b("tags", _tags),
    ),
    Probe(
        name="payload-plan-of-another-team",
        row=PAYLOAD_ROW,
        does="as team A, into A's share, A's own payload but for its ResourceConfig.TrainingPlanArn: B's plan",
        passes_when=PAYLOAD_PASSES,
        needs=(*SUBMITS, PLAN_B.flag),
        cost=cost_of_service_jobs(1, started=True),
        run=_payload_with_one_thing_of_b("plan", _plan),
    ),
    Probe(
        name="payload-image-of-another-team",
        row=PAYLOAD_ROW,
        does="as team A, into A's share, A's own payload but for its TrainingImage, in B's repository",
        passes_when=PAYLOAD_PASSES,
        needs=(*SUBMITS, IMAGE_B.flag),
        cost=cost_of_service_jobs(1, started=True),
        run=_payload_with_one_thing_of_b("image", _image),
    ),
]
