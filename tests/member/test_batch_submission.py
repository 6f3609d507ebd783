"""The boto3 path: the team's setup from the model and from its discovery document, and the
SubmitServiceJob request checked by botocore's Stubber (Batch's model) and its payload against
SageMaker's CreateTrainingJob."""

from __future__ import annotations

import dataclasses
import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import TeamSetup, service_job_request, submit_training_job, team_setup, unique_job_name
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime import contract
from tests.foundation.org import default_data

from .aws_models import payload_problems, problems
from .conftest import BUCKET, IMAGE, KEY


def job(setup: TeamSetup, **overrides):
    return {
        "job_name": unique_job_name(setup.team, "llama"),
        "priority_class": "urgent",
        "instance_type": "ml.p5.48xlarge",
        "image_uri": IMAGE,
        **overrides,
    }


def test_the_setup_names_what_the_deployment_creates(model):
    setup = team_setup(model, "research", backend="batch")
    assert (setup.job_queue, setup.quota_share, setup.pool) == ("sagemaker-training", "research", "sagemaker-training")
    assert setup.execution_role_arn == "arn:aws:iam::111122223333:role/gpu-governance/research-gpu-training"
    assert setup.submission_role_arn == "arn:aws:iam::111122223333:role/gpu-governance/research-gpu-submit"
    assert {c["name"]: c["weight"] for c in setup.priority_classes} == {
        c.name: c.weight for c in model.priority_classes
    }
    assert all(
        setup.priority(c.name) == c.weight for c in model.priority_classes
    )  # Batch: the scheduling priority is the weight
    assert setup.quota == model.teams[0].quotas["sagemaker-training"]
    assert setup.bucket is None and setup.kms_key_arn is None  # generated names: only the discovery document knows them


def test_the_dataclass_reads_exactly_the_discovery_keys():
    backend_keys = {key for keys in contract.DISCOVERY_BACKEND_KEYS.values() for key in keys}
    assert {f.name for f in dataclasses.fields(TeamSetup)} == {*contract.DISCOVERY_KEYS, *backend_keys}


def test_a_discovery_document_with_keys_this_version_does_not_know_still_reads(published, deployed):
    assert TeamSetup.from_parameter(json.dumps({**json.loads(published), "ecr_repository": "x"})) == deployed


@pytest.mark.parametrize(
    "change, line",
    [
        (
            lambda d: d.pop("job_queue"),
            "parameter.job_queue: missing (None) - a value in the team's discovery document",
        ),
        (lambda d: d.pop("quota"), "parameter.quota: missing (None) - a value in the team's discovery document"),
        (lambda d: d.update(backend="ec2"), "parameter.backend: not a backend ('ec2') - one of"),
        (lambda d: d.update(version=2), "parameter.version: not a version this library reads (2) - 1"),
        (
            lambda d: d.update(priority_classes=[{"name": "urgent", "weight": 90}]),
            "parameter.priority_classes[0]: invalid ({'name': 'urgent', 'weight': 90}) - an object with name, weight and scheduling_priority",
        ),
        (
            lambda d: d.update(quota={"ml.p5.48xlarge": "2"}),
            "parameter.quota.ml.p5.48xlarge: invalid ('2') - a whole number",
        ),
        (lambda d: d.update(bucket=7), "parameter.bucket: invalid (7) - a str"),
    ],
)
def test_a_bad_discovery_document_is_refused_naming_key_value_and_allowed(published, change, line):
    document = json.loads(published)
    change(document)
    with pytest.raises(GovernanceError) as error:
        TeamSetup.from_parameter(json.dumps(document))
    assert str(error.value).startswith(line)
    for text in ("[]", "{not json"):
        with pytest.raises(GovernanceError, match=r"^parameter: not (a )?JSON"):
            TeamSetup.from_parameter(text)


def test_request_validates_against_batch_and_its_payload_against_sagemaker(deployed):
    request = service_job_request(
        deployed, **job(deployed), inputs={"train": f"s3://{BUCKET}/data/"}, preemption_retries=2
    )
    assert problems("batch", "SubmitServiceJob", request) == ""
    assert payload_problems(request) == ""


