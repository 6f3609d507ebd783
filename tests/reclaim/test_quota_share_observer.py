"""The Batch quota-share observer reads each share's waiting work, and what it publishes makes the
synthesized "team starved" alarms fire for a starved share and stay quiet for an idle one, also
when a share's listing lags (duplicates across pages, the front job not listed yet) or is
throttled part-way.

Batch is botocore's Stubber (moto has no quota shares or service jobs): every request and every
canned response is validated against the Batch model, and the canned responses carry every
optional member of their shape. The alarm's rule (Threshold, ComparisonOperator,
EvaluationPeriods, DatapointsToAlarm, TreatMissingData) is read from the synthesized template."""

from __future__ import annotations

import json
import os

import boto3
import pytest
import yaml
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template
from botocore.config import Config
from botocore.stub import Stubber

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from constructs_lib.controllers.reclaim import ReclaimController, ReclaimTarget  # noqa: E402
from constructs_lib.model import GovernanceModel  # noqa: E402
from constructs_lib.model.loader import default_config_text  # noqa: E402
from constructs_lib.model.policy import compile_policy  # noqa: E402
from gpu_governance_runtime.backends.batch_quota_share.observer import DESCRIBED_PER_SHARE, BatchQuotaShareObserver  # noqa: E402
from gpu_governance_runtime.contract import ENV_METRICS_NAMESPACE, ENV_RECLAIM_TARGETS  # noqa: E402
from gpu_governance_runtime.planners.reclaim import Settings  # noqa: E402
from gpu_governance_runtime.policy import parse_policy  # noqa: E402
from gpu_governance_runtime.reclaim.handler import run_tick  # noqa: E402

MODEL = GovernanceModel.from_dict(yaml.safe_load(default_config_text()))
POOL = (
    "sagemaker-training"  # p5: research 2 (lend and borrow), training 4 (lend), production 2 (reserve); 8 in the pool
)
P5, G6E = "ml.p5.48xlarge", "ml.g6e.12xlarge"
QUEUE = "arn:aws:batch:us-east-1:111122223333:job-queue/sagemaker-training"
NOW = 1_800_000_000.0
TICK = 60.0


@pytest.fixture(scope="module")
def synthesized():
    app = App()
    stack = Stack(app, "Capacity", env=Environment(account="111122223333", region="us-east-1"))
    ReclaimController(stack, "ReclaimController", model=MODEL, targets=[ReclaimTarget(pool=POOL, job_queue_arn=QUEUE)])
    return Template.from_stack(stack)


@pytest.fixture(scope="module")
def environment(synthesized):
    (function,) = synthesized.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "gpu_governance_runtime.reclaim.handler.handler"}}
    ).values()
    return function["Properties"]["Environment"]["Variables"]


def starved_alarm(template: Template, share: str) -> dict:
    (alarm,) = [
        a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "StarvedBelowGuarantee"
        and {"Name": "Share", "Value": share} in a["Properties"]["Dimensions"]
        and {"Name": "Pool", "Value": POOL} in a["Properties"]["Dimensions"]
    ]
    return alarm


COMPARE = {
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "GreaterThanThreshold": lambda v, t: v > t,
    "LessThanThreshold": lambda v, t: v < t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
}


def alarm_states(alarm: dict, datapoints: list[float | None]) -> list[bool]:
    """CloudWatch's M-out-of-N rule, period by period: in ALARM when at least DatapointsToAlarm of
    the last EvaluationPeriods datapoints breach; a missing one counts as TreatMissingData says."""
    n = alarm["EvaluationPeriods"]
    m = alarm.get("DatapointsToAlarm", n)
    missing = alarm.get("TreatMissingData", "missing")
    assert missing in ("notBreaching", "breaching"), f"rule for TreatMissingData={missing} not modelled here"
    breach = [
        COMPARE[alarm["ComparisonOperator"]](v, alarm["Threshold"]) if v is not None else missing == "breaching"
        for v in datapoints
    ]
    return [sum(breach[max(0, i + 1 - n) : i + 1]) >= m and i + 1 >= n for i in range(len(breach))]


# --- full response shapes --------------------------------------------------------------------------


