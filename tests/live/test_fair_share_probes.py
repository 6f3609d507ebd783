"""The fair-share probes (array children, the copy's listing lag), offline with botocore's Stubber:
their verdicts from Batch's answers, and that every job (and the temporary role) is undone."""

from __future__ import annotations

import pytest
from botocore.stub import ANY

from tests.live import framework
from tests.live.framework import FAIL, INCONCLUSIVE, PASS
from tests.live.probes import _batch, fair_share

from .conftest import TICK, role
from .test_batch_iam_probes import ARGS, COPY_ARGS, OWN_TAGS, TEMPORARY, _role_removed, _temporary_role

FAIR = dict(ARGS, **COPY_ARGS)
FAIR_QUEUE = COPY_ARGS["fair_share_queue"]
PARENT = "4c7b-arr"
CHILDREN = [f"{PARENT}:0", f"{PARENT}:1"]


def run(context, name, **args):
    (probe,) = [p for p in fair_share.PROBES if p.name == name]
    return framework.run_one(probe, context(**{**FAIR, **args}))


def _submitted(team, job_id, name, **extra):
    team.add_response(
        "submit_job",
        {"jobArn": f"arn:aws:batch:us-east-1:111122223333:job/{job_id}", "jobName": name, "jobId": job_id},
        {
            "jobName": name,
            "jobQueue": FAIR_QUEUE,
            "jobDefinition": "research-train:3",
            "shareIdentifier": "research",
            "tags": OWN_TAGS,
            "timeout": {"attemptDurationSeconds": fair_share.ATTEMPT_SECONDS},
            **extra,
        },
    )


def _job(job_id, status, *, summary=None, tags=OWN_TAGS, share="research"):
    detail = {
        "jobArn": f"arn:aws:batch:us-east-1:111122223333:job/{job_id}",
        "jobName": "verify-live-array",
        "jobId": job_id,
        "jobQueue": FAIR_QUEUE,
        "status": status,
        "startedAt": 1,
        "jobDefinition": "arn:aws:batch:us-east-1:111122223333:job-definition/research-train:3",
    }
    if summary is not None:
        detail["arrayProperties"] = {"size": 2, "statusSummary": summary}
    if tags is not None:
        detail["tags"] = tags
    if share is not None:
        detail["shareIdentifier"] = share
    return detail


def _array_waiting(stubs):
    """A's array submitted, and the parent read until it counts both children RUNNABLE."""
    team, batch = stubs("batch", role("research")), stubs("batch")
    _submitted(team, PARENT, "verify-live-array", arrayProperties={"size": 2})
    batch.add_response("describe_jobs", {"jobs": [_job(PARENT, "PENDING", summary={})]}, {"jobs": [PARENT]})
    batch.add_response(
        "describe_jobs", {"jobs": [_job(PARENT, "PENDING", summary={"RUNNABLE": 2})]}, {"jobs": [PARENT]}
    )
    return team, batch


def _listings(batch, by_queue, by_parent):
    """ListJobs by queue in the adapter's statuses, then by arrayJobId in the children's, each in lifecycle order."""
    for status in ("PENDING", "RUNNABLE", "STARTING", "RUNNING"):
        listed = [PARENT] if status == "PENDING" else by_queue if status == "RUNNABLE" else []
        batch.add_response(
            "list_jobs",
            {"jobSummaryList": [{"jobId": j, "jobName": "verify-live-array"} for j in listed]},
            {"jobQueue": FAIR_QUEUE, "jobStatus": status},
        )
    for status in ("RUNNABLE", "STARTING", "RUNNING"):
        listed = by_parent if status == "RUNNABLE" else []
        batch.add_response(
            "list_jobs",
            {"jobSummaryList": [{"jobId": j, "jobName": "verify-live-array"} for j in listed]},
            {"arrayJobId": PARENT, "jobStatus": status},
        )


def _parent_terminated(team):
    team.add_response("terminate_job", {}, {"jobId": PARENT, "reason": ANY})


@pytest.mark.parametrize(
    ("by_queue", "by_parent", "said"),
    [(CHILDREN, CHILDREN, "by queue holds 2, by arrayJobId 2"), ([], CHILDREN, "by queue holds 0, by arrayJobId 2")],
    ids=["both", "by-parent-only"],
)
def test_children_in_either_listing_pass_and_say_which(stubs, context, by_queue, by_parent, said):
    team, batch = _array_waiting(stubs)
    _listings(batch, by_queue, by_parent)
    _parent_terminated(team)
    result = run(context, "array-children-listing")
    assert result.verdict.outcome == PASS and said in result.verdict.detail and result.cleanup_failures == ()


def test_a_waiting_child_in_neither_listing_fails(stubs, context):
    team, batch = _array_waiting(stubs)
    _listings(batch, CHILDREN[:1], CHILDREN[:1])
    batch.add_response("describe_jobs", {"jobs": [_job(CHILDREN[1], "RUNNABLE")]}, {"jobs": CHILDREN[1:]})
    _parent_terminated(team)
    verdict = run(context, "array-children-listing").verdict
    assert verdict.outcome == FAIL and "hidden from reclaim" in verdict.detail


