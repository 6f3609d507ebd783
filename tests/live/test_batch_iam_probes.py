"""The batch-iam probes decide from real answers; botocore's Stubber plays Batch here (checking every
request against the real service model), so their verdicts and their undoing are tested offline."""

from __future__ import annotations

import json

import pytest
from botocore.stub import ANY

from tests.live import framework
from tests.live.framework import FAIL, INCONCLUSIVE, PASS
from tests.live.probes import _batch, batch_iam

from .conftest import TICK, role

QUEUE = "sagemaker-training"
ARGS = dict(
    queue=QUEUE,
    team_a="research",
    team_b="training",
    cost_centre_a="cc-research",
    image="img",
    instance_type="ml.g6e.12xlarge",
    output="s3://b/o/",
    timeout_minutes=1.0,
)
OWN_TAGS = {"gpu-governance:team": "research", "gpu-governance:cost-centre": "cc-research"}


def probe(name: str) -> framework.Probe:
    return next(p for p in batch_iam.PROBES if p.name == name)


def run(context, name: str, **args) -> framework.Result:
    return framework.run_one(probe(name), context(**{**ARGS, **args}))


def submitted(stubber, job_id, share, *, tags=OWN_TAGS, payload=ANY, priority=1):
    expected = {
        "jobName": ANY,
        "jobQueue": QUEUE,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": payload,
        "quotaShareName": share,
        "tags": tags,
    }
    stubber.add_response(
        "submit_service_job",
        {"jobArn": f"arn:aws:batch:us-east-1:111122223333:service-job/{job_id}", "jobName": "n", "jobId": job_id},
        expected if priority is None else {**expected, "schedulingPriority": priority},
    )


def described(stubber, job_id, status, reason="", resource=None, tags=OWN_TAGS):
    response = {
        "jobArn": f"arn:aws:batch:us-east-1:111122223333:service-job/{job_id}",
        "jobName": "n",
        "jobId": job_id,
        "jobQueue": QUEUE,
        "status": status,
        "statusReason": reason,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": "{}",
        "createdAt": 1,
        "startedAt": 1,
        "tags": tags,
    }
    if resource:
        response["latestAttempt"] = {"serviceResourceId": {"name": "TrainingJobArn", "value": resource}}
    stubber.add_response("describe_service_job", response, {"jobId": job_id})


def terminated(stubber, job_id, status="RUNNABLE"):
    """The undo step: the job is read, and terminated unless it ended."""
    described(stubber, job_id, status)
    if status not in ("SUCCEEDED", "FAILED"):
        stubber.add_response("terminate_service_job", {}, {"jobId": job_id, "reason": ANY})


def test_share_of_another_team_refused_passes_and_the_own_job_is_terminated(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "own", "research")
    batch.add_client_error(
        "submit_service_job", "AccessDeniedException", "not authorized to perform batch:SubmitServiceJob"
    )
    terminated(batch, "own")
    result = run(context, "quota-share-of-another-team")
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()


def test_share_of_another_team_accepted_fails_and_both_jobs_are_stopped(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "own", "research")
    submitted(batch, "intruder", "training")
    terminated(batch, "intruder")
    terminated(batch, "own")
    assert run(context, "quota-share-of-another-team").verdict.outcome == FAIL


def test_own_share_refused_proves_nothing(stubs, context):
    batch = stubs("batch", role("research"))
    batch.add_client_error("submit_service_job", "AccessDeniedException", "denied")
    verdict = run(context, "quota-share-of-another-team").verdict
    assert verdict.outcome == INCONCLUSIVE and "cannot submit into its own share" in verdict.detail


@pytest.mark.parametrize(
    ("cost_centre", "tags"),
    [("cc-research", OWN_TAGS), (None, {"gpu-governance:team": "research"})],
)
def test_a_submission_sends_the_teams_own_tags_and_a_priority(stubs, context, cost_centre, tags):
    """As the team's tooling does; the old probe sent neither a priority nor the cost centre and was
    refused for reasons of its own (issue 37, row 2). The Stubber compares every parameter."""
    batch = stubs("batch", role("research"))
    submitted(batch, "own", "research", tags=tags)
    batch.add_client_error("submit_service_job", "AccessDeniedException", "denied")
    terminated(batch, "own")
    assert run(context, "quota-share-of-another-team", cost_centre_a=cost_centre).verdict.outcome == PASS