def arn(job_id: str) -> str:
    return f"arn:aws:batch:us-east-1:111122223333:service-job/{job_id}"


def snapshot(use: dict[str, dict[str, int]], fronts: dict[str, list[str]]) -> dict:
    top = [
        {"quotaShareName": s, "capacityUsage": [{"capacityUnit": t, "quantity": float(n)} for t, n in by.items()]}
        for s, by in use.items()
    ]
    total: dict[str, int] = {}
    for by in use.values():
        for t, n in by.items():
            total[t] = total.get(t, 0) + n
    return {
        "frontOfQueue": {
            "jobs": [
                {"jobArn": arn(j), "earliestTimeAtPosition": int(NOW * 1000) - 5000}
                for js in fronts.values()
                for j in js
            ],
            "lastUpdatedAt": int(NOW * 1000),
        },
        "frontOfQuotaShares": {
            "quotaShares": {
                s: [{"jobArn": arn(j), "earliestTimeAtPosition": int(NOW * 1000) - 5000} for j in js]
                for s, js in fronts.items()
            },
            "lastUpdatedAt": int(NOW * 1000),
        },
        "queueUtilization": {
            "totalCapacityUsage": [{"capacityUnit": t, "quantity": float(n)} for t, n in total.items()],
            "fairshareUtilization": {"activeShareCount": 0, "topCapacityUtilization": []},
            "quotaShareUtilization": {"topCapacityUtilization": top},
            "lastUpdatedAt": int(NOW * 1000),
        },
    }


def summary(job_id: str, share: str, instance_type: str, count: int) -> dict:
    return {
        "latestAttempt": {
            "serviceResourceId": {
                "name": "TrainingJobArn",
                "value": f"arn:aws:sagemaker:us-east-1:111122223333:training-job/{job_id}",
            }
        },
        "capacityUsage": [{"capacityUnit": instance_type, "quantity": float(count)}],
        "createdAt": int(NOW * 1000) - 600_000,
        "jobArn": arn(job_id),
        "jobId": job_id,
        "jobName": job_id,
        "scheduledAt": 0,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "shareIdentifier": share,
        "quotaShareName": share,
        "status": "RUNNABLE",
        "statusReason": "",
        "startedAt": 0,
        "stoppedAt": 0,
        "isTerminated": False,
    }


def described(job_id: str, share: str, instance_type: str, count: int) -> dict:
    """DescribeServiceJob of a job not dispatched yet: its size is in the request it carries."""
    payload = {
        "TrainingJobName": job_id,
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": count, "VolumeSizeInGB": 100},
    }
    attempt = {
        "serviceResourceId": {
            "name": "TrainingJobArn",
            "value": f"arn:aws:sagemaker:us-east-1:111122223333:training-job/{job_id}",
        }
    }
    return {
        "attempts": [{**attempt, "startedAt": 0, "stoppedAt": 0, "statusReason": ""}],
        "capacityUsage": [],
        "createdAt": int(NOW * 1000) - 60_000,
        "isTerminated": False,
        "jobArn": arn(job_id),
        "jobId": job_id,
        "jobName": job_id,
        "jobQueue": QUEUE,
        "latestAttempt": attempt,
        "retryStrategy": {"attempts": 1, "evaluateOnExit": [{"action": "RETRY", "onStatusReason": "*"}]},
        "scheduledAt": 0,
        "schedulingPriority": 50,
        "serviceRequestPayload": json.dumps(payload),
        "serviceJobType": "SAGEMAKER_TRAINING",
        "shareIdentifier": share,
        "quotaShareName": share,
        "preemptionConfiguration": {"preemptionRetriesBeforeTermination": 3},
        "preemptionSummary": {"preemptedAttemptCount": 0, "recentPreemptedAttempts": []},
        "startedAt": 0,
        "status": "RUNNABLE",
        "statusReason": "",
        "stoppedAt": 0,
        "tags": {"gpu-governance:team": share},
        "timeoutConfig": {"attemptDurationSeconds": 86400},
    }


