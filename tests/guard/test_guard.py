"""The submission guard (gpu_governance_runtime.guard): a Batch service job whose SageMaker payload
names another team's tags, training plan or execution role, or an image outside the team's
repositories, is recorded, stopped (unless dry run) and reported to the platform and the team's
owner, once however often its events come. Stubber for Batch and SageMaker (moto implements
neither service jobs nor training plan tags, and Stubber checks every parameter against the real
service model); moto for DynamoDB and SNS."""

from __future__ import annotations

import json
import os

import boto3
import pytest
from botocore.config import Config
from botocore.stub import ANY, Stubber

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the handler builds its clients on import

from gpu_governance_runtime import contract  # noqa: E402
from gpu_governance_runtime.guard import handler as guard_handler  # noqa: E402
from gpu_governance_runtime.guard.checks import TeamRules, violations  # noqa: E402
from gpu_governance_runtime.reclaim.ledger import Ledger  # noqa: E402

from ..reclaim.tables import reclaim_ledger_table  # noqa: E402

ACCOUNT, REGION = "111122223333", "us-east-1"
QUEUE = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/sagemaker-training"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
SHARED = f"{REGISTRY}/acme-ml/base"


def role(team):
    return f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/{team}-gpu-training"


def plan(name):
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{name}"


QUEUES = {
    QUEUE: {
        "pool": "sagemaker-training",
        "shared_repositories": [SHARED],
        "teams": {
            team: {"execution_role_arn": role(team), "repository": f"{REGISTRY}/acme-ml/{team}", "cost_centre": cc}
            for team, cc in (("research", "cc-research"), ("training", "cc-training"))
        },
    }
}
PLATFORM = f"arn:aws:sns:{REGION}:{ACCOUNT}:platform"


def payload(team="research", **changes):
    """A CreateTrainingJob request as the SageMaker SDK's TrainingQueue sends it, every optional field a team may set."""
    request = {
        "TrainingJobName": f"{team}-llama-ft",
        "RoleArn": role(team),
        "AlgorithmSpecification": {"TrainingImage": f"{REGISTRY}/acme-ml/{team}:1.4", "TrainingInputMode": "File"},
        "ResourceConfig": {
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": 2,
            "VolumeSizeInGB": 500,
            "TrainingPlanArn": plan(f"{team}-plan"),
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://acme-ml-{team}/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "Tags": [
            {"Key": contract.TAG_TEAM, "Value": team},
            {"Key": contract.TAG_COST_CENTRE, "Value": f"cc-{team}"},
            {"Key": "experiment", "Value": "7"},
        ],
    }
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        target = request
        for part in parents:
            target = target[part]
        if value is None:
            target.pop(leaf)
        else:
            target[leaf] = value
    return request


def described(job_id="sj-1", team="research", status="RUNNABLE", share=None, request=None, **extra):
    """A DescribeServiceJob response with every field Batch fills in."""
    return {
        "attempts": [],
        "createdAt": 1764576000000,
        "isTerminated": False,
        "jobArn": f"arn:aws:batch:{REGION}:{ACCOUNT}:service-job/{job_id}",
        "jobId": job_id,
        "jobName": f"{team}-llama-ft",
        "jobQueue": QUEUE,
        "retryStrategy": {"attempts": 1},
        "schedulingPriority": 50,
        "serviceRequestPayload": json.dumps(request if request is not None else payload(team)),
        "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": share or team,
        "status": status,
        "startedAt": 1764576000000,  # required by the API model even before it starts
        "tags": {contract.TAG_TEAM: team, contract.TAG_COST_CENTRE: f"cc-{team}"},
        **extra,
    }


