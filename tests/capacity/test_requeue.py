"""Requeueing the Batch jobs on an expiring Capacity Block. moto's Batch cannot hold a job
RUNNING on a given container instance and its EC2 lacks the capacity-reservation filter, so
EC2, ECS and Batch go through the Stubber (every request and response checked against the
botocore model; any call not queued fails the test); the ledger is moto's DynamoDB.

Issue 23 (outcomes 2-4): a job is stopped only from STOP_LEAD before the end (it checkpoints
after the warning), its state is read before anything is done to it (a job that SUCCEEDED or
FAILED on its own is never copied), and the copy is submitted through a one-request client,
recorded before and after."""

from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from gpu_governance_runtime.capacity.aws import PURCHASE_CLIENT_CONFIG
from gpu_governance_runtime.capacity.requeue import (
    JOB_SECONDS,
    SIGNAL_LEAD,
    STOP_LEAD,
    drain as drain_block,
    requeue,
    resume,
    stop_time,
)
from gpu_governance_runtime.common.batch_copy import copy_request
from gpu_governance_runtime.contract import TAG_REQUEUED_FROM
from gpu_governance_runtime.planners.market import TERMINATION_LEAD

from .stubbed_aws import create_ledger_table
from .stubbed_batch import (
    BLOCK,
    CE,
    COPY,
    ENDS,
    NOW,
    ON_BLOCK,
    QUEUE,
    REASON,
    RUNNING,
    STOPPED,
    discovery,
    expect_copy,
    expect_terminate,
    job,
)

STOP_TIME = stop_time(ENDS, NOW)  # told at the warning alone (NOW): the latest stop, one run before the instances go


@pytest.fixture
def aws():
    with mock_aws():
        ledger = create_ledger_table()
        clients = {
            name: boto3.client(name, region_name="us-east-1", config=PURCHASE_CLIENT_CONFIG)
            for name in ("ec2", "ecs", "batch")
        }
        stubs = {name: Stubber(client) for name, client in clients.items()}
        for stub in stubs.values():
            stub.activate()
        yield clients, stubs, ledger
        for stub in stubs.values():
            stub.assert_no_pending_responses()


def drain(clients, ledger, *, dry_run=False, now=NOW):
    return requeue(
        window="launch-load-test",
        compute_environment=CE,
        reservation_id=BLOCK,
        ends_at=ENDS,
        dry_run=dry_run,
        ledger=ledger,
        now=now,
        submit=clients["batch"],
        **clients,
    )


def later(clients, ledger, now, **extra):
    return resume(ledger=ledger, batch=clients["batch"], submit=clients["batch"], now=now, **extra)


def test_copy_keeps_what_the_job_was_submitted_with_minus_reserved_names():
    assert copy_request(RUNNING[0]) == COPY


def test_the_job_checkpoints_after_the_warning_and_is_stopped_and_copied_once_only_just_before_its_instances_go(aws):
    clients, stubs, ledger = aws
    discovery(stubs)
    first = drain(clients, ledger)
    assert (first["requeued"], first["waiting"]) == ([], ["job-on-block"])  # nothing stopped at the warning
    assert later(clients, ledger, STOP_TIME - timedelta(minutes=1))["waiting"] == ["job-on-block"]
    expect_terminate(stubs)
    expect_copy(stubs)
    assert later(clients, ledger, STOP_TIME)["requeued"] == [{"job": "job-on-block", "new_job": "job-copy"}]
    [(action, status, details)] = ledger.actions("requeue#", ("requeued",))
    assert (action, details["new_job"], details["reservation"]) == ("requeue#job-on-block", "job-copy", BLOCK)
    # It does not checkpoint: all it did since it started (startedAt 1 ms after the epoch) is cut (issue 40).
    assert details["cut_hours"] == round((STOP_TIME.timestamp() - 0.001) / 3600, 4)
    assert ENDS - timedelta(minutes=30) >= STOP_TIME  # before the instances terminate, 30 minutes before the end
    # The warning is delivered again: nothing is claimed, stopped or copied twice.
    discovery(stubs)
    again = drain(clients, ledger, now=STOP_TIME + timedelta(seconds=30))
    assert (again["already_handled"], again["requeued"]) == (["job-on-block"], [])