def listing(stubber: Stubber, share: str, pages: list[list[dict]], *, throttle_after: int | None = None) -> None:
    for number, page in enumerate(pages):
        request = {
            "jobQueue": QUEUE,
            "jobStatus": "RUNNABLE",
            "filters": [{"name": "QUOTA_SHARE_NAME", "values": [share]}],
        }
        if number:
            request["nextToken"] = f"{share}-{number}"
        if throttle_after is not None and number == throttle_after:
            stubber.add_client_error(
                "list_service_jobs",
                service_error_code="TooManyRequestsException",
                http_status_code=429,
                expected_params=request,
            )
            return
        response = {"jobSummaryList": page}
        if number + 1 < len(pages):
            response["nextToken"] = f"{share}-{number + 1}"
        stubber.add_response("list_service_jobs", response, request)


def empty_listings(stubber: Stubber, *shares: str) -> None:
    for share in shares:
        listing(stubber, share, [[]])


def tick(environment: dict, queue_reads) -> dict[str, dict]:
    """One controller tick over the stubbed queue, with the namespace and pool the synthesized
    function is given; the metric records by share."""
    (target,) = json.loads(environment[ENV_RECLAIM_TARGETS])
    client = boto3.client("batch", config=Config(retries={"max_attempts": 1}))
    stubber = Stubber(client)
    queue_reads(stubber)
    records: list[dict] = []
    adapter = BatchQuotaShareObserver(
        client, job_queue=QUEUE, pool=parse_policy(compile_policy(MODEL)).pool(target["pool"])
    )
    with stubber:
        # an observer never acts, so it never touches the ledger
        run_tick(
            target["pool"],
            adapter,
            None,
            settings=Settings(),
            dry_run=False,
            namespace=environment[ENV_METRICS_NAMESPACE],
            now=NOW,
            emit=records.append,
        )
        stubber.assert_no_pending_responses()
    metrics = [r for r in records if "_aws" in r]
    assert {m["_aws"]["CloudWatchMetrics"][0]["Namespace"] for m in metrics} == {environment[ENV_METRICS_NAMESPACE]}
    by_share: dict[str, dict] = {}
    for m in metrics:  # the share metrics and the usage metrics are separate documents
        by_share.setdefault(m["Share"], {}).update(m)
    return by_share


# training borrows the whole pool's p5; research waits for 2 p5 inside its guarantee (starved);
# production waits for nothing (idle).
FULL = {"training": {P5: 8}}


def starved_queue(stubber: Stubber) -> None:
    stubber.add_response("get_job_queue_snapshot", snapshot(FULL, {"research": ["r-1"]}), {"jobQueue": QUEUE})
    empty_listings(stubber, "production")
    listing(stubber, "research", [[summary("r-1", "research", P5, 2)]])
    empty_listings(stubber, "training")


def test_a_starved_share_alarms_and_an_idle_one_does_not(synthesized, environment):
    metrics = [tick(environment, starved_queue) for _ in range(4)]
    research, production = starved_alarm(synthesized, "research"), starved_alarm(synthesized, "production")
    assert [m["research"]["Pending"] for m in metrics] == [2] * 4
    assert [m["research"]["StarvedBelowGuarantee"] for m in metrics] == [1] * 4
    fired = alarm_states(research, [m["research"]["StarvedBelowGuarantee"] for m in metrics])
    # fires once EvaluationPeriods ticks in a row were starved, not before
    assert fired == [i + 1 >= research["EvaluationPeriods"] for i in range(4)] and fired[-1]
    assert not any(alarm_states(production, [m["production"]["StarvedBelowGuarantee"] for m in metrics]))
    assert metrics[-1]["training"]["Borrowed"] == 4


def test_waiting_above_the_guarantee_is_not_starvation(environment):
    def queue(stubber):  # research already runs its 2 p5 and waits to borrow 2 more
        stubber.add_response(
            "get_job_queue_snapshot",
            snapshot({"research": {P5: 2}, "training": {P5: 6}}, {"research": ["r-2"]}),
            {"jobQueue": QUEUE},
        )
        empty_listings(stubber, "production")
        listing(stubber, "research", [[summary("r-2", "research", P5, 2)]])
        empty_listings(stubber, "training")

    research = tick(environment, queue)["research"]
    assert (research["Pending"], research["StarvedBelowGuarantee"]) == (2, 0)