def event(job_id="sj-1", status="RUNNABLE", queue=QUEUE):
    """As https://docs.aws.amazon.com/batch/latest/userguide/service-job-events.html shows it: no tags, no payload."""
    return {
        "version": "0",
        "id": f"ev-{job_id}-{status}",
        "detail-type": "Batch Service Job State Change",
        "source": "aws.batch",
        "account": ACCOUNT,
        "time": "2026-12-01T09:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:batch:{REGION}:{ACCOUNT}:service-job/{job_id}"],
        "detail": {
            "jobArn": f"arn:aws:batch:{REGION}:{ACCOUNT}:service-job/{job_id}",
            "jobId": job_id,
            "jobName": "x",
            "jobQueue": queue,
            "serviceJobType": "SAGEMAKER_TRAINING",
            "status": status,
            "createdAt": 1764576000000,
            "attempts": [],
        },
    }


@pytest.fixture
def aws():
    with reclaim_ledger_table() as table:
        sns = boto3.client("sns", region_name=REGION)
        topics = {name: sns.create_topic(Name=name)["TopicArn"] for name in ("platform", "research-owner")}
        sqs = boto3.client("sqs", region_name=REGION)
        inbox = {}
        for name, topic in topics.items():  # an SQS queue per topic: what was published
            url = sqs.create_queue(QueueName=f"{name}-inbox")["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
            inbox[name] = url
        clients = {
            name: boto3.client(name, region_name=REGION, config=Config(retries={"max_attempts": 0}))
            for name in ("batch", "sagemaker")
        }
        stubs = {name: Stubber(client) for name, client in clients.items()}
        for stub in stubs.values():
            stub.activate()
        queues = {QUEUE: {**QUEUES[QUEUE], "team_topics": {"research": topics["research-owner"]}}}

        def run(evt, dry_run=False):
            return guard_handler.guard(
                evt,
                queues=queues,
                ledger=Ledger(table),
                dry_run=dry_run,
                platform_topic=topics["platform"],
                batch=clients["batch"],
                sagemaker=clients["sagemaker"],
                sns=sns,
                now=1764576000.0,
            )

        def received(name):
            messages = sqs.receive_message(QueueUrl=inbox[name], MaxNumberOfMessages=10).get("Messages", [])
            return [json.loads(m["Body"]) for m in messages]

        yield run, stubs, table, received
        for stub in stubs.values():
            stub.assert_no_pending_responses()


def plan_tagged(stubs, arn, team):
    stubs["sagemaker"].add_response(
        "list_tags",
        {
            "Tags": [
                {"Key": contract.TAG_TEAM, "Value": team},
                {"Key": contract.TAG_MANAGED_BY, "Value": "acme-ml-capacity"},
            ]
        },
        {"ResourceArn": arn},
    )


def test_a_payload_within_the_teams_own_things_is_admitted_and_nothing_is_stopped(aws):
    run, stubs, table, received = aws
    stubs["batch"].add_response("describe_service_job", described(), {"jobId": "sj-1"})
    plan_tagged(stubs, plan("research-plan"), "research")
    result = run(event())
    assert result["event"] == "guard_admitted" and result["team"] == "research"
    assert table.scan()["Items"] == [] and received("platform") == []


@pytest.mark.parametrize(
    "change, found",
    [
        # finding 2: the training job's own tags move the spend into another team's budget and TeamSpendUsd
        (
            {"Tags": [{"Key": contract.TAG_TEAM, "Value": "training"}]},
            "Tags.gpu-governance:team: 'training' - the team's own 'research'",
        ),
        (
            {"Tags": [{"Key": contract.TAG_COST_CENTRE, "Value": "cc-training"}]},
            "Tags.gpu-governance:cost-centre: 'cc-training' - the team's own 'cc-research'",
        ),
        # finding 3: another team's training plan (its ARN is visible through DescribeServiceJob)
        (
            {"ResourceConfig.TrainingPlanArn": plan("training-plan")},
            "ResourceConfig.TrainingPlanArn: '"
            + plan("training-plan")
            + "' - a training plan bought for team research (its gpu-governance:team tag: 'training')",
        ),
        (
            {"RoleArn": role("training")},
            "RoleArn: '" + role("training") + "' - the team's execution role " + role("research"),
        ),
        (
            {"AlgorithmSpecification.TrainingImage": f"{REGISTRY}/acme-ml/training:2"},
            "AlgorithmSpecification.TrainingImage",
        ),
        (
            {"AlgorithmSpecification.TrainingImage": f"{REGISTRY}/acme-ml/research-evil:1"},
            "AlgorithmSpecification.TrainingImage",
        ),  # a look-alike repository
        ({"AlgorithmSpecification.TrainingImage": None}, "AlgorithmSpecification.TrainingImage: None"),
    ],
)
def test_each_thing_iam_cannot_see_in_the_payload_stops_the_job(aws, change, found):
    run, stubs, table, received = aws
    request = payload(**{k: v for k, v in change.items() if k != "Tags"})
    if "Tags" in change:
        request["Tags"] = change["Tags"]
    stubs["batch"].add_response("describe_service_job", described(request=request), {"jobId": "sj-1"})
    arn = request["ResourceConfig"].get("TrainingPlanArn")
    plan_tagged(stubs, arn, arn.rsplit("/", 1)[1].removesuffix("-plan"))
    stubs["batch"].add_response("terminate_service_job", {}, {"jobId": "sj-1", "reason": ANY})
    result = run(event())
    assert result["outcome"] == "done" and any(v.startswith(found) for v in result["violations"]), result["violations"]
    (item,) = table.scan()["Items"]
    assert item["status"] == "done" and item["reason"].startswith(
        "team research submitted research-llama-ft (sj-1) into share research: "
    )
    (platform,) = received("platform")
    (owner,) = received("research-owner")
    assert (
        platform == owner
        and platform["job_id"] == "sj-1"
        and platform["outcome"] == "done"
        and platform["violations"] == result["violations"]
    )


def test_a_plan_that_cannot_be_read_is_no_teams(aws):
    run, stubs, _, _ = aws
    request = payload(
        **{"ResourceConfig.TrainingPlanArn": f"arn:aws:sagemaker:{REGION}:999988887777:training-plan/theirs"}
    )
    stubs["batch"].add_response("describe_service_job", described(request=request), {"jobId": "sj-1"})
    stubs["sagemaker"].add_client_error("list_tags", "AccessDeniedException", http_status_code=400)
    stubs["batch"].add_response("terminate_service_job", {}, {"jobId": "sj-1", "reason": ANY})
    assert "its gpu-governance:team tag: None" in run(event())["violations"][0]


def test_dry_run_records_and_alerts_once_and_stops_nothing(aws):
    run, stubs, table, received = aws
    results = []
    for status in ("RUNNABLE", "STARTING"):  # two state changes, one decision
        stubs["batch"].add_response(
            "describe_service_job",
            described(request=payload(RoleArn=role("training")), status=status),
            {"jobId": "sj-1"},
        )
        plan_tagged(stubs, plan("research-plan"), "research")
        results.append(run(event(status=status), dry_run=True))
    assert results[0]["outcome"] == "planned" and results[1]["event"] == "guard_already_handled"
    (item,) = table.scan()["Items"]
    assert item["status"] == "planned"
    assert len(received("platform")) == 1 and received("research-owner")[0]["outcome"] == "planned"


def test_a_terminate_that_fails_is_retried_by_the_jobs_next_event(aws):
    run, stubs, table, received = aws
    outcomes = []
    for status, terminated in (("RUNNABLE", False), ("STARTING", True)):
        stubs["batch"].add_response(
            "describe_service_job",
            described(request=payload(RoleArn=role("training")), status=status),
            {"jobId": "sj-1"},
        )
        plan_tagged(stubs, plan("research-plan"), "research")
        if terminated:
            stubs["batch"].add_response("terminate_service_job", {}, {"jobId": "sj-1", "reason": ANY})
        else:  # throttled: recorded failed, claimed again by the next event
            stubs["batch"].add_client_error("terminate_service_job", "TooManyRequestsException", http_status_code=429)
        outcomes.append(run(event(status=status))["outcome"])
    assert outcomes == ["failed", "done"]
    assert table.scan()["Items"][0]["status"] == "done"
    assert [m["outcome"] for m in received("platform")] == ["failed", "done"]


@pytest.mark.parametrize(
    "evt",
    [
        event(queue=f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/platform-jobs"),  # not a governed queue
        event(status="SUCCEEDED"),
        {**event(), "detail": "not an object"},
        {**event(), "detail-type": "Batch Job State Change"},
    ],
)
def test_other_events_are_ignored_without_a_call(aws, evt):
    run, _, table, _ = aws
    assert run(evt)["event"] == "guard_ignored" and table.scan()["Items"] == []


def test_a_job_already_terminated_is_left_alone_and_a_failed_read_is_logged_not_raised(aws):
    run, stubs, table, _ = aws
    stubs["batch"].add_response("describe_service_job", described(isTerminated=True), {"jobId": "sj-1"})
    assert run(event())["event"] == "guard_ignored"
    stubs["batch"].add_client_error("describe_service_job", "ClientException", http_status_code=400)
    assert run(event())["event"] == "guard_failed" and table.scan()["Items"] == []


def test_a_submission_tagged_for_a_team_outside_the_queue_or_in_anothers_share_is_a_violation():
    teams = {
        "research": TeamRules(
            execution_role_arn=role("research"), repositories=(f"{REGISTRY}/acme-ml/research",), cost_centre=None
        )
    }
    team, found = violations(described(team="intruder"), teams, lambda arn: None)
    assert (team, found) == ("intruder", ["tags.gpu-governance:team: 'intruder' - a team of this queue (research)"])
    request = payload(**{"ResourceConfig.TrainingPlanArn": None})
    request["Tags"] = [{"Key": contract.TAG_COST_CENTRE, "Value": "anything"}]
    _, found = violations(described(share="training", request=request), teams, lambda arn: None)
    assert found == [
        "quotaShareName: 'training' - the team's own share 'research'",
        "Tags.gpu-governance:cost-centre: 'anything' - none: the team declares no cost centre",
    ]
    _, found = violations({**described(), "serviceRequestPayload": "{not json"}, teams, lambda arn: None)
    assert found[-1].startswith("serviceRequestPayload: '{not json' - a CreateTrainingJob request")


def test_a_job_flagged_in_dry_run_is_stopped_once_the_guard_acts(aws):
    """Switching guard_mode to act: the dry run's "planned" record must not keep the job running."""
    run, stubs, table, received = aws
    for status, dry_run in (("RUNNABLE", True), ("STARTING", False), ("RUNNING", False)):
        stubs["batch"].add_response(
            "describe_service_job",
            described(request=payload(RoleArn=role("training")), status=status),
            {"jobId": "sj-1"},
        )
        plan_tagged(stubs, plan("research-plan"), "research")
        if status == "STARTING":
            stubs["batch"].add_response("terminate_service_job", {}, {"jobId": "sj-1", "reason": ANY})
        run(event(status=status), dry_run=dry_run)
    assert sorted(item["status"] for item in table.scan()["Items"]) == ["done", "planned"]
    assert [m["outcome"] for m in received("platform")] == ["planned", "done"]  # the repeated event stops nothing twice


def test_the_queues_are_expanded_from_the_environment_and_the_bundled_teams():
    """What the construct writes (environment: ARNs with {team}; package: the teams), as the handler reads it."""
    names = {
        "execution_role_arn": f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/{{team}}-gpu-training",
        "registry": REGISTRY,
        "team_topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:acme-ml-gpu-guard-{{team}}",
    }
    document = {
        "shared_repositories": [SHARED],
        "pools": {
            "sagemaker-training": {
                "teams": {
                    "research": {"repository_name": "acme-ml/research", "cost_centre": "cc-research", "owner": True},
                    "training": {"repository_name": "acme-ml/training", "cost_centre": "cc-training", "owner": False},
                }
            }
        },
    }
    expanded = guard_handler.queues_from([{"job_queue": QUEUE, "pool": "sagemaker-training"}], names, document)
    assert expanded == {
        QUEUE: {
            **QUEUES[QUEUE],
            "job_queue": QUEUE,
            "team_topics": {"research": f"arn:aws:sns:{REGION}:{ACCOUNT}:acme-ml-gpu-guard-research"},
        }
    }