def test_submitting_sends_the_share_the_priority_the_team_tag_and_the_teams_data_settings(deployed, research_tags):
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    request = service_job_request(deployed, **job(deployed, job_name="research-llama-1"))
    with Stubber(client) as stub:  # Stubber refuses parameters the Batch model does not accept
        stub.add_response(
            "submit_service_job",
            {
                "jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/1",
                "jobName": "research-llama-1",
                "jobId": "1",
            },
            request,
        )
        with mock_aws():  # the team owns no training plan: its plans parameter does not exist
            submit_training_job(
                client,
                deployed,
                ssm_client=boto3.client("ssm", region_name="us-east-1"),
                **job(deployed, job_name="research-llama-1"),
            )
        stub.assert_no_pending_responses()
    assert request["quotaShareName"] == "research" and "shareIdentifier" not in request
    assert request["schedulingPriority"] == deployed.priority("urgent")
    assert request["tags"] == research_tags
    payload = json.loads(request["serviceRequestPayload"])
    assert payload["TrainingJobName"] == request["jobName"] == "research-llama-1"
    assert payload["RoleArn"] == deployed.execution_role_arn
    assert payload["OutputDataConfig"] == {"S3OutputPath": f"s3://{BUCKET}/output/", "KmsKeyId": KEY}
    assert payload["ResourceConfig"]["VolumeKmsKeyId"] == KEY
    assert payload["CheckpointConfig"]["S3Uri"] == f"s3://{BUCKET}/checkpoints/research-llama-1/"
    assert payload["Tags"] == [{"Key": key, "Value": value} for key, value in sorted(research_tags.items())]


def test_a_class_of_weight_zero_is_sent_as_zero(deployed):
    setup = dataclasses.replace(
        deployed, priority_classes=[*deployed.priority_classes, {"name": "idle", "weight": 0, "scheduling_priority": 0}]
    )
    assert service_job_request(setup, **job(setup, priority_class="idle"))["schedulingPriority"] == 0


@pytest.mark.parametrize(
    "overrides, line",
    [
        (
            {"priority_class": "vip"},
            "priority_class: not a priority class of the organisation ('vip') - one of ['urgent', 'standard', 'opportunistic']",
        ),
        (
            {"image_uri": None},
            "image_uri: missing (None) - a training image, e.g. 111122223333.dkr.ecr.us-east-1.amazonaws.com/acme-ml/research:<tag>",
        ),
        (
            {"instance_type": "ml.p4d.24xlarge"},
            "instance_type: not in team research's quota share ('ml.p4d.24xlarge') - one of ['ml.g6e.12xlarge', 'ml.p5.48xlarge']",
        ),
        (
            {"job_name": "training-llama"},
            "job_name: not a training job name of the team ('training-llama') - 'research-' then",
        ),
        (
            {"tags": {contract.TAG_TEAM: "training"}},
            f"tags.{contract.TAG_TEAM}: names another team ('training') - 'research' (set for you)",
        ),
        (
            {"tags": {contract.TAG_COST_CENTRE: "CC-2210"}},
            f"tags.{contract.TAG_COST_CENTRE}: is not the team's ('CC-2210') - 'CC-1042' (set for you)",
        ),
    ],
)
def test_bad_submissions_are_refused_in_one_line_naming_field_value_and_allowed(deployed, overrides, line):
    with pytest.raises(GovernanceError) as error:
        service_job_request(deployed, **job(deployed, **overrides))
    assert str(error.value).startswith(line) and "\n" not in str(error.value)


def test_a_setup_from_the_model_alone_cannot_submit_and_says_what_to_read(model):
    setup = team_setup(model, "research", backend="batch")
    with pytest.raises(GovernanceError) as error:
        service_job_request(setup, **job(setup))
    assert str(error.value).splitlines() == [
        "setup.bucket: unknown (None) - read the team's discovery document (TeamSetup.from_parameter) or pass it",
        "setup.kms_key_arn: unknown (None) - read the team's discovery document (TeamSetup.from_parameter) or pass it",
    ]


@pytest.mark.parametrize(
    "arguments, line",
    [
        (
            {"team_name": "nobody"},
            "team: not a team of the model ('nobody') - one of ['production', 'research', 'training']",
        ),
        (
            {"team_name": "research", "backend": "ec2"},
            "backend: not a backend members submit to ('ec2') - one of ['batch', 'eks_kueue', 'hyperpod_eks', 'slurm']",
        ),
        (
            {"team_name": "research", "backend": "batch", "pool": "hyperpod-eks"},
            "pool: not a pool of team research on batch ('hyperpod-eks') - one of ['sagemaker-training']",
        ),
        (
            {"team_name": "research"},
            "pool: team research has 3 such pools (None) - one of ['hyperpod-eks', 'hyperpod-slurm', 'sagemaker-training']",
        ),
    ],
)
def test_team_and_pool_that_do_not_exist_are_refused(model, arguments, line):
    with pytest.raises(GovernanceError) as error:
        team_setup(model, **arguments)
    assert str(error.value) == line