def test_a_job_listed_on_two_pages_counts_once(environment):
    def queue(stubber):  # newest first: r-new arrived while paging and pushed r-1 onto page 2 as well
        stubber.add_response("get_job_queue_snapshot", snapshot(FULL, {"research": ["r-1"]}), {"jobQueue": QUEUE})
        empty_listings(stubber, "production")
        listing(
            stubber,
            "research",
            [
                [summary("r-new", "research", G6E, 1), summary("r-1", "research", P5, 2)],
                [summary("r-1", "research", P5, 2), summary("r-old", "research", P5, 1)],
            ],
        )
        empty_listings(stubber, "training")

    research = tick(environment, queue)["research"]
    assert (research["Pending"], research["StarvedBelowGuarantee"]) == (2 + 1 + 1, 1)


def test_a_front_job_not_listed_yet_is_described_and_counted(environment):
    def queue(stubber):  # the snapshot already has r-1 at the front; the listing does not show it yet
        stubber.add_response("get_job_queue_snapshot", snapshot(FULL, {"research": ["r-1"]}), {"jobQueue": QUEUE})
        empty_listings(stubber, "production", "research")
        stubber.add_response("describe_service_job", described("r-1", "research", P5, 2), {"jobId": "r-1"})
        empty_listings(stubber, "training")

    research = tick(environment, queue)["research"]
    assert (research["Pending"], research["StarvedBelowGuarantee"]) == (2, 1)


def test_a_throttled_listing_keeps_the_alarm_firing(synthesized, environment):
    def throttled(stubber):  # page 1 read, page 2 throttled past the retries; r-1 (the front) is on page 2
        stubber.add_response("get_job_queue_snapshot", snapshot(FULL, {"research": ["r-1"]}), {"jobQueue": QUEUE})
        empty_listings(stubber, "production")
        listing(stubber, "research", [[summary("r-9", "research", G6E, 9)], []], throttle_after=1)
        stubber.add_response("describe_service_job", described("r-1", "research", P5, 2), {"jobId": "r-1"})
        empty_listings(stubber, "training")

    ticks = [tick(environment, starved_queue), tick(environment, throttled), tick(environment, starved_queue)]
    assert ticks[1]["research"]["Pending"] == 9 + 2  # what was read, plus the front job
    alarm = starved_alarm(synthesized, "research")
    assert alarm_states(alarm, [t["research"]["StarvedBelowGuarantee"] for t in ticks])[alarm["EvaluationPeriods"] - 1]


def test_listed_jobs_without_a_size_are_described_a_few_per_tick(environment):
    unsized = [
        {**summary(f"r-{i}", "research", P5, 1), "capacityUsage": [], "createdAt": int(NOW * 1000) - 600_000 + i}
        for i in range(DESCRIBED_PER_SHARE + 2)
    ]

    def queue(stubber):
        stubber.add_response("get_job_queue_snapshot", snapshot(FULL, {"research": ["r-5"]}), {"jobQueue": QUEUE})
        empty_listings(stubber, "production")
        listing(stubber, "research", [list(reversed(unsized))])  # newest first
        # the front job first, then the oldest, up to the bound
        for job_id in ["r-5", *(f"r-{i}" for i in range(DESCRIBED_PER_SHARE + 2) if i != 5)][:DESCRIBED_PER_SHARE]:
            stubber.add_response("describe_service_job", described(job_id, "research", P5, 1), {"jobId": job_id})
        empty_listings(stubber, "training")

    research = tick(environment, queue)["research"]
    assert (research["Pending"], research["StarvedBelowGuarantee"]) == (DESCRIBED_PER_SHARE, 1)


def test_other_listing_errors_fail_the_pool(environment):
    def denied(stubber):
        stubber.add_response("get_job_queue_snapshot", snapshot(FULL, {}), {"jobQueue": QUEUE})
        stubber.add_client_error("list_service_jobs", service_error_code="AccessDeniedException", http_status_code=403)

    with pytest.raises(Exception, match="AccessDenied"):
        tick(environment, denied)