def test_job_running_as_the_other_teams_role_fails(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "probe", "research")
    described(batch, "probe", "RUNNABLE")
    described(batch, "probe", "STARTING")
    terminated(batch, "probe", "STARTING")
    result = run(context, "pass-role-of-another-team")
    assert result.verdict.outcome == FAIL and "as team training's role" in result.verdict.detail


def test_the_payload_runs_as_team_bs_execution_role_and_is_named_after_b(stubs, context):
    batch = stubs("batch", role("research"))
    expected = json.dumps(
        _batch.payload("training-verify-live-b", role("training", "training"), "img", "ml.g6e.12xlarge", "s3://b/o/")
    )
    submitted(batch, "probe", "research", payload=expected)
    described(batch, "probe", "FAILED", reason="User is not authorized to perform iam:PassRole")
    terminated(batch, "probe", "FAILED")
    assert run(context, "pass-role-of-another-team").verdict.outcome == PASS


def test_pass_role_refused_at_submission_passes(stubs, context):
    batch = stubs("batch", role("research"))
    batch.add_client_error("submit_service_job", "AccessDeniedException", "not authorized to perform iam:PassRole")
    assert run(context, "pass-role-of-another-team").verdict.outcome == PASS


@pytest.mark.parametrize(
    ("resource", "outcome"),
    [
        ("arn:aws:sagemaker:us-east-1:111122223333:training-job/AWSBatchresearch-verify-live-name-1a2b", PASS),
        ("arn:aws:sagemaker:us-east-1:111122223333:training-job/AWSBatch-4711", FAIL),
        (None, INCONCLUSIVE),
    ],
)
def test_training_job_name_is_compared_with_what_the_trust_assumes(stubs, context, resource, outcome):
    batch = stubs("batch", role("research"))
    submitted(batch, "own", "research")
    if resource:
        described(batch, "own", "STARTING", resource=resource)
        terminated(batch, "own", "STARTING")
    else:
        for _ in range(3):
            described(batch, "own", "RUNNABLE")
        terminated(batch, "own")
    assert run(context, "training-job-name").verdict.outcome == outcome


def test_a_payload_batch_starts_passes_only_the_guard_stops_it(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "probe", "research")
    described(batch, "probe", "RUNNABLE")
    described(batch, "probe", "STARTING")
    terminated(batch, "probe", "STARTING")
    verdict = run(context, "payload-tags-of-another-team").verdict
    assert verdict.outcome == PASS and "only the submission guard stops it" in verdict.detail


def test_a_payload_refused_or_failed_before_starting_fails_the_row(stubs, context):
    batch = stubs("batch", role("research"))
    batch.add_client_error("submit_service_job", "ClientException", "TrainingPlanArn belongs to another principal")
    assert run(context, "payload-plan-of-another-team", plan_b="arn:plan/b").verdict.outcome == FAIL
    submitted(batch, "probe", "research")
    described(batch, "probe", "FAILED", reason="the training plan is not available to this job")
    terminated(batch, "probe", "FAILED")
    verdict = run(context, "payload-plan-of-another-team", plan_b="arn:plan/b").verdict
    assert verdict.outcome == FAIL and "training plan is not available" in verdict.detail


def test_a_payload_still_waiting_at_the_timeout_is_inconclusive_and_stopped(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "probe", "research")
    for _ in range(3):
        described(batch, "probe", "RUNNABLE")
    terminated(batch, "probe")
    assert run(context, "payload-image-of-another-team", image_b="b/img").verdict.outcome == INCONCLUSIVE


def test_a_payload_probe_without_its_input_does_nothing(stubs, context):
    verdict = run(context, "payload-plan-of-another-team").verdict
    assert verdict.outcome == INCONCLUSIVE and verdict.detail == "not run: needs --plan-b" and not stubs.clients


# --- batch-iam.tag-on-create-context ---------------------------------------------------------------