def test_the_cost_centre_is_sent_only_by_a_team_that_declares_one(model, research_tags):
    """The discovery document says what to send (tests/security/test_cost_centre.py: what IAM requires)."""
    declared = service_job_request(
        team_setup(model, "research", backend="batch", bucket=BUCKET, kms_key_arn=KEY),
        **job(team_setup(model, "research", backend="batch"), tags={"project": "llama"}),
    )
    assert declared["tags"] == {**research_tags, "project": "llama"}
    data = default_data()
    next(t for t in data["teams"] if t["name"] == "research").pop("cost_centre")
    setup = team_setup(GovernanceModel.from_dict(data), "research", backend="batch", bucket=BUCKET, kms_key_arn=KEY)
    assert setup.submission_tags == {contract.TAG_TEAM: "research"}
    assert service_job_request(setup, **job(setup))["tags"] == {contract.TAG_TEAM: "research"}


def test_the_sdk_path_sends_to_the_teams_region_not_the_callers_default(monkeypatch):
    # what sagemaker-train's Batch helper does: boto3.client("batch") with no region
    import boto3

    from constructs_lib.backends.batch_quota_share.member import default_region

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    before = boto3.DEFAULT_SESSION
    with default_region("us-east-1"):
        assert boto3.client("batch").meta.region_name == "us-east-1"
    assert boto3.DEFAULT_SESSION is before
    assert boto3.client("batch").meta.region_name == "us-west-2"


def test_a_class_with_a_run_time_limit_cuts_the_default_runtime_and_refuses_a_longer_one():
    """The discovery document carries each class's limit in the pool; the helper asks for no more
    than the submission guard admits (issue 43, item 3)."""
    from constructs_lib.controllers.guard import _runtime_limits
    from constructs_lib.member.discovery import describe
    from gpu_governance_runtime.guard.checks import TeamRules, violations

    data = default_data()
    data["priority_classes"][2]["max_run_minutes"] = 30  # opportunistic
    data["teams"][0]["max_run_minutes"] = 600  # research
    model = GovernanceModel.from_dict(data)
    document = describe(model, "research", "sagemaker-training", bucket=BUCKET, kms_key_arn=KEY)
    assert [c.get("max_run_minutes") for c in document["priority_classes"]] == [600, 600, 30]
    setup = TeamSetup.from_parameter(json.dumps(document))
    short = service_job_request(setup, **job(setup, priority_class="opportunistic"))
    urgent = service_job_request(setup, **job(setup))
    runtimes = [
        json.loads(r["serviceRequestPayload"])["StoppingCondition"]["MaxRuntimeInSeconds"] for r in (short, urgent)
    ]
    assert runtimes == [1800, 36000]  # a day, cut to each class's limit
    with pytest.raises(GovernanceError) as error:
        service_job_request(setup, **job(setup, priority_class="opportunistic"), max_runtime_seconds=3600)
    assert str(error.value) == (
        "max_runtime_seconds: longer than class opportunistic's run-time limit on pool sagemaker-training (3600) - at most 1800"
    )
    # what the helper sends, the guard admits: the same limits, from the construct's document
    limits = _runtime_limits(model, model.teams[0], model.pool("sagemaker-training"))
    rules = TeamRules(
        execution_role_arn=setup.execution_role_arn,
        repositories=(setup.ecr_repository_uri,),
        cost_centre=model.teams[0].cost_centre,
        max_runtime_seconds=limits.get("max_runtime_seconds"),
        max_runtime_by_priority={int(p): s for p, s in limits.get("max_runtime_by_priority", {}).items()},
    )
    for request in (short, urgent):
        runtime_problems = [
            v
            for v in violations(
                request, {"research": rules}, plan_owner=lambda arn: "research", training_job_tags=None
            )[1]
            if "MaxRuntimeInSeconds" in v
        ]
        assert runtime_problems == []
