"""Batch fair-share queues (register section ``batch.*``): what the reclaim controller reads there
and may do, asked with team A's own jobs, submitted as A's tooling does (A's share and tags, each
attempt limited to 60 seconds) and terminated whatever happens.

- array-children-listing: which listings hold an array job's children. The reclaim adapter lists
  the queue by status and, for each array parent, its children by ``arrayJobId``
  (``backends/batch_fair_share/adapter.py``); either way it must see them.
- array-children-terminable: whether an array child carries its parent's share and tags, and
  above all whether the reclaim controller's role may stop one: its ``TerminateJob`` needs a team
  tag on the job (``constructs_lib/controllers/reclaim.py``), and a child it cannot stop is a
  victim the planner counts on in vain. As a temporary role holding that role's policies.
- copy-listing-lag: how long after SubmitJob a job appears in ListJobs by name, where the reclaim
  controller looks for a copy an interrupted run may have submitted before it submits again
  (``common/batch_copy.py``, ``LISTING_GRACE_SECONDS`` after the uncertain request).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from gpu_governance_runtime.backends.batch_fair_share.adapter import CHILD_STATUSES, LIFECYCLE, LISTED_STATUSES
from gpu_governance_runtime.common.batch_copy import LISTING_GRACE_SECONDS  # plain Python: no aws_cdk
from gpu_governance_runtime.contract import TAG_TEAM

from ..framework import Cleanup, Context, Probe, Verdict, failed, inconclusive, passed
from ._batch import (
    FAIR_SHARE_QUEUE,
    JOB_DEFINITION,
    OPTIONS as BATCH_OPTIONS,
    REASON,
    RECLAIM_ROLE,
    TEAM_A,
    as_team_a,
    copy_of_role,
    denied,
    tags_of,
    while_iam_propagates,
)

OPTIONS = BATCH_OPTIONS
SIZE = 2  # the array's children
ATTEMPT_SECONDS = 60  # each job's (each child's) attemptDurationSeconds: what one may run
LISTING_EVERY = 5  # seconds between ListJobs while the probe waits for a job to be listed
NEEDS = (TEAM_A.flag, FAIR_SHARE_QUEUE.flag, JOB_DEFINITION.flag)


def _submit(context: Context, cleanup: Cleanup, batch: Any, name: str, **extra: Any) -> str:
    """A job of A's in its own share, with its tags; terminated (all its children with it) at the end."""
    args, a = context.args, context.args.team_a
    job_id = batch.submit_job(
        jobName=name,
        jobQueue=args.fair_share_queue,
        jobDefinition=args.job_definition,
        shareIdentifier=a,
        tags=tags_of(args, a),
        timeout={"attemptDurationSeconds": ATTEMPT_SECONDS},
        **extra,
    )["jobId"]
    cleanup.add(f"terminate job {job_id}", lambda: batch.terminate_job(jobId=job_id, reason=REASON))
    return job_id


def _array(context: Context, cleanup: Cleanup) -> tuple[dict[str, Any], list[str]] | Verdict:
    """An array of SIZE children of A's, once its parent counts every child waiting or running: the
    parent as then described, and its children's ids (``<parent>:<index>``)."""
    batch = as_team_a(context)
    try:
        parent_id = _submit(context, cleanup, batch, "verify-live-array", arrayProperties={"size": SIZE})
    except ClientError as error:
        return inconclusive(f"team {context.args.team_a} cannot submit an array job into its share: {error}")
    reader = context.client("batch", None)
    deadline = context.clock() + context.args.timeout_minutes * 60
    while True:
        (parent,) = reader.describe_jobs(jobs=[parent_id])["jobs"]
        summary = (parent.get("arrayProperties") or {}).get("statusSummary") or {}
        if sum(summary.get(status, 0) for status in CHILD_STATUSES) >= SIZE:
            return parent, [f"{parent_id}:{index}" for index in range(SIZE)]
        if parent["status"] in ("SUCCEEDED", "FAILED") or context.clock() >= deadline:
            return inconclusive(f"array job {parent_id} is {parent['status']}, its children {summary or 'not counted'}")
        context.sleep(15)


def _forward(statuses: tuple[str, ...]) -> tuple[str, ...]:
    """``statuses`` in the order a job goes through them."""
    return tuple(s for s in LIFECYCLE if s in statuses)


def _listed(batch: Any, statuses: tuple[str, ...], **selector: str) -> set[str]:
    return {
        summary["jobId"]
        for status in statuses
        for page in batch.get_paginator("list_jobs").paginate(**selector, jobStatus=status)
        for summary in page["jobSummaryList"]
    }


def array_children_listing(context: Context, cleanup: Cleanup) -> Verdict:
    """The queue's listing (the adapter's statuses) and the parent's (its children's statuses),
    each read in lifecycle order so a child moving on is seen again later."""
    found = _array(context, cleanup)
    if isinstance(found, Verdict):
        return found
    parent, children = found
    batch = context.client("batch", None)
    by_queue = _listed(batch, _forward(LISTED_STATUSES), jobQueue=context.args.fair_share_queue) & set(children)
    by_parent = _listed(batch, _forward(CHILD_STATUSES), arrayJobId=parent["jobId"])
    said = (
        f"of {SIZE} children, ListJobs by queue holds {len(by_queue)}, by arrayJobId {len(by_parent & set(children))}"
    )
    unseen = sorted(set(children) - by_queue - by_parent)
    if not unseen:
        return passed(f"{said}: the reclaim adapter, which reads both, sees every child")
    still = [j["jobId"] for j in batch.describe_jobs(jobs=unseen)["jobs"] if j["status"] in CHILD_STATUSES]
    if still:
        return failed(f"{said}: {still} waiting or running and in neither listing, hidden from reclaim")
    return inconclusive(f"{said}: {unseen} ended while the listings were read")