def test_a_child_that_ended_while_listed_is_inconclusive(stubs, context):
    team, batch = _array_waiting(stubs)
    _listings(batch, CHILDREN[:1], CHILDREN[:1])
    batch.add_response("describe_jobs", {"jobs": [_job(CHILDREN[1], "SUCCEEDED")]}, {"jobs": CHILDREN[1:]})
    _parent_terminated(team)
    assert run(context, "array-children-listing").verdict.outcome == INCONCLUSIVE


def test_an_array_whose_children_never_wait_is_inconclusive_and_terminated(stubs, context):
    team, batch = stubs("batch", role("research")), stubs("batch")
    _submitted(team, PARENT, "verify-live-array", arrayProperties={"size": 2})
    for _ in range(int(FAIR["timeout_minutes"] * 60 // TICK)):
        batch.add_response("describe_jobs", {"jobs": [_job(PARENT, "SUBMITTED", summary={})]}, {"jobs": [PARENT]})
    _parent_terminated(team)
    result = run(context, "array-children-listing")
    assert result.verdict.outcome == INCONCLUSIVE and result.cleanup_failures == ()


def test_an_array_the_team_may_not_submit_is_inconclusive(stubs, context):
    stubs("batch", role("research")).add_client_error("submit_job", "AccessDeniedException", "not authorized")
    assert run(context, "array-children-terminable").verdict.outcome == INCONCLUSIVE


# --- batch.array-child-fields: may the reclaim controller stop a child ----------------------------


def _children_read(batch, tags, listed_tags):
    batch.add_response(
        "describe_jobs",
        {"jobs": [_job(c, "RUNNABLE", tags=tags, share=None if tags is None else "research") for c in CHILDREN]},
        {"jobs": CHILDREN},
    )
    for child in CHILDREN:
        batch.add_response(
            "list_tags_for_resource",
            {"tags": listed_tags},
            {"resourceArn": f"arn:aws:batch:us-east-1:111122223333:job/{child}"},
        )


def test_a_child_the_reclaim_role_may_stop_passes_with_its_fields_and_the_role_is_deleted(stubs, context):
    team, batch = _array_waiting(stubs)
    _children_read(batch, OWN_TAGS, OWN_TAGS)
    iam = _temporary_role(stubs)
    reclaimer = stubs("batch", TEMPORARY)
    reclaimer.add_client_error("terminate_job", "AccessDeniedException", "not authorized")  # the new role not seen yet
    reclaimer.add_response("terminate_job", {}, {"jobId": CHILDREN[0], "reason": ANY})
    _role_removed(iam)
    _parent_terminated(team)
    result = run(context, "array-children-terminable")
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()
    assert f"{CHILDREN[0]}: share 'research', DescribeJobs gpu-governance:team 'research'" in result.verdict.detail


def test_a_child_without_the_team_tag_the_reclaim_role_may_not_stop_fails_and_says_so(stubs, context):
    team, batch = _array_waiting(stubs)
    _children_read(batch, None, {})
    iam = _temporary_role(stubs)
    reclaimer = stubs("batch", TEMPORARY)
    for _ in range(_batch.PROPAGATION_SECONDS // TICK):  # refused for longer than IAM takes to see a new role
        reclaimer.add_client_error(
            "terminate_job", "AccessDeniedException", "not authorized to perform batch:TerminateJob"
        )
    _role_removed(iam)
    _parent_terminated(team)
    result = run(context, "array-children-terminable")
    assert result.verdict.outcome == FAIL and result.cleanup_failures == ()
    assert "could not stop array children it plans to" in result.verdict.detail
    assert "DescribeJobs gpu-governance:team None, ListTagsForResource None" in result.verdict.detail


# --- batch.listing-lags ------------------------------------------------------------------------------


def _listed_by_name(batch, ids):
    batch.add_response(
        "list_jobs",
        {"jobSummaryList": [{"jobId": j, "jobName": "verify-live-lag"} for j in ids]},
        {"jobQueue": FAIR_QUEUE, "filters": [{"name": "JOB_NAME", "values": ["verify-live-lag"]}]},
    )


def test_a_job_listed_within_the_grace_passes_with_its_lag(stubs, context):
    team, batch = stubs("batch", role("research")), stubs("batch")
    _submitted(team, "lag-1", "verify-live-lag")
    _listed_by_name(batch, ["an-older-run"])
    _listed_by_name(batch, ["an-older-run", "lag-1"])
    team.add_response("terminate_job", {}, {"jobId": "lag-1", "reason": ANY})
    result = run(context, "copy-listing-lag")
    assert result.verdict.outcome == PASS and "listed by name 30 s after" in result.verdict.detail
    assert result.cleanup_failures == ()


def test_a_job_not_listed_within_the_grace_fails(stubs, context):
    team, batch = stubs("batch", role("research")), stubs("batch")
    _submitted(team, "lag-1", "verify-live-lag")
    for _ in range(int(fair_share.LISTING_GRACE_SECONDS // TICK)):
        _listed_by_name(batch, [])
    team.add_response("terminate_job", {}, {"jobId": "lag-1", "reason": ANY})
    verdict = run(context, "copy-listing-lag").verdict
    assert verdict.outcome == FAIL and "so twice" in verdict.detail
