"""The submission guard (gpu_governance_runtime.guard): a Batch service job whose SageMaker payload
reaches outside its team's own things (another team's tags, training plan, execution role or
image; a key only the platform writes; capacity no quota share counts; a member the guard does not
classify; a key named twice) is recorded, stopped (unless dry run) and reported to the platform and
the team's owner, once however often its events come; what the guard cannot read is retried, never
decided (docs/security.md, "Beyond IAM").

Stubber for Batch and SageMaker (moto implements neither service jobs nor training plan tags, and
Stubber checks every parameter against the real service model); moto for DynamoDB, SNS and SQS;
botocore's own retry handler, fed throttling answers below the HTTP layer, for the retries."""

from __future__ import annotations

import json
import os

import boto3
import botocore.endpoint
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.stub import ANY, Stubber
from moto.core.models import botocore_stubber

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the handler builds its clients on import

from gpu_governance_runtime import contract  # noqa: E402
from gpu_governance_runtime.common.action_ledger import Ledger  # noqa: E402
from gpu_governance_runtime.common.clients import WITHIN_A_TICK  # noqa: E402
from gpu_governance_runtime.guard import handler as guard_handler  # noqa: E402
from gpu_governance_runtime.guard.checks import TeamRules, Unread, violations  # noqa: E402
from gpu_governance_runtime.guard.members import MEMBERS, REFUSED  # noqa: E402

from ..capacity.shape_examples import example, problems  # noqa: E402
from ..reclaim.tables import reclaim_ledger_table  # noqa: E402
from .request_shape import OPERATION, paths, sagemaker  # noqa: E402

ACCOUNT, REGION = "111122223333", "us-east-1"
QUEUE = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/sagemaker-training"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
SHARED = f"{REGISTRY}/acme-ml/base"
REQUEST_SHAPE = sagemaker().operation_model(OPERATION)


def role(team):
    return f"arn:aws:iam::{ACCOUNT}:role/gpu-governance/{team}-gpu-training"


def plan(name):
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{name}"


def training_job(name="AWSBatchresearch-llama-ft1a2b"):
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}"


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
    """A CreateTrainingJob request as the boto3 path sends it (the SageMaker SDK sends the same without Tags)."""
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
        set_path(request, path, value)
    return request


def set_path(request, path, value):
    """Set ``A.B[].C`` (None: remove it); ``[]`` is the first item of a list, made when missing."""
    *parents, leaf = path.split(".")
    target = request
    for part in parents:
        if part.endswith("[]"):
            items = target.setdefault(part[:-2], [{}])
            target = items[0]
        else:
            target = target.setdefault(part, {})
    if value is None:
        target.pop(leaf, None)
    else:
        target[leaf] = value


def described(job_id="sj-1", team="research", status="RUNNABLE", share=None, request=None, text=None, **extra):
    """A DescribeServiceJob response with every field Batch fills in (attempts: the training jobs made so far)."""
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
        "serviceRequestPayload": text
        if text is not None
        else json.dumps(request if request is not None else payload(team)),
        "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": share or team,
        "status": status,
        "startedAt": 1764576000000,  # required by the API model even before it starts
        "tags": {contract.TAG_TEAM: team, contract.TAG_COST_CENTRE: f"cc-{team}"},
        **extra,
    }


def attempt(arn):
    return {"serviceResourceId": {"name": "TrainingJobArn", "value": arn}, "startedAt": 1764576100000}


def event(job_id="sj-1", status="RUNNABLE", queue=QUEUE, attempts=()):
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
            "attempts": [attempt(arn) for arn in attempts],
        },
    }