@pytest.mark.parametrize(
    "ended",
    [
        {"status": "SUCCEEDED", "statusReason": "Essential container in task exited"},
        {"status": "FAILED", "statusReason": "OutOfMemoryError: Container killed due to memory usage"},
    ],
)
def test_a_job_that_ended_on_its_own_before_its_stop_time_is_never_copied(aws, ended):
    clients, stubs, ledger = aws
    discovery(stubs)
    drain(clients, ledger)
    stubs["batch"].add_response("describe_jobs", {"jobs": [{**RUNNING[0], **ended}]}, {"jobs": ["job-on-block"]})
    result = later(clients, ledger, STOP_TIME)
    assert (result["requeued"], result["finished"]) == ([], ["job-on-block"])
    assert ledger.actions("requeue#", ("claimed", "terminated", "submitting", "requeued")) == []


def test_dry_run_only_names_the_jobs(aws):
    clients, stubs, ledger = aws
    discovery(stubs)
    assert drain(clients, ledger, dry_run=True) == {
        "would_requeue": ["job-on-block"],
        "would_stop_at": STOP_TIME.isoformat(),
    }
    assert ledger.actions("requeue#", ("claimed", "terminated", "requeued")) == []


def test_a_throttled_submit_is_resumed_next_run_without_a_second_terminate(aws):
    clients, stubs, ledger = aws
    discovery(stubs)
    drain(clients, ledger)
    expect_terminate(stubs)
    stubs["batch"].add_response(
        "list_jobs",
        {"jobSummaryList": [{"jobId": "job-on-block", "jobName": "train-llm"}]},
        {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": ["train-llm"]}]},
    )
    stubs["batch"].add_client_error("submit_job", service_error_code="TooManyRequestsException", http_status_code=429)
    assert later(clients, ledger, STOP_TIME)["errors"] == [
        {"job": "job-on-block", "error": "TooManyRequestsException", "retry": "next run"}
    ]
    assert [status for _, status, _ in ledger.actions("requeue#", ("claimed", "terminated", "submitting"))] == [
        "terminated"
    ]
    # Next run: the job is FAILED (stopped by the controller); the ledger brings it back at once, no second terminate.
    stubs["batch"].add_response("describe_jobs", {"jobs": [STOPPED]}, {"jobs": ["job-on-block"]})
    expect_copy(stubs)
    assert later(clients, ledger, STOP_TIME + timedelta(minutes=5))["requeued"] == [
        {"job": "job-on-block", "new_job": "job-copy"}
    ]
    assert ledger.actions("requeue#", ("claimed", "terminated", "submitting")) == []


def test_a_submit_whose_answer_was_lost_is_found_by_its_tag_not_submitted_again(aws):
    clients, stubs, ledger = aws
    details = {
        "window": "launch-load-test",
        "reservation": BLOCK,
        "job": "job-on-block",
        "reason": "r",
        "stop_at": STOP_TIME.isoformat(),
        "submitting_at": STOP_TIME.isoformat(),
    }
    ledger.claim_action(
        "requeue#job-on-block", status="submitting", details=details, now=STOP_TIME
    )  # the request's answer was lost
    # within the listing grace, a copy not listed yet is waited for, never submitted again
    stubs["batch"].add_response("describe_jobs", {"jobs": [STOPPED]}, {"jobs": ["job-on-block"]})
    stubs["batch"].add_response(
        "list_jobs",
        {"jobSummaryList": [{"jobId": "job-on-block", "jobName": "train-llm"}]},
        {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": ["train-llm"]}]},
    )
    assert later(clients, ledger, STOP_TIME + timedelta(minutes=1))["waiting"] == ["job-on-block"]
    stubs["batch"].add_response("describe_jobs", {"jobs": [STOPPED]}, {"jobs": ["job-on-block"]})
    stubs["batch"].add_response(
        "list_jobs",
        {
            "jobSummaryList": [
                {"jobId": "job-on-block", "jobName": "train-llm"},
                {"jobId": "job-copy", "jobName": "train-llm"},
            ]
        },
        {"jobQueue": QUEUE, "filters": [{"name": "JOB_NAME", "values": ["train-llm"]}]},
    )
    stubs["batch"].add_response(
        "describe_jobs",
        {"jobs": [job("job-copy", ON_BLOCK, tags={TAG_REQUEUED_FROM: "job-on-block"})]},
        {"jobs": ["job-copy"]},
    )
    assert later(clients, ledger, STOP_TIME + timedelta(minutes=2))["requeued"] == [
        {"job": "job-on-block", "new_job": "job-copy"}
    ]


def test_a_block_without_instances_touches_no_job(aws):
    clients, stubs, ledger = aws
    stubs["ec2"].add_response("describe_instances", {"Reservations": []}, None)  # nothing else is read
    assert drain(clients, ledger) == {
        "requeued": [],
        "finished": [],
        "waiting": [],
        "already_handled": [],
        "errors": [],
        "deferred": [],
    }


def test_a_job_due_without_time_left_is_not_touched_and_the_next_run_finishes_it(aws):
    clients, stubs, ledger = aws
    discovery(stubs)
    drain(clients, ledger)
    result = later(clients, ledger, STOP_TIME, time_left=lambda: JOB_SECONDS - 1)
    assert (result["requeued"], result["deferred"]) == ([], ["job-on-block"])
    assert [status for _, status, _ in ledger.actions("requeue#", ("claimed",))] == ["claimed"]
    expect_terminate(stubs)
    expect_copy(stubs)
    assert later(clients, ledger, STOP_TIME + timedelta(minutes=1))["requeued"] == [
        {"job": "job-on-block", "new_job": "job-copy"}
    ]


class Crash(BaseException):
    """The Lambda invocation dies (timeout, out of memory): nothing of the run goes on."""


class DiesAfterTerminate:
    """The batch client of a run killed right after Batch accepted its TerminateJob."""

    def __init__(self, batch):
        self.batch = batch

    def __getattr__(self, name):
        return getattr(self.batch, name)

    def terminate_job(self, **request):
        self.batch.terminate_job(**request)
        raise Crash("killed after TerminateJob")


@pytest.mark.parametrize("fault", ["throttled", "answer_lost", "crash"])
def test_a_failed_first_stop_run_leaves_a_second_before_the_instances_go(aws, fault):
    """Runs every 5 minutes from SIGNAL_LEAD: the first tells the jobs to checkpoint, the stops start
    STOP_LEAD before the end, and the first run there fails. The next run still stops and copies the
    job, once, before the instances terminate (30 minutes before the end, capacity-blocks-monitor.html).
    On main the one run between 35 and 30 minutes was the only chance."""
    clients, stubs, ledger = aws
    events = boto3.client("events", region_name="us-east-1")
    stubs["events"] = Stubber(events)
    stubs["events"].activate()
    stubs["events"].add_response(
        "put_events", {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}]}
    )  # once per block

    def run(now, batch=clients["batch"]):
        return drain_block(
            window="launch-load-test",
            compute_environment=CE,
            reservation_id=BLOCK,
            ends_at=ENDS,
            moved_to="on_demand",
            dry_run=False,
            ledger=ledger,
            ec2=clients["ec2"],
            ecs=clients["ecs"],
            batch=batch,
            submit=clients["batch"],
            events=events,
            now=now,
        )

    runs = [
        ENDS - SIGNAL_LEAD + timedelta(minutes=2) + timedelta(minutes=5) * i for i in range(4)
    ]  # 11:28 ... 10:57 - a 5-minute schedule
    assert runs[1] < ENDS - STOP_LEAD <= runs[2] < runs[3] < ENDS - TERMINATION_LEAD
    discovery(stubs)
    first = run(runs[0])
    assert (first["signalled_at"], first["requeue"]["waiting"]) == (
        runs[0].isoformat(),
        ["job-on-block"],
    )  # told, not stopped
    discovery(stubs)
    second = run(runs[1])
    assert (second["requeue"]["already_handled"], second["requeue"]["waiting"]) == (["job-on-block"], ["job-on-block"])
    discovery(stubs)
    stubs["batch"].add_response("describe_jobs", {"jobs": [RUNNING[0]]}, {"jobs": ["job-on-block"]})
    if fault == "throttled":  # Batch refused: the job runs on
        stubs["batch"].add_client_error(
            "terminate_job", service_error_code="TooManyRequestsException", http_status_code=429
        )
        assert run(runs[2])["requeue"]["errors"] == [
            {"job": "job-on-block", "error": "TooManyRequestsException", "retry": "next run"}
        ]
        discovery(stubs)
        expect_terminate(stubs)
    elif fault == "answer_lost":  # Batch stopped the job, the answer never came
        stubs["batch"].add_client_error("terminate_job", service_error_code="ServerException", http_status_code=500)
        assert run(runs[2])["requeue"]["errors"] == [
            {"job": "job-on-block", "error": "ServerException", "retry": "next run"}
        ]
        discovery(stubs, running=[])
        stubs["batch"].add_response("describe_jobs", {"jobs": [STOPPED]}, {"jobs": ["job-on-block"]})
    else:  # the run died right after Batch stopped the job
        stubs["batch"].add_response("terminate_job", {}, {"jobId": "job-on-block", "reason": REASON})
        with pytest.raises(Crash):
            run(runs[2], batch=DiesAfterTerminate(clients["batch"]))
        discovery(stubs, running=[])
        stubs["batch"].add_response("describe_jobs", {"jobs": [STOPPED]}, {"jobs": ["job-on-block"]})
    expect_copy(stubs)
    assert run(runs[3])["requeue"]["requeued"] == [{"job": "job-on-block", "new_job": "job-copy"}]
    [(_, _, details)] = ledger.actions("requeue#", ("requeued",))
    assert details["new_job"] == "job-copy" and details["stop_at"] == (ENDS - STOP_LEAD).isoformat()


