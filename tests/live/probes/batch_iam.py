"""Batch IAM (register section ``batch-iam.*``): what team A's submission role can do, asked as
that role in a quota-share queue holding shares for teams A and B.

- tagged-submission, controller-copy, tag-existing-job (row ``batch-iam.tag-on-create-context``):
  how Batch authorises the tags of a submission is written nowhere, and the policies hold
  whichever way; these show it in AWS. A team's correctly tagged submission is accepted (with a
  scheduling priority and without), a copy the reclaim controller would submit is accepted (as a
  temporary role holding the controller role's policies, deleted afterwards), and tagging an
  existing job is refused where it would hand a job to another team or take one from it.
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

from gpu_governance_runtime.contract import (  # plain Python: no aws_cdk
    TAG_REQUEUED_FROM,
    TAG_TEAM,
    TAG_TIMES_PREEMPTED,
)

from ..framework import Cleanup, Context, Option, Probe, Verdict, failed, inconclusive, passed
from ._batch import (
    BATCH_TRAINING_JOB_PREFIX,
    FAIR_SHARE_QUEUE,
    JOB_DEFINITION,
    OPTIONS as BATCH_OPTIONS,
    REASON,
    RECLAIM_ROLE,
    STARTED,
    SUBMITS,
    TEAM_A,
    TEAM_B,
    as_team_a,
    copy_of_role,
    cost_of_service_jobs,
    denied,
    refused,
    submit,
    submit_own,
    tags_of,
    team_payload,
    until_started_or_failed,
    while_iam_propagates,
)

PLAN_B = Option("--plan-b", "a training plan ARN bought for team B (tagged gpu-governance:team = B)")
IMAGE_B = Option("--image-b", "an image URI in team B's repository")
OPTIONS = [*BATCH_OPTIONS, PLAN_B, IMAGE_B]
TAG_ROW = "batch-iam.tag-on-create-context"


def quota_share_of_another_team(context: Context, cleanup: Cleanup) -> Verdict:
    """A's own share must work (else the probe proves nothing); B's must be refused."""
    a, b = context.args.team_a, context.args.team_b
    batch = as_team_a(context)
    try:
        submit_own(context, cleanup, batch, "verify-live-own")
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
    batch = as_team_a(context)
    try:
        job_id = submit_own(
            context, cleanup, batch, "verify-live-b", body=team_payload(context, f"{b}-verify-live-b", b)
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
    batch = as_team_a(context)
    try:
        job_id = submit_own(context, cleanup, batch, "verify-live-name")
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


def tagged_submission(context: Context, cleanup: Cleanup) -> Verdict:
    """A's submission as its tooling makes it, once with a scheduling priority and once without:
    both must be accepted, and the job must carry the tags."""
    a = context.args.team_a
    batch = as_team_a(context)
    tags = tags_of(context.args, a)
    seen = []
    for priority in (1, None):
        name = f"verify-live-tags-{'priority' if priority else 'no-priority'}"
        try:
            job_id = submit(
                context,
                cleanup,
                batch,
                share=a,
                tags=tags,
                body=team_payload(context, f"{a}-{name}", a),
                name=name,
                priority=priority,
            )
        except ClientError as error:
            if denied(error):
                return failed(
                    f"a tagged submission {'with' if priority else 'without'} a priority was refused: {error}"
                )
            return inconclusive(f"SubmitServiceJob failed: {error}")
        carried = batch.describe_service_job(jobId=job_id).get("tags", {})
        if any(carried.get(k) != v for k, v in tags.items()):
            return failed(f"job {job_id} carries {carried}, not the tags it was submitted with ({tags})")
        seen.append(job_id)
    return passed(f"both submissions accepted with their tags ({', '.join(seen)}; terminated)")


def controller_copy(context: Context, cleanup: Cleanup) -> Verdict:
    """SubmitJob of a copy as the reclaim controller submits it (common/batch_copy.py): A's share,
    A's tags and the requeue marks, as a role holding the controller role's policies."""
    args, a = context.args, context.args.team_a
    try:
        role = copy_of_role(context, cleanup, args.reclaim_role)
        batch = while_iam_propagates(context, lambda: context.client("batch", role))
    except ClientError as error:
        return inconclusive(f"could not act as a copy of {args.reclaim_role}: {error}")
    tags = {**tags_of(args, a), TAG_REQUEUED_FROM: "verify-live", TAG_TIMES_PREEMPTED: "1"}
    try:
        job_id = while_iam_propagates(
            context,
            lambda: batch.submit_job(
                jobName="verify-live-copy",
                jobQueue=args.fair_share_queue,
                jobDefinition=args.job_definition,
                shareIdentifier=a,
                tags=tags,
                timeout={"attemptDurationSeconds": 60},
            )["jobId"],
        )
    except ClientError as error:
        if denied(error):
            return failed(f"the controller's copy was refused: {error}")
        return inconclusive(f"SubmitJob failed: {error}")
    cleanup.add(f"terminate job {job_id}", lambda: batch.terminate_job(jobId=job_id, reason=REASON))
    return passed(f"the copy {job_id} was accepted with its tags (terminated)")


def tag_existing_job(context: Context, cleanup: Cleanup) -> Verdict:
    """A's own job and B's, then as A: tag B's job as A's, name B in A's job's team tag, remove
    A's job's team tag. Each must be refused."""
    args, a, b = context.args, context.args.team_a, context.args.team_b
    as_a, as_b = as_team_a(context), context.client("batch", context.team_role(b, "submit"))
    jobs = {}
    for team, batch in ((a, as_a), (b, as_b)):
        try:
            job_id = submit(
                context,
                cleanup,
                batch,
                share=team,
                tags=tags_of(args, team),
                body=team_payload(context, f"{team}-verify-live-tagged", team),
                name="verify-live-tagged",
            )
        except ClientError as error:
            return inconclusive(f"team {team} cannot submit into its own share: {error}")
        jobs[team] = batch.describe_service_job(jobId=job_id)["jobArn"]
    attempts = {
        f"tag team {b}'s job as {a}'s": lambda: as_a.tag_resource(resourceArn=jobs[b], tags={TAG_TEAM: a}),
        f"name team {b} in {a}'s job": lambda: as_a.tag_resource(resourceArn=jobs[a], tags={TAG_TEAM: b}),
        f"remove the team tag of {a}'s job": lambda: as_a.untag_resource(resourceArn=jobs[a], tagKeys=[TAG_TEAM]),
    }
    allowed = []
    for what, attempt in attempts.items():
        try:
            attempt()
            allowed.append(what)
        except ClientError as error:
            if not denied(error):
                return inconclusive(f"{what}: {error}")
    if allowed:
        return failed(f"team {a} could {'; '.join(allowed)} (jobs terminated)")
    return passed(f"all refused: {', '.join(attempts)}")


def _payload_with_one_thing_of_b(check: str, what: str, flag: str, change) -> Probe:
    """A probe of ``batch-iam.service-job-payload-unchecked``: A's own payload but for ``what``,
    which ``change`` makes B's (from the command line's ``flag``)."""

    def run(context: Context, cleanup: Cleanup) -> Verdict:
        a = context.args.team_a
        batch = as_team_a(context)
        body = change(context, team_payload(context, f"{a}-verify-live-{check}", a))
        try:
            job_id = submit_own(context, cleanup, batch, f"verify-live-{check}", body=body)
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

    return Probe(
        name=f"payload-{check}-of-another-team",
        row="batch-iam.service-job-payload-unchecked",
        does=f"as team A, into A's share, A's own payload but for {what}",
        passes_when="it starts (then it is terminated): Batch and SageMaker take it, so only the submission guard stops it",
        needs=(*SUBMITS, flag),
        cost=cost_of_service_jobs(1, started=True),
        run=run,
    )


def _tags(context: Context, body: dict) -> dict:
    return {**body, "Tags": [{"Key": TAG_TEAM, "Value": context.args.team_b}]}


def _plan(context: Context, body: dict) -> dict:
    return {**body, "ResourceConfig": {**body["ResourceConfig"], "TrainingPlanArn": context.args.plan_b}}


def _image(context: Context, body: dict) -> dict:
    return {**body, "AlgorithmSpecification": {**body["AlgorithmSpecification"], "TrainingImage": context.args.image_b}}


PROBES = [
    Probe(
        name="tagged-submission",
        row=TAG_ROW,
        does="as team A's submission role, submits into A's share with A's tags, once with a priority and once without",
        passes_when="both are accepted and carry their tags",
        needs=SUBMITS,
        cost=cost_of_service_jobs(2),
        run=tagged_submission,
    ),
    Probe(
        name="controller-copy",
        row=TAG_ROW,
        does=(
            "creates a temporary role with the reclaim controller role's policies, trusted by the caller only, and as it "
            "submits a copy of a job of A's (A's share, tags, requeued-from, times-preempted); deletes the role"
        ),
        passes_when="the copy is accepted",
        needs=(TEAM_A.flag, FAIR_SHARE_QUEUE.flag, JOB_DEFINITION.flag, RECLAIM_ROLE.flag),
        cost=lambda args: (
            f"one job of {args.job_definition or '<--job-definition>'}, terminated at once and limited to 60 s "
            "(attemptDurationSeconds); the compute environment may start an instance for it, which Batch scales down again"
        ),
        run=controller_copy,
    ),
    Probe(
        name="tag-existing-job",
        row=TAG_ROW,
        does=(
            "submits one job of A's and one of B's (each as its team's role), then as A tags B's job as A's, names B in "
            "A's job's team tag and removes that tag"
        ),
        passes_when="all three are refused",
        needs=(*SUBMITS, TEAM_B.flag),
        cost=cost_of_service_jobs(2),
        run=tag_existing_job,
    ),
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
    _payload_with_one_thing_of_b("tags", "its Tags, which name team B", TEAM_B.flag, _tags),
    _payload_with_one_thing_of_b("plan", "its ResourceConfig.TrainingPlanArn: B's plan", PLAN_B.flag, _plan),
    _payload_with_one_thing_of_b("image", "its TrainingImage, in B's repository", IMAGE_B.flag, _image),
]