class AWS:
    """What a test of the guard holds: run an event, the stubs, the ledger, what each topic received."""

    def __init__(self, table, stubs, clients, sns, sqs, inbox, topics):
        self.table, self.stubs, self.clients, self.sns, self.sqs, self.inbox, self.topics = (
            table,
            stubs,
            clients,
            sns,
            sqs,
            inbox,
            topics,
        )
        self.queues = {QUEUE: {**QUEUES[QUEUE], "team_topics": {"research": topics["research-owner"]}}}

    def run(self, evt, dry_run=False, batch=None):
        return guard_handler.guard(
            evt,
            queues=self.queues,
            ledger=Ledger(self.table),
            dry_run=dry_run,
            platform_topic=self.topics["platform"],
            batch=batch or self.clients["batch"],
            sagemaker=self.clients["sagemaker"],
            sns=self.sns,
            now=1764576000.0,
        )

    def received(self, name):
        messages = self.sqs.receive_message(QueueUrl=self.inbox[name], MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(m["Body"]) for m in messages]

    def items(self, action=None):
        return [i for i in self.table.scan()["Items"] if action is None or i["action"] == action]

    def describe(self, job=None, **fields):
        self.stubs["batch"].add_response("describe_service_job", job or described(**fields), {"jobId": "sj-1"})

    def plan_tagged(self, arn, team):
        self.tags(arn, {contract.TAG_TEAM: team, contract.TAG_MANAGED_BY: "acme-ml-capacity"})

    def tags(self, arn, tags):
        self.stubs["sagemaker"].add_response(
            "list_tags", {"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}, {"ResourceArn": arn}
        )

    def terminate(self):
        self.stubs["batch"].add_response("terminate_service_job", {}, {"jobId": "sj-1", "reason": ANY})


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
        yield AWS(table, stubs, clients, sns, sqs, inbox, topics)
        for stub in stubs.values():
            stub.assert_no_pending_responses()


# --- what passes ------------------------------------------------------------------------------


def test_a_payload_within_the_teams_own_things_is_admitted_and_nothing_is_stopped(aws):
    aws.describe()
    aws.plan_tagged(plan("research-plan"), "research")
    result = aws.run(event())
    assert result["event"] == "guard_admitted" and result["team"] == "research"
    (item,) = aws.items()
    assert (item["action"], item["team"], item["training_jobs"]) == ("guard-admitted", "research", [])
    assert aws.received("platform") == []


def legitimate_request(team="research"):
    """Every member SageMaker accepts, filled as botocore's fullest example fills it, with the checked
    ones the team's own and the refused ones left out (or at the value that starts nothing): a
    payload the guard must admit whole. Instance preferences are refused (not counted): the
    TrainingPlanArns inside them are tested on their own below."""
    request = example(REQUEST_SHAPE.input_shape)
    for path, member in MEMBERS.items():
        if member.verdict == REFUSED:
            set_path(request, path, member.unless[0] if member.unless else None)
    request["ResourceConfig"].pop("InstancePreferences")
    own = payload(team)
    for path in ("RoleArn", "AlgorithmSpecification.TrainingImage", "ResourceConfig.TrainingPlanArn", "Tags"):
        head, *rest = path.split(".")
        set_path(request, path, own[head] if not rest else own[head][rest[0]])
    request["ExperimentConfig"].update(ExperimentName=f"{team}-llm", TrialName=f"{team}-trial-7")
    return request


def test_a_payload_naming_every_allowed_member_is_admitted():
    request = legitimate_request()
    assert problems(request, REQUEST_SHAPE.input_shape) == ""  # a request SageMaker's model accepts
    team, found = violations(
        described(request=request),
        {"research": _rules("research")},
        plan_owner=lambda arn: "research",
        training_job_tags=None,
    )
    assert (team, found) == ("research", [])


def _rules(team, cost_centre="cc-research"):
    return TeamRules(
        execution_role_arn=role(team), repositories=(f"{REGISTRY}/acme-ml/{team}", SHARED), cost_centre=cost_centre
    )


def _found(request=None, *, text=None, tags=None, team="research", cost_centre="cc-research", plans=None):
    job = described(request=request, text=text, team=team)
    if tags is not None:
        job["attempts"] = [attempt(training_job())]
    return violations(
        job,
        {team: _rules(team, cost_centre)},
        plan_owner=lambda arn: (plans or {}).get(arn, "research"),
        training_job_tags=None if tags is None else (lambda arn: tags),
    )[1]


# --- each way a payload reaches outside the team: stopped, recorded, reported -------------------


@pytest.mark.parametrize(
    "change, found",
    [
        # finding 2 of issue 25: the training job's own tags move the spend into another team's budget and TeamSpendUsd
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
        # issue 38 row 5: a key only the platform writes moves the spend to the purchases budget or another pool
        (
            {"Tags": [{"Key": contract.TAG_POOL, "Value": "ec2-gpu"}]},
            "Tags.gpu-governance:pool: 'ec2-gpu' - none: gpu-governance:pool is a key only the platform writes",
        ),
        # issue 38 lead: the rule jobs of a Debugger rule run on an instance nothing counts
        (
            {
                "DebugRuleConfigurations": [
                    {"RuleConfigurationName": "r", "RuleEvaluatorImage": "i", "InstanceType": "ml.p3.2xlarge"}
                ]
            },
            "DebugRuleConfigurations: ",
        ),
    ],
)
def test_each_thing_iam_cannot_see_in_the_payload_stops_the_job(aws, change, found):
    request = payload(**change)
    aws.describe(request=request)
    arn = request["ResourceConfig"].get("TrainingPlanArn")
    aws.plan_tagged(arn, arn.rsplit("/", 1)[1].removesuffix("-plan"))
    aws.terminate()
    result = aws.run(event())
    assert result["outcome"] == "done" and any(v.startswith(found) for v in result["violations"]), result["violations"]
    (item,) = aws.items("guard-terminate")
    assert item["status"] == "done" and item["reason"].startswith(
        "team research submitted research-llama-ft (sj-1) into share research: "
    )
    (platform,) = aws.received("platform")
    (owner,) = aws.received("research-owner")
    assert (
        platform == owner
        and platform["job_id"] == "sj-1"
        and platform["outcome"] == "done"
        and platform["violations"] == result["violations"]
    )
    assert aws.items("guard-admitted") == []


def test_row_2_another_teams_plan_named_among_instance_preferences_is_refused():
    """Issue 38 row 2: the guard read only ResourceConfig.TrainingPlanArn; a plan named in
    InstancePreferences[].TrainingPlanArns ran the job on capacity bought for another team."""
    request = payload(**{"ResourceConfig.TrainingPlanArn": None, "ResourceConfig.InstanceType": None})
    request["ResourceConfig"]["InstancePreferences"] = [
        {"InstanceType": "ml.p5.48xlarge", "TrainingPlanArns": [plan("research-plan")]},
        {"InstanceType": "ml.p4d.24xlarge", "TrainingPlanArns": [plan("research-p4"), plan("training-plan")]},
    ]
    found = _found(
        request,
        plans={plan("research-plan"): "research", plan("research-p4"): "research", plan("training-plan"): "training"},
    )
    assert (
        "ResourceConfig.InstancePreferences[1].TrainingPlanArns[1]: '"
        + plan("training-plan")
        + "' - a training plan bought for team research (its gpu-governance:team tag: 'training')"
    ) in found
    assert not any("InstancePreferences[0].TrainingPlanArns" in v or "[1].TrainingPlanArns[0]" in v for v in found)
    # Instance preferences leave ResourceConfig.InstanceType out, the unit the quota share counts: refused on their own.
    assert [v.split(":")[0] for v in found if "quota share counts" in v] == [
        "ResourceConfig.InstancePreferences[0].InstanceType",
        "ResourceConfig.InstancePreferences[1].InstanceType",
    ]


@pytest.mark.parametrize("key", contract.PLATFORM_TAG_KEYS)
def test_row_5_every_key_only_the_platform_writes_is_refused_on_the_training_job(key):
    """Issue 38 row 5: IAM forbids these keys on the Batch job (aws:TagKeys), not in the payload."""
    request = payload()
    request["Tags"].append({"Key": key, "Value": "acme-ml-capacity"})
    assert _found(request) == [f"Tags.{key}: 'acme-ml-capacity' - none: {key} is a key only the platform writes"]


@pytest.mark.parametrize(
    "tags, found",
    [
        # a look-alike in another case or with a space: another key for tag-aware tools, maybe the same for a report
        (
            [{"Key": "GPU-Governance:Team", "Value": "training"}],
            "Tags.GPU-Governance:Team: 'training' - none: a look-alike of gpu-governance:team (write that key exactly)",
        ),
        (
            [{"Key": "gpu-governance:pool ", "Value": "ec2-gpu"}],
            "Tags.gpu-governance:pool : 'ec2-gpu' - none: gpu-governance:pool is a key only the platform writes",
        ),
        # the same key twice: which one SageMaker keeps is not the guard's guess
        (
            [{"Key": contract.TAG_TEAM, "Value": "research"}, {"Key": contract.TAG_TEAM, "Value": "research"}],
            "Tags.gpu-governance:team: 'research' - each key once",
        ),
        ([{"Key": contract.TAG_TEAM, "Value": "research", "Propagate": True}], "Tags: "),
        ({"Key": contract.TAG_TEAM, "Value": "research"}, "Tags: "),
    ],
)
def test_row_5_tags_that_look_like_the_teams_own_are_refused(tags, found):
    request = payload()
    request["Tags"] = tags
    assert any(v.startswith(found) for v in _found(request)), _found(request)


@pytest.mark.parametrize(
    "tags, found",
    [
        (
            {},
            [
                "<arn> tags.gpu-governance:team: missing - 'research'",
                "<arn> tags.gpu-governance:cost-centre: missing - 'cc-research'",
            ],
        ),
        (
            {contract.TAG_TEAM: "training", contract.TAG_COST_CENTRE: "cc-research"},
            ["<arn> tags.gpu-governance:team: 'training' - the team's own 'research'"],
        ),
        (
            {contract.TAG_TEAM: "research", contract.TAG_COST_CENTRE: "cc-research", contract.TAG_WINDOW: "w"},
            ["<arn> tags.gpu-governance:window: 'w' - none: gpu-governance:window is a key only the platform writes"],
        ),
    ],
)
def test_row_5_the_training_job_itself_must_carry_the_teams_tags_whichever_way_batch_copies_them(tags, found):
    """The SageMaker SDK moves the payload's Tags to the Batch job's; whether Batch copies them to the
    training job is undocumented. The cost is the training job's: its tags are read back."""
    request = payload()
    del request["Tags"]  # as the SDK sends it
    assert _found(request) == []  # before SageMaker: nothing to read yet
    assert _found(request, tags=tags) == [v.replace("<arn>", training_job()) for v in found]
    assert (
        _found(request, tags={contract.TAG_TEAM: "research", contract.TAG_COST_CENTRE: "cc-research", "x": "y"}) == []
    )


def test_a_team_without_a_cost_centre_needs_only_its_team_tag_and_may_name_no_cost_centre():
    request = payload()
    request["Tags"] = [{"Key": contract.TAG_COST_CENTRE, "Value": "anything"}]
    assert _found(request, cost_centre=None, tags={contract.TAG_TEAM: "research"}) == [
        "Tags.gpu-governance:cost-centre: 'anything' - none: the team declares no cost centre"
    ]


@pytest.mark.parametrize(
    "text, found",
    [
        # another team's role first, the team's own last: Python (and the old guard) keep the last one
        (
            '{"RoleArn": "' + role("training") + '", ' + json.dumps(payload())[1:],
            "serviceRequestPayload: key 'RoleArn' twice in one object - each key once",
        ),
        (
            json.dumps(payload()).replace('"InstanceCount": 2', '"InstanceCount": 64, "InstanceCount": 2'),
            "serviceRequestPayload: key 'InstanceCount' twice in one object - each key once",
        ),
        ("[" * 5000 + "]" * 5000, "serviceRequestPayload: '[[[["),  # deeper than a reader goes: not read, refused
        ("{not json", "serviceRequestPayload: '{not json' - a CreateTrainingJob request (JSON object)"),
        ('["a list"]', "serviceRequestPayload: "),
    ],
)
def test_a_payload_that_may_read_two_ways_is_refused(text, found):
    """Issue 38 lead: duplicate keys. Batch passes the payload through unvalidated; which copy
    SageMaker's reader keeps is undocumented, so a key named twice is refused wherever it is."""
    assert any(v.startswith(found) for v in _found(text=text)), _found(text=text)


def _refused_examples():
    """Each refused member at a value that starts something (botocore's example, or another value of its enum)."""
    shapes = paths(sagemaker())
    for path, member in MEMBERS.items():
        if member.verdict != REFUSED:
            continue
        value = example(shapes[path])
        if not member.refuses(value):
            value = next(v for v in (shapes[path].enum or [True, 3600]) if member.refuses(v))
        yield pytest.param(path, value, id=path)


@pytest.mark.parametrize("path, value", list(_refused_examples()))
def test_every_refused_member_is_refused_where_it_is_and_says_why(path, value):
    request = legitimate_request()
    set_path(request, path, value)
    where = path.replace("[]", "[0]")
    found = _found(request)
    assert found and all(v.startswith(f"{where}: ") and v.endswith(MEMBERS[path].why) for v in found), found


@pytest.mark.parametrize(
    "path, value",
    [
        ("ResourceConfig.KeepAlivePeriodInSeconds", 0),
        ("SessionChainingConfig.EnableSessionTagChaining", False),
        ("AlgorithmSpecification.TrainingImageConfig.TrainingRepositoryAccessMode", "Platform"),
    ],
)
def test_a_refused_member_at_the_value_that_starts_nothing_is_admitted(path, value):
    request = payload()
    set_path(request, path, value)
    assert _found(request) == []


@pytest.mark.parametrize(
    "change, found",
    [
        # a member SageMaker may add, or a typo SageMaker would refuse: not classified, so not admitted
        ({"ResourceConfig.BorrowedCapacityArn": plan("training-plan")}, "ResourceConfig.BorrowedCapacityArn: "),
        ({"rolearn": role("training")}, "rolearn: "),  # another case of a member is another member
        ({"ResourceConfig.InstanceGroups[].InstanceGroupName": "g"}, "ResourceConfig.InstanceGroups: "),
        (
            {"ExperimentConfig.ExperimentName": "training-llm"},
            "ExperimentConfig.ExperimentName: 'training-llm' - a name starting with 'research-'",
        ),
        ({"ResourceConfig": [{"InstanceType": "ml.p5.48xlarge"}]}, "ResourceConfig: "),  # a list where an object goes
        ({"InputDataConfig": {"ChannelName": "train"}}, "InputDataConfig: "),  # an object where a list goes
    ],
)
def test_what_the_table_does_not_classify_or_the_wrong_shape_is_refused(change, found):
    request = payload()
    for path, value in change.items():
        set_path(request, path, value)
    assert any(v.startswith(found) for v in _found(request)), _found(request)


def test_a_plan_that_cannot_be_read_is_no_teams(aws):
    request = payload(
        **{"ResourceConfig.TrainingPlanArn": f"arn:aws:sagemaker:{REGION}:999988887777:training-plan/theirs"}
    )
    aws.describe(request=request)
    aws.stubs["sagemaker"].add_client_error("list_tags", "AccessDeniedException", http_status_code=400)
    aws.terminate()
    assert "its gpu-governance:team tag: None" in aws.run(event())["violations"][0]


def test_a_submission_tagged_for_a_team_outside_the_queue_or_in_anothers_share_is_a_violation():
    teams = {"research": _rules("research", cost_centre=None)}
    team, found = violations(described(team="intruder"), teams, plan_owner=lambda arn: None, training_job_tags=None)
    assert (team, found) == ("intruder", ["tags.gpu-governance:team: 'intruder' - a team of this queue (research)"])
    request = payload(**{"ResourceConfig.TrainingPlanArn": None})
    request["Tags"] = [{"Key": contract.TAG_TEAM, "Value": "research"}]
    _, found = violations(
        described(share="training", request=request), teams, plan_owner=lambda arn: None, training_job_tags=None
    )
    assert found == ["quotaShareName: 'training' - the team's own share 'research'"]


# --- row 4: it fails closed ---------------------------------------------------------------------


class Throttled:
    """Answers a client's first ``times`` requests with Batch's throttling error, then ``body``:
    below the HTTP layer, so botocore's own retry handler decides (and its sleeps are recorded)."""

    def __init__(self, times, body, monkeypatch):
        self.times, self.body, self.requests, self.sleeps = times, body, 0, []
        monkeypatch.setattr(botocore.endpoint.time, "sleep", self.sleeps.append)

    def __call__(self, request, **_):
        self.requests += 1
        throttled = self.requests <= self.times
        body = json.dumps({"message": "Too Many Requests"} if throttled else self.body).encode()
        headers = {"x-amzn-errortype": "TooManyRequestsException:"} if throttled else {}
        return AWSResponse(request.url, 429 if throttled else 200, headers, _Raw(body))


class _Raw:
    def __init__(self, body):
        self.body = body

    def stream(self, **_):
        yield self.body


def _batch_with_retries(answer):
    client = boto3.client(
        "batch", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x", config=WITHIN_A_TICK
    )
    client.meta.events.register("before-send.batch.DescribeServiceJob", answer)
    # botocore emits before-send to every handler, even after one answered: moto's (from the ledger's
    # mock) would see this Batch call too, and moto >= 5.2.6 raises on an action it does not implement.
    client.meta.events.unregister("before-send", botocore_stubber)
    return client


def test_row_4_a_throttled_read_is_retried_with_backoff_then_raised_never_decided(aws, monkeypatch):
    """The old guard logged a failed DescribeServiceJob and returned: the job was never checked."""
    throttled = Throttled(99, None, monkeypatch)
    with pytest.raises(Unread, match="DescribeServiceJob sj-1: .*TooManyRequestsException"):
        aws.run(event(), batch=_batch_with_retries(throttled))
    assert throttled.requests == 5  # WITHIN_A_TICK: the request and 4 retries
    assert len(throttled.sleeps) == 4 and all(0 < s <= 20 for s in throttled.sleeps)  # botocore's backoff, capped
    assert aws.items() == [] and aws.received("platform") == []  # nothing decided, nothing claimed


def test_row_4_a_read_that_succeeds_on_a_retry_decides(aws, monkeypatch):
    throttled = Throttled(2, described(), monkeypatch)
    aws.plan_tagged(plan("research-plan"), "research")
    result = aws.run(event(), batch=_batch_with_retries(throttled))
    assert (throttled.requests, len(throttled.sleeps), result["event"]) == (3, 2, "guard_admitted")


def test_row_4_a_plan_or_training_job_whose_tags_cannot_be_read_is_not_decided(aws):
    """A throttled plan lookup used to read as "no team's plan" and stop the team's own job."""
    aws.describe()
    aws.stubs["sagemaker"].add_client_error("list_tags", "ThrottlingException", http_status_code=400)
    with pytest.raises(Unread, match="ListTags"):
        aws.run(event())
    aws.describe(status="SCHEDULED", attempts=[attempt(training_job())])
    aws.plan_tagged(plan("research-plan"), "research")
    aws.stubs["sagemaker"].add_client_error("list_tags", "ResourceNotFound", http_status_code=400)  # just created
    with pytest.raises(Unread, match="ListTags " + training_job()):
        aws.run(event(status="SCHEDULED", attempts=[training_job()]))
    assert aws.items() == []


def test_row_4_a_stop_that_fails_is_recorded_reported_and_raised_so_the_retried_event_stops_it(aws):
    outcomes = []
    for terminated in (False, True):
        aws.describe(request=payload(RoleArn=role("training")))
        aws.plan_tagged(plan("research-plan"), "research")
        if terminated:
            aws.terminate()
            outcomes.append(aws.run(event())["outcome"])
        else:  # throttled: recorded failed, claimed again by the retry of the same event
            aws.stubs["batch"].add_client_error(
                "terminate_service_job", "TooManyRequestsException", http_status_code=429
            )
            with pytest.raises(Unread, match="TerminateServiceJob sj-1"):
                aws.run(event())
            outcomes.append(aws.items("guard-terminate")[0]["status"])
    assert outcomes == ["failed", "done"]
    assert [m["outcome"] for m in aws.received("platform")] == ["failed", "done"]


def test_row_4_a_claim_held_and_not_finished_is_retried_never_taken_as_handled(aws):
    """Found by the guard scenario on the AWS models: the claim's PutItem written, its answer lost, the
    client's retry refused by that very write (or the invocation that claimed killed): the claim is
    still ``claimed``. The event fails, so Lambda retries it once the claim is stale; the old guard
    logged the job as handled and never stopped it."""
    aws.table.put_item(
        Item={"action_id": "sagemaker-training#sj-1#0#guard-terminate", "status": "claimed", "claimed_at": 1764576000}
    )
    aws.describe(request=payload(RoleArn=role("training")))
    aws.plan_tagged(plan("research-plan"), "research")
    with pytest.raises(Unread, match="claim sagemaker-training#sj-1#0#guard-terminate"):
        aws.run(event())
    assert aws.received("platform") == []


def test_row_4_a_job_admitted_costs_no_read_until_its_training_job_is_new(aws):
    """Duplicated and later events of a clean job: one DescribeServiceJob before SageMaker, one
    once its training job exists (its tags read), none after (the stubs fail on any other call)."""
    aws.describe()
    aws.plan_tagged(plan("research-plan"), "research")
    assert aws.run(event())["event"] == "guard_admitted"
    assert aws.run(event())["event"] == "guard_already_admitted"  # the same event again
    aws.describe(status="SCHEDULED", attempts=[attempt(training_job())])
    aws.plan_tagged(plan("research-plan"), "research")
    aws.tags(training_job(), {contract.TAG_TEAM: "research", contract.TAG_COST_CENTRE: "cc-research"})
    assert aws.run(event(status="SCHEDULED", attempts=[training_job()]))["training_jobs"] == [training_job()]
    for status in ("STARTING", "RUNNING", "RUNNABLE"):  # RUNNABLE: a late event, out of order
        assert aws.run(event(status=status, attempts=[training_job()]))["event"] == "guard_already_admitted"
    # Preempted and started again: a new training job is read, whatever the event names.
    second = training_job("AWSBatchresearch-llama-ft9z9z")
    aws.describe(status="RUNNING", attempts=[attempt(training_job()), attempt(second)])
    aws.plan_tagged(plan("research-plan"), "research")
    aws.tags(training_job(), {contract.TAG_TEAM: "research", contract.TAG_COST_CENTRE: "cc-research"})
    aws.tags(second, {contract.TAG_TEAM: "training", contract.TAG_COST_CENTRE: "cc-research"})
    aws.terminate()
    result = aws.run(event(status="RUNNING", attempts=[training_job(), second]))
    assert result["outcome"] == "done" and result["violations"] == [
        f"{second} tags.gpu-governance:team: 'training' - the team's own 'research'"
    ]


def test_row_4_a_job_past_scheduled_whose_training_job_was_never_read_is_read_even_if_the_event_names_none(aws):
    aws.describe()
    aws.plan_tagged(plan("research-plan"), "research")
    aws.run(event())
    aws.describe(status="STARTING", attempts=[attempt(training_job())])
    aws.plan_tagged(plan("research-plan"), "research")
    aws.tags(training_job(), {})
    aws.terminate()
    assert aws.run(event(status="STARTING"))["outcome"] == "done"


@pytest.mark.parametrize("status, terminated", [("SUCCEEDED", False), ("FAILED", True), ("RUNNING", True)])
def test_row_4_a_violation_read_only_after_the_job_ended_or_was_cancelled_is_recorded_and_reported(
    aws, status, terminated
):
    """A late (or redriven) event, or a team that submits and cancels: nothing to stop, but the
    platform hears of it, once. The old guard ignored the job."""
    for _ in range(2):
        aws.describe(request=payload(RoleArn=role("training")), status=status, isTerminated=terminated)
        aws.plan_tagged(plan("research-plan"), "research")
        result = aws.run(event(status="RUNNABLE"))
    assert result["event"] == "guard_already_handled"
    (item,) = aws.items("guard-terminate")
    assert item["status"] == "ended" and item["detail"].startswith(f"the job was {status}")
    assert [m["outcome"] for m in aws.received("platform")] == ["ended"]


def test_a_clean_job_that_ended_is_admitted_without_reading_its_training_job_and_marks_none_read(aws):
    """Its training job may never have been created; one never read must not count as read."""
    aws.describe(status="FAILED", isTerminated=True, attempts=[attempt(training_job())])
    aws.plan_tagged(plan("research-plan"), "research")
    assert aws.run(event(status="RUNNING", attempts=[training_job()]))["training_jobs"] == []
    (item,) = aws.items("guard-admitted")
    assert item["training_jobs"] == []


def test_dry_run_records_and_alerts_once_and_stops_nothing(aws):
    results = []
    for status in ("RUNNABLE", "SCHEDULED"):  # two state changes, one decision
        aws.describe(request=payload(RoleArn=role("training")), status=status)
        aws.plan_tagged(plan("research-plan"), "research")
        results.append(aws.run(event(status=status), dry_run=True))
    assert results[0]["outcome"] == "planned" and results[1]["event"] == "guard_already_handled"
    (item,) = aws.items()
    assert item["status"] == "planned"
    assert len(aws.received("platform")) == 1 and aws.received("research-owner")[0]["outcome"] == "planned"


def test_a_job_flagged_in_dry_run_is_stopped_once_the_guard_acts(aws):
    """Switching guard_mode to act: the dry run's "planned" record must not keep the job running."""
    for status, dry_run in (("RUNNABLE", True), ("SCHEDULED", False), ("STARTING", False)):
        aws.describe(request=payload(RoleArn=role("training")), status=status)
        aws.plan_tagged(plan("research-plan"), "research")
        if status == "SCHEDULED":
            aws.terminate()
        aws.run(event(status=status), dry_run=dry_run)
    assert sorted(item["status"] for item in aws.items()) == ["done", "planned"]
    assert [m["outcome"] for m in aws.received("platform")] == [
        "planned",
        "done",
    ]  # the repeated event stops nothing twice


@pytest.mark.parametrize(
    "evt",
    [
        event(queue=f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/platform-jobs"),  # not a governed queue
        event(status="SUCCEEDED"),
        {**event(), "detail": "not an object"},
        {**event(), "detail-type": "Batch Job State Change"},
        {"source": "aws.events", "detail-type": "Scheduled Event"},  # the redrive's own schedule, dead-lettered
    ],
)
def test_other_events_are_ignored_without_a_call(aws, evt):
    assert aws.run(evt)["event"] == "guard_ignored" and aws.items() == []


# --- the redrive: dead-lettered events checked again until they are read ------------------------


def test_row_4_a_dead_lettered_event_is_checked_again_until_it_is_read(aws, monkeypatch):
    """The event Lambda gave up on (the body is the event itself) stays in the queue while its read
    still fails, and is deleted once the guard decided; one bad message holds up no other."""
    monkeypatch.setattr(guard_handler, "FUNCTION_TIMEOUT_SECONDS", 0)  # as if a function timeout had passed at once
    url = aws.sqs.create_queue(QueueName="dead-letters")["QueueUrl"]
    aws.sqs.send_message(QueueUrl=url, MessageBody=json.dumps(event()))
    aws.sqs.send_message(QueueUrl=url, MessageBody="not an event")
    aws.stubs["batch"].add_client_error("describe_service_job", "TooManyRequestsException", http_status_code=429)
    first = guard_handler.redrive(aws.sqs, url, aws.run, lambda: 60.0)
    assert (first["checked"], first["failed"]) == (0, 2)  # each tried once, though SQS hands them back at once
    aws.describe(request=payload(RoleArn=role("training")), status="RUNNING")
    aws.plan_tagged(plan("research-plan"), "research")
    aws.terminate()
    second = guard_handler.redrive(aws.sqs, url, aws.run, lambda: 60.0)
    assert (second["checked"], second["failed"]) == (1, 1)
    assert aws.items("guard-terminate")[0]["status"] == "done"
    (left,) = aws.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert left["Body"] == "not an event"  # the DeadLetters alarm stays on until someone looks


def test_a_redrive_starts_nothing_without_time_left(aws):
    url = aws.sqs.create_queue(QueueName="dead-letters")["QueueUrl"]
    aws.sqs.send_message(QueueUrl=url, MessageBody=json.dumps(event()))
    assert guard_handler.redrive(aws.sqs, url, aws.run, lambda: 5.0)["checked"] == 0


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


# --- the team's run-time limit (issue 43, item 3): StoppingCondition.MaxRuntimeInSeconds ---------


def _limited(**limits):
    return TeamRules(
        execution_role_arn=role("research"),
        repositories=(f"{REGISTRY}/acme-ml/research", SHARED),
        cost_centre="cc-research",
        **limits,
    )


@pytest.mark.parametrize(
    "runtime, priority, found",
    [
        (3600, 50, []),
        (3601, 50, ["StoppingCondition.MaxRuntimeInSeconds: 3601 - at most 3600 s, the team's run-time limit"]),
        # missing: SageMaker's default of a day, which the guard does not assume
        (None, 50, ["StoppingCondition.MaxRuntimeInSeconds: None - at most 3600 s"]),
        ("3600", 50, ["StoppingCondition.MaxRuntimeInSeconds: '3600' - at most 3600 s"]),
        (True, 50, ["StoppingCondition.MaxRuntimeInSeconds: True - at most 3600 s"]),
        (1800, 10, []),  # the class of weight 10 allows 1800 s
        (1801, 10, ["StoppingCondition.MaxRuntimeInSeconds: 1801 - at most 1800 s"]),
        (3600, 77, []),  # a priority no class has: the team's limit for any class
    ],
)
def test_a_job_asking_for_longer_than_its_teams_run_time_limit_is_a_violation(runtime, priority, found):
    request = payload(**{"StoppingCondition.MaxRuntimeInSeconds": runtime})
    job = described(request=request, schedulingPriority=priority)
    rules = {"research": _limited(max_runtime_seconds=3600, max_runtime_by_priority={10: 1800})}
    seen = violations(job, rules, plan_owner=lambda arn: "research", training_job_tags=None)[1]
    assert len(seen) == len(found) and all(s.startswith(f) for s, f in zip(seen, found, strict=True)), seen


def test_without_a_run_time_limit_any_runtime_or_none_is_admitted():
    for runtime in (None, 2_419_200):
        job = described(request=payload(**{"StoppingCondition.MaxRuntimeInSeconds": runtime}))
        assert (
            violations(job, {"research": _limited()}, plan_owner=lambda arn: "research", training_job_tags=None)[1]
            == []
        )


def test_a_job_over_its_run_time_limit_is_stopped_recorded_and_reported(aws):
    aws.queues[QUEUE]["teams"]["research"]["max_runtime_seconds"] = 7200
    aws.describe(request=payload(**{"StoppingCondition.MaxRuntimeInSeconds": 86400}))
    aws.plan_tagged(plan("research-plan"), "research")
    aws.terminate()
    result = aws.run(event())
    assert result["outcome"] == "done" and result["violations"] == [
        "StoppingCondition.MaxRuntimeInSeconds: 86400 - at most 7200 s, the team's run-time limit (max_run_minutes)"
    ]
    (item,) = aws.items("guard-terminate")
    assert item["status"] == "done"
    assert aws.received("platform")[0]["violations"] == result["violations"]


def test_the_construct_hands_the_guard_each_teams_limits_as_the_handler_reads_them():
    """From the governance file to the rules the check applies: the limit of a job of any class, and
    the tighter one of each class by its weight (its Batch scheduling priority)."""
    from constructs_lib.controllers.guard import _runtime_limits
    from constructs_lib.model import GovernanceModel

    from ..foundation.org import default_data

    data = default_data()
    data["priority_classes"][2]["max_run_minutes"] = 30  # opportunistic, weight 10
    data["teams"][0]["max_run_minutes"] = 120  # research
    model = GovernanceModel.from_dict(data)
    pool = model.pool("sagemaker-training")
    research, training = (next(t for t in model.teams if t.name == name) for name in ("research", "training"))
    assert _runtime_limits(model, research, pool) == {
        "max_runtime_seconds": 7200,
        "max_runtime_by_priority": {"10": 1800},
    }
    assert _runtime_limits(model, training, pool) == {"max_runtime_by_priority": {"10": 1800}}
    document = {
        "pools": {
            "sagemaker-training": {
                "teams": {"research": {"repository_name": "acme-ml/research", **_runtime_limits(model, research, pool)}}
            }
        }
    }
    names = {"execution_role_arn": role("{team}"), "registry": REGISTRY, "team_topic": PLATFORM}
    (settings,) = guard_handler.queues_from(
        [{"job_queue": QUEUE, "pool": "sagemaker-training"}], names, document
    ).values()
    rules = guard_handler.checks.rules_from(settings)["research"]
    assert (rules.max_runtime_for(50), rules.max_runtime_for(10), rules.max_runtime_for(None)) == (7200, 1800, 7200)