def array_children_terminable(context: Context, cleanup: Cleanup) -> Verdict:
    """A's array; its children's share and tags as DescribeJobs and ListTagsForResource give them;
    then, as a temporary copy of the reclaim controller's role, TerminateJob of the first child."""
    args = context.args
    found = _array(context, cleanup)
    if isinstance(found, Verdict):
        return found
    parent, children = found
    batch = context.client("batch", None)
    described = batch.describe_jobs(jobs=children)["jobs"]
    team = (parent.get("tags") or {}).get(TAG_TEAM)
    fields = [
        f"{child['jobId']}: share {child.get('shareIdentifier')!r}, DescribeJobs {TAG_TEAM} "
        f"{(child.get('tags') or {}).get(TAG_TEAM)!r}, ListTagsForResource "
        f"{batch.list_tags_for_resource(resourceArn=child['jobArn']).get('tags', {}).get(TAG_TEAM)!r}"
        for child in described
    ]
    said = f"the parent's share {parent.get('shareIdentifier')!r} and {TAG_TEAM} {team!r}; {'; '.join(fields)}"
    try:
        role = copy_of_role(context, cleanup, args.reclaim_role)
        reclaimer = while_iam_propagates(context, lambda: context.client("batch", role))
    except ClientError as error:
        return inconclusive(f"could not act as a copy of {args.reclaim_role}: {error}")
    try:
        while_iam_propagates(context, lambda: reclaimer.terminate_job(jobId=children[0], reason=REASON))
    except ClientError as error:
        if denied(error):
            return failed(
                f"the reclaim controller's role may not stop array child {children[0]} ({error}): its TerminateJob needs "
                f"a {TAG_TEAM} tag on the job, so the controller could not stop array children it plans to; {said}"
            )
        return inconclusive(f"TerminateJob of {children[0]} failed: {error}")
    return passed(f"the reclaim controller's role stopped array child {children[0]}; {said}")


def copy_listing_lag(context: Context, cleanup: Cleanup) -> Verdict:
    """One job of A's; ListJobs by its name (as ``batch_copy.find_copy`` looks) until it is listed."""
    args = context.args
    try:
        job_id = _submit(context, cleanup, as_team_a(context), "verify-live-lag")
    except ClientError as error:
        return inconclusive(f"team {args.team_a} cannot submit into its share: {error}")
    batch = context.client("batch", None)
    start = context.clock()
    while True:
        pages = batch.get_paginator("list_jobs").paginate(
            jobQueue=args.fair_share_queue, filters=[{"name": "JOB_NAME", "values": ["verify-live-lag"]}]
        )
        lag = context.clock() - start
        if any(s["jobId"] == job_id for page in pages for s in page["jobSummaryList"]):
            return passed(
                f"job {job_id} listed by name {lag:.0f} s after SubmitJob answered (grace {LISTING_GRACE_SECONDS:.0f} s)"
            )
        if lag >= LISTING_GRACE_SECONDS:
            return failed(
                f"job {job_id} not listed by name {lag:.0f} s after SubmitJob answered: a copy whose answer was lost would "
                f"be submitted again after LISTING_GRACE_SECONDS ({LISTING_GRACE_SECONDS:.0f} s), so twice"
            )
        context.sleep(LISTING_EVERY)


def _cost(jobs: str, more: str = ""):
    def bound(args) -> str:
        definition = args.job_definition or "<--job-definition>"
        return (
            f"{jobs} of {definition}, each limited to {ATTEMPT_SECONDS} s (attemptDurationSeconds) and terminated at the "
            f"end; the compute environment may start an instance for them, which Batch scales down again{more}"
        )

    return bound


PROBES = [
    Probe(
        name="array-children-listing",
        row="batch.array-children-listing",
        does=(
            f"as team A's submission role, submits an array job of {SIZE} children into A's share of --fair-share-queue; "
            "once they wait or run, lists the queue (the adapter's statuses) and the parent's children (arrayJobId)"
        ),
        passes_when="every child is in one of the two listings, as the reclaim adapter reads both; how many each holds is printed",
        needs=NEEDS,
        cost=_cost(f"{SIZE} array children"),
        run=array_children_listing,
    ),
    Probe(
        name="array-children-terminable",
        row="batch.array-child-fields",
        does=(
            f"as team A's submission role, submits an array job of {SIZE} children into A's share; reads the children's "
            "share and tags (DescribeJobs, ListTagsForResource); creates a temporary role with the reclaim controller "
            "role's policies, trusted by the caller only, and as it terminates the first child; deletes the role"
        ),
        passes_when=(
            "the reclaim controller's role may terminate an array child (its TerminateJob needs a team tag on the job); "
            "the children's share and tags are printed"
        ),
        needs=(*NEEDS, RECLAIM_ROLE.flag),
        cost=_cost(f"{SIZE} array children", "; a temporary IAM role, deleted at the end"),
        run=array_children_terminable,
    ),
    Probe(
        name="copy-listing-lag",
        row="batch.listing-lags",
        does=(
            "as team A's submission role, submits one job into A's share; as the caller lists the queue by its name "
            f"(JOB_NAME filter) every {LISTING_EVERY} s until it appears"
        ),
        passes_when=f"it is listed within LISTING_GRACE_SECONDS ({LISTING_GRACE_SECONDS:.0f} s); its lag is printed",
        needs=NEEDS,
        cost=_cost("one job"),
        run=copy_listing_lag,
    ),
]