def test_a_tagged_submission_with_and_without_a_priority_is_accepted_with_its_tags(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "with", "research")
    described(batch, "with", "RUNNABLE")
    submitted(batch, "without", "research", priority=None)
    described(batch, "without", "RUNNABLE")
    terminated(batch, "without")
    terminated(batch, "with")
    result = run(context, "tagged-submission")
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()


def test_a_tagged_submission_refused_fails_the_row(stubs, context):
    """What main's policies would answer were the batch keys absent: the team cannot work."""
    batch = stubs("batch", role("research"))
    submitted(batch, "with", "research")
    described(batch, "with", "RUNNABLE")
    batch.add_client_error("submit_service_job", "AccessDeniedException", "not authorized to perform batch:TagResource")
    terminated(batch, "with")
    verdict = run(context, "tagged-submission").verdict
    assert verdict.outcome == FAIL and "without a priority was refused" in verdict.detail


def test_a_job_without_the_tags_it_was_submitted_with_fails(stubs, context):
    batch = stubs("batch", role("research"))
    submitted(batch, "with", "research")
    described(batch, "with", "RUNNABLE", tags={"gpu-governance:team": "research"})
    terminated(batch, "with")
    assert run(context, "tagged-submission").verdict.outcome == FAIL


COPY_ARGS = dict(
    fair_share_queue="gpu-fair-share", job_definition="research-train:3", reclaim_role="acme-ml-capacity-reclaimer"
)
TEMPORARY = "arn:aws:iam::111122223333:role/gpu-governance-verify-live-0123"
RECLAIMER_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "batch:SubmitJob", "Resource": "*"}],
}


def _temporary_role(stubs):
    """The caller (an assumed role) trusted by a new role holding the reclaimer's policies."""
    sts, iam = stubs("sts"), stubs("iam")
    sts.add_response(
        "get_caller_identity",
        {"UserId": "AROA:me", "Account": "111122223333", "Arn": "arn:aws:sts::111122223333:assumed-role/Admin/me"},
    )
    admin_role = {
        "Path": "/sandbox/",
        "RoleName": "Admin",
        "RoleId": "AROAEXAMPLEID0000000",
        "Arn": "arn:aws:iam::111122223333:role/sandbox/Admin",
        "CreateDate": "2026-12-01T00:00:00Z",
    }
    iam.add_response("get_role", {"Role": admin_role}, {"RoleName": "Admin"})
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": admin_role["Arn"]}, "Action": "sts:AssumeRole"}],
    }
    created = {**admin_role, "RoleName": TEMPORARY.rsplit("/", 1)[1], "Path": "/", "Arn": TEMPORARY}
    iam.add_response(
        "create_role",
        {"Role": created},
        {"RoleName": ANY, "AssumeRolePolicyDocument": json.dumps(trust), "MaxSessionDuration": 3600},
    )
    iam.add_response("list_role_policies", {"PolicyNames": ["Default"]}, {"RoleName": "acme-ml-capacity-reclaimer"})
    iam.add_response(
        "get_role_policy",
        {
            "RoleName": "acme-ml-capacity-reclaimer",
            "PolicyName": "Default",
            "PolicyDocument": json.dumps(RECLAIMER_POLICY),
        },
        {"RoleName": "acme-ml-capacity-reclaimer", "PolicyName": "Default"},
    )
    iam.add_response(
        "put_role_policy",
        {},
        {"RoleName": ANY, "PolicyName": "Default", "PolicyDocument": json.dumps(RECLAIMER_POLICY)},
    )
    iam.add_response(
        "list_attached_role_policies",
        {"AttachedPolicies": [{"PolicyName": "Logs", "PolicyArn": "arn:aws:iam::aws:policy/Logs"}]},
        {"RoleName": "acme-ml-capacity-reclaimer"},
    )
    iam.add_response("attach_role_policy", {}, {"RoleName": ANY, "PolicyArn": "arn:aws:iam::aws:policy/Logs"})
    return iam


def _role_removed(iam):
    iam.add_response("detach_role_policy", {}, {"RoleName": ANY, "PolicyArn": "arn:aws:iam::aws:policy/Logs"})
    iam.add_response("delete_role_policy", {}, {"RoleName": ANY, "PolicyName": "Default"})
    iam.add_response("delete_role", {}, {"RoleName": ANY})


