"""Requeueing the Batch jobs on an expiring Capacity Block. moto's Batch cannot hold a job
RUNNING on a given container instance and its EC2 lacks the capacity-reservation filter, so
EC2, ECS and Batch go through the Stubber (every request and response checked against the
botocore model; any call not queued fails the test); the ledger is moto's DynamoDB."""

from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber
from gpu_governance_runtime.capacity.aws import PURCHASE_CLIENT_CONFIG
from gpu_governance_runtime.capacity.requeue import (
    JOB_SECONDS,
    TAG_REQUEUED_FROM,
    copy_request,
    requeue,
    resume,
)
from moto import mock_aws

from .stubbed_aws import create_ledger_table
from .stubbed_batch import (
    BLOCK,
    CE,
    COPY,
    ECS_CLUSTER,
    ENDS,
    NOW,
    ON_BLOCK,
    QUEUE,
    RUNNING,
    discovery,
    expect_terminate,
    job,
)


@pytest.fixture
def aws():
    with mock_aws():
        ledger = create_ledger_table()
        clients = {name: boto3.client(name, region_name="us-east-1", config=PURCHASE_CLIENT_CONFIG) for name in ("ec2", "ecs", "batch")}
        stubs = {name: Stubber(client) for name, client in clients.items()}
        for stub in stubs.values():
            stub.activate()
        yield clients, stubs, ledger
        for stub in stubs.values():
            stub.assert_no_pending_responses()


def drain(clients, ledger, *, dry_run=False, now=NOW):
    return requeue(window="launch-load-test", compute_environment=CE, reservation_id=BLOCK, ends_at=ENDS, dry_run=dry_run,
                   ledger=ledger, now=now, **clients)


def test_copy_keeps_what_the_job_was_submitted_with_minus_reserved_names():
    assert copy_request(RUNNING[0]) == COPY


def test_only_the_job_on_the_block_is_terminated_and_resubmitted_once(aws):
    clients, stubs, ledger = aws
    discovery(stubs)
    expect_terminate(stubs)
    stubs["batch"].add_response("submit_job", {"jobName": "train-llm", "jobId": "job-copy"}, COPY)
    assert drain(clients, ledger) == {"requeued": [{"job": "job-on-block", "new_job": "job-copy"}], "already_handled": [], "errors": [], "deferred": []}
    [(action, status, details)] = ledger.actions("requeue#", ("requeued",))
    assert (action, details["new_job"], details["reservation"]) == ("requeue#job-on-block", "job-copy", BLOCK)
    # The warning is delivered again while the terminated job still shows RUNNING: nothing is stopped twice.
    discovery(stubs)
    assert drain(clients, ledger, now=NOW + timedelta(seconds=30))["already_handled"] == ["job-on-block"]


def test_dry_run_only_names_the_jobs(aws):
    clients, stubs, ledger = aws
    discovery(stubs)
    assert drain(clients, ledger, dry_run=True) == {"would_requeue": ["job-on-block"]}
    assert ledger.actions("requeue#", ("claimed", "terminated", "requeued")) == []


def test_a_throttled_submit_is_resumed_next_run_without_a_second_terminate(aws):
    clients, stubs, ledger = aws
    discovery(stubs)
    expect_terminate(stubs)
    stubs["batch"].add_client_error("submit_job", service_error_code="TooManyRequestsException", http_status_code=429)
    assert drain(clients, ledger)["errors"] == [{"job": "job-on-block", "error": "TooManyRequestsException", "retry": "next run"}]
    assert [status for _, status, _ in ledger.actions("requeue#", ("claimed", "terminated"))] == ["terminated"]
    # Next run: the job is FAILED now and no longer listed; the ledger alone brings it back.
    stubs["batch"].add_response("list_jobs", {"jobSummaryList": [{"jobId": "job-on-block", "jobName": "train-llm"}]},
                                {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": ["train-llm"]}]})
    stubs["batch"].add_response("submit_job", {"jobName": "train-llm", "jobId": "job-copy"}, COPY)
    assert resume(ledger=ledger, batch=clients["batch"], now=NOW + timedelta(minutes=15))["requeued"] == [{"job": "job-on-block", "new_job": "job-copy"}]
    assert ledger.actions("requeue#", ("claimed", "terminated")) == []


def test_a_copy_submitted_before_a_crash_is_found_not_submitted_again(aws):
    clients, stubs, ledger = aws
    details = {"window": "launch-load-test", "reservation": BLOCK, "job": "job-on-block", "reason": "r", "request": COPY}
    ledger.claim_action("requeue#job-on-block", status="terminated", details=details, now=NOW)  # the crashed run got this far
    stubs["batch"].add_response("list_jobs", {"jobSummaryList": [{"jobId": "job-on-block", "jobName": "train-llm"},
                                                                 {"jobId": "job-copy", "jobName": "train-llm"}]},
                                {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": ["train-llm"]}]})
    stubs["batch"].add_response("describe_jobs", {"jobs": [job("job-copy", ON_BLOCK, tags={TAG_REQUEUED_FROM: "job-on-block"})]}, {"jobs": ["job-copy"]})
    assert resume(ledger=ledger, batch=clients["batch"], now=NOW)["requeued"] == [{"job": "job-on-block", "new_job": "job-copy"}]


def test_a_block_without_instances_touches_no_job(aws):
    clients, stubs, ledger = aws
    stubs["ec2"].add_response("describe_instances", {"Reservations": []}, None)
    stubs["batch"].add_response("describe_compute_environments", {"computeEnvironments": [
        {"computeEnvironmentName": "gpu-p5", "computeEnvironmentArn": CE, "ecsClusterArn": ECS_CLUSTER}]}, {"computeEnvironments": [CE]})
    assert drain(clients, ledger) == {"requeued": [], "already_handled": [], "errors": [], "deferred": []}


def test_a_job_claimed_without_time_left_is_not_touched_and_the_next_run_finishes_it(aws):
    clients, stubs, ledger = aws
    discovery(stubs)
    # Too little of the invocation left: the job is claimed (so it is not forgotten) but not stopped.
    result = requeue(window="launch-load-test", compute_environment=CE, reservation_id=BLOCK, ends_at=ENDS, dry_run=False,
                     ledger=ledger, now=NOW, time_left=lambda: JOB_SECONDS - 1, **clients)
    assert (result["requeued"], result["deferred"]) == ([], ["job-on-block"])
    assert [status for _, status, _ in ledger.actions("requeue#", ("claimed",))] == ["claimed"]
    expect_terminate(stubs)
    stubs["batch"].add_response("list_jobs", {"jobSummaryList": [{"jobId": "job-on-block", "jobName": "train-llm"}]},
                                {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": ["train-llm"]}]})
    stubs["batch"].add_response("submit_job", {"jobName": "train-llm", "jobId": "job-copy"}, COPY)
    assert resume(ledger=ledger, batch=clients["batch"], now=NOW + timedelta(minutes=1))["requeued"] == [{"job": "job-on-block", "new_job": "job-copy"}]