def test_the_controller_may_list_and_describe_service_jobs(synthesized):
    actions = {
        a
        for p in synthesized.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert {"batch:GetJobQueueSnapshot", "batch:ListServiceJobs", "batch:DescribeServiceJob"} <= actions


@pytest.mark.parametrize(
    "stopping, timeout, declared",
    [
        (None, 86_400, 86_400),  # the Batch attempt timeout
        (7_200, 86_400, 7_200),  # the training job stops sooner by itself
        (7_200, None, 7_200),
        (None, None, None),  # neither: no declared run time
    ],
)
def test_a_described_job_declares_its_run_time(stopping, timeout, declared):
    job = described("r-1", "research", P5, 2)
    if stopping is not None:
        payload = json.loads(job["serviceRequestPayload"])
        job["serviceRequestPayload"] = json.dumps({**payload, "StoppingCondition": {"MaxRuntimeInSeconds": stopping}})
    if timeout is None:
        del job["timeoutConfig"]
    client = boto3.client("batch", config=Config(retries={"max_attempts": 1}))
    stubber = Stubber(client)  # the response is checked against DescribeServiceJob's real shape
    stubber.add_response("get_job_queue_snapshot", snapshot(FULL, {"research": ["r-1"]}), {"jobQueue": QUEUE})
    empty_listings(stubber, "production", "research")
    stubber.add_response("describe_service_job", job, {"jobId": "r-1"})
    empty_listings(stubber, "training")
    with stubber:
        state = BatchQuotaShareObserver(
            client, job_queue=QUEUE, pool=parse_policy(compile_policy(MODEL)).pool(POOL)
        ).read(NOW)
    assert {j.job_id: j.max_run_time_s for j in state.pending} == {"r-1": declared}


def preempted(job_id: str, share: str, instance_type: str, count: int, stopped: list[float]) -> tuple[dict, dict]:
    """A job Batch preempted and requeued: listed RUNNABLE with the start of its earlier attempt, and
    described with its ``preemptionSummary`` (every optional member, as DescribeServiceJob gives it)."""
    listed = {**summary(job_id, share, instance_type, count), "startedAt": int(NOW * 1000) - 7_200_000}
    attempts = [
        {
            "serviceResourceId": {
                "name": "TrainingJobArn",
                "value": f"arn:aws:sagemaker:us-east-1:111122223333:training-job/{job_id}-{n}",
            },
            "startedAt": int(NOW * 1000) - 7_200_000,
            "stoppedAt": int(at * 1000),
            "statusReason": "Preempted to restore quota share capacity",
        }
        for n, at in enumerate(stopped)
    ]
    job = {
        **described(job_id, share, instance_type, count),
        "startedAt": int(NOW * 1000) - 7_200_000,
        "preemptionSummary": {"preemptedAttemptCount": len(stopped), "recentPreemptedAttempts": attempts},
    }
    return listed, job


def test_preemptions_batch_made_during_the_tick_are_read_from_the_service_jobs(environment):
    # training borrowed; Batch reclaimed two of its jobs for research within this tick, and one of
    # them had also been preempted an hour ago (counted then, not again now)
    t1, t1_job = preempted("t-1", "training", P5, 2, [NOW - 3_600, NOW - 20])
    t2, t2_job = preempted("t-2", "training", P5, 2, [NOW - 5])

    def queue(stubber):
        stubber.add_response(
            "get_job_queue_snapshot",
            snapshot({"research": {P5: 2}, "training": {P5: 4}}, {"training": ["t-1"]}),
            {"jobQueue": QUEUE},
        )
        empty_listings(stubber, "production", "research")
        listing(stubber, "training", [[t1, t2]])
        stubber.add_response("describe_service_job", t1_job, {"jobId": "t-1"})
        stubber.add_response("describe_service_job", t2_job, {"jobId": "t-2"})

    metrics = tick(environment, queue)
    assert (metrics["training"]["Preemptions"], metrics["research"]["Preemptions"]) == (2, 0)
    assert metrics["training"]["Pending"] == 4  # the described jobs are still counted as waiting


def test_a_job_that_never_ran_is_not_described_for_preemptions(environment):
    metrics = tick(
        environment, starved_queue
    )  # r-1 never started: no DescribeServiceJob (the Stubber would refuse one)
    assert metrics["research"]["Preemptions"] == 0