COPY_TAGS = {**OWN_TAGS, "gpu-governance:requeued-from": "verify-live", "gpu-governance:times-preempted": "1"}


def _copy_submitted(batch, job_id="copy-1"):
    batch.add_response(
        "submit_job",
        {
            "jobArn": f"arn:aws:batch:us-east-1:111122223333:job/{job_id}",
            "jobName": "verify-live-copy",
            "jobId": job_id,
        },
        {
            "jobName": "verify-live-copy",
            "jobQueue": "gpu-fair-share",
            "jobDefinition": "research-train:3",
            "shareIdentifier": "research",
            "tags": COPY_TAGS,
            "timeout": {"attemptDurationSeconds": 60},
        },
    )


def test_a_controller_copy_is_submitted_as_a_temporary_copy_of_its_role_which_is_deleted(stubs, context):
    iam = _temporary_role(stubs)
    batch = stubs("batch", TEMPORARY)
    batch.add_client_error("submit_job", "AccessDeniedException", "not authorized")  # the new role not seen yet
    _copy_submitted(batch)
    batch.add_response("terminate_job", {}, {"jobId": "copy-1", "reason": ANY})
    _role_removed(iam)
    result = run(context, "controller-copy", **COPY_ARGS)
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()


def test_a_controller_copy_refused_fails_and_the_role_is_still_deleted(stubs, context):
    iam = _temporary_role(stubs)
    batch = stubs("batch", TEMPORARY)
    for _ in range(_batch.PROPAGATION_SECONDS // TICK):  # refused for longer than IAM takes to see a new role
        batch.add_client_error("submit_job", "AccessDeniedException", "not authorized to perform batch:TagResource")
    _role_removed(iam)
    result = run(context, "controller-copy", **COPY_ARGS)
    assert result.verdict.outcome == FAIL and result.cleanup_failures == ()


def _tagged(stubber, arn, tags):
    stubber.add_response("tag_resource", {}, {"resourceArn": arn, "tags": tags})


def test_tagging_existing_jobs_is_refused_where_it_would_move_a_job_between_teams(stubs, context):
    a, b = stubs("batch", role("research")), stubs("batch", role("training"))
    job = lambda i: f"arn:aws:batch:us-east-1:111122223333:service-job/{i}"  # noqa: E731
    submitted(a, "a-1", "research")
    described(a, "a-1", "RUNNABLE")
    submitted(b, "b-1", "training", tags={"gpu-governance:team": "training"})
    described(b, "b-1", "RUNNABLE")
    for operation, params in (
        ("tag_resource", {"resourceArn": job("b-1"), "tags": {"gpu-governance:team": "research"}}),
        ("tag_resource", {"resourceArn": job("a-1"), "tags": {"gpu-governance:team": "training"}}),
        ("untag_resource", {"resourceArn": job("a-1"), "tagKeys": ["gpu-governance:team"]}),
    ):
        a.add_client_error(operation, "AccessDeniedException", "explicit deny", expected_params=params)
    terminated(b, "b-1")
    terminated(a, "a-1")
    result = run(context, "tag-existing-job")
    assert result.verdict.outcome == PASS and result.cleanup_failures == ()


def test_an_existing_job_tagged_for_another_team_fails(stubs, context):
    a, b = stubs("batch", role("research")), stubs("batch", role("training"))
    submitted(a, "a-1", "research")
    described(a, "a-1", "RUNNABLE")
    submitted(b, "b-1", "training", tags={"gpu-governance:team": "training"})
    described(b, "b-1", "RUNNABLE")
    a.add_response("tag_resource", {})  # B's job taken
    a.add_client_error("tag_resource", "AccessDeniedException", "explicit deny")
    a.add_client_error("untag_resource", "AccessDeniedException", "explicit deny")
    terminated(b, "b-1")
    terminated(a, "a-1")
    verdict = run(context, "tag-existing-job").verdict
    assert verdict.outcome == FAIL and "tag team training's job as research's" in verdict.detail