def test_the_stop_never_comes_before_the_signal_and_never_after_the_last_run():
    assert stop_time(ENDS, ENDS - SIGNAL_LEAD) == ENDS - STOP_LEAD  # the scheduled signal: two runs to stop
    assert stop_time(ENDS, ENDS - timedelta(minutes=42)) == ENDS - timedelta(
        minutes=37
    )  # a late signal: still time to checkpoint
    assert stop_time(ENDS, ENDS - timedelta(minutes=40)) == ENDS - timedelta(
        minutes=35
    )  # the warning alone: one run left


def test_a_stopped_job_that_checkpoints_loses_nothing_one_that_does_not_all_it_did():
    """The usage report's work cut at a block's end (issue 40): recorded by the stop."""
    from gpu_governance_runtime.capacity.requeue import cut_hours
    from gpu_governance_runtime.contract import TAG_CHECKPOINTABLE

    started = {"startedAt": int((NOW - timedelta(hours=2, minutes=30)).timestamp() * 1000), "tags": {}}
    assert cut_hours(started, NOW) == 2.5
    assert cut_hours({**started, "tags": {TAG_CHECKPOINTABLE: "TRUE"}}, NOW) == 0.0  # told before it was stopped
    assert cut_hours({"tags": {}}, NOW) == 0.0  # never started: nothing done
