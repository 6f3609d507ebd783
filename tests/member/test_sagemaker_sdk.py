"""The SageMaker Python SDK path (sagemaker-train's ``TrainingQueue``): what it really sends,
caught by a Stubber on the Batch client the SDK creates, validated against Batch's model and
the payload against SageMaker's CreateTrainingJob."""

from __future__ import annotations

import dataclasses
import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from constructs_lib.member import model_trainer, submit_with_sdk

from .aws_models import payload_problems
from .conftest import IMAGE

# Deselected by `make test`, run by `make test-member` (the [member] extra): never skipped, so a
# missing SDK fails here instead of passing unnoticed.
pytestmark = pytest.mark.member_sdk

PLAN = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/finetune-eval-202612101130-1"
RESPONSE = {
    "jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/abc",
    "jobName": "research-llama",
    "jobId": "abc",
}


@pytest.fixture
def batch(monkeypatch):
    """The Batch client the SDK builds for itself, stubbed; every SubmitServiceJob it sends is recorded."""
    from sagemaker.core.helper.session_helper import Session
    from sagemaker.train.aws_batch import batch_api_helper

    # The SDK checks the execution role with iam:SimulatePrincipalPolicy unless told not to; the
    # team's submission role may not call it (the SDK then only warns), and no network is here.
    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    sent: list[dict] = []
    client.meta.events.register(
        "before-parameter-build.batch.SubmitServiceJob", lambda params, **_: sent.append(dict(params))
    )
    monkeypatch.setattr(batch_api_helper, "get_batch_boto_client", lambda *a, **k: client)
    session = Session(
        boto_session=boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    )
    # moto for SSM: model_trainer reads the team's training plans parameter (absent unless a test writes it)
    with mock_aws(), Stubber(client) as stub:
        yield stub, client, sent, session


def test_sdk_submits_into_the_share_with_priority_tag_role_bucket_key_and_checkpoints(batch, deployed, research_tags):
    stub, client, sent, session = batch
    stub.add_response("submit_service_job", RESPONSE)  # the client validates the parameters against Batch's model
    trainer = model_trainer(
        deployed,
        base_job_name="research-llama",
        instance_type="ml.p5.48xlarge",
        image_uri=IMAGE,
        sagemaker_session=session,
    )
    queued = submit_with_sdk(deployed, trainer, priority_class="standard", batch_client=client)
    stub.assert_no_pending_responses()
    (request,) = sent
    assert queued.job_arn == RESPONSE["jobArn"]
    assert request["jobQueue"] == "sagemaker-training" and request["quotaShareName"] == "research"
    assert request["schedulingPriority"] == deployed.priority("standard")
    assert request["tags"] == research_tags
    # What the SDK adds on its own: one attempt, a day's timeout.
    assert request["retryStrategy"]["attempts"] == 1 and request["timeoutConfig"] == {"attemptDurationSeconds": 86400}
    assert payload_problems(request) == ""
    payload = json.loads(request["serviceRequestPayload"])
    assert payload["TrainingJobName"].startswith("research-llama-") and request["jobName"] == payload["TrainingJobName"]
    assert payload["RoleArn"] == deployed.execution_role_arn
    assert (
        payload["OutputDataConfig"]["KmsKeyId"] == deployed.kms_key_arn == payload["ResourceConfig"]["VolumeKmsKeyId"]
    )
    assert payload["OutputDataConfig"]["S3OutputPath"] == f"s3://{deployed.bucket}/output/"
    assert payload["CheckpointConfig"]["S3Uri"] == f"s3://{deployed.bucket}/checkpoints/research-llama/"
    # The SDK moves the payload's tags to the Batch job (documented in docs/team-guide.md).
    assert "Tags" not in payload


def test_a_priority_of_zero_the_sdk_drops_is_submitted_as_one_and_set_right_after(batch, deployed):
    stub, client, sent, session = batch
    setup = dataclasses.replace(
        deployed, priority_classes=[*deployed.priority_classes, {"name": "idle", "weight": 0, "scheduling_priority": 0}]
    )
    stub.add_response("submit_service_job", RESPONSE)
    stub.add_response(
        "update_service_job",
        {"jobArn": RESPONSE["jobArn"], "jobName": "research-llama", "jobId": "abc"},
        {"jobId": RESPONSE["jobArn"], "schedulingPriority": 0},
    )
    trainer = model_trainer(
        setup,
        base_job_name="research-llama",
        instance_type="ml.p5.48xlarge",
        image_uri=IMAGE,
        sagemaker_session=session,
    )
    submit_with_sdk(setup, trainer, priority_class="idle", batch_client=client)
    stub.assert_no_pending_responses()
    # The SDK sends no priority of 0, and IAM tags a service job only inside a submission that
    # carries one: submitted at 1, the lowest the SDK sends, then set to 0.
    assert sent[0]["schedulingPriority"] == 1


def test_the_sdk_path_runs_the_job_on_the_teams_active_training_plan(batch, deployed):
    # Issue 24, outcome 9: the plan bought for the team reaches the SDK's jobs as ResourceConfig.TrainingPlanArn.
    stub, client, sent, session = batch
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name=deployed.training_plans_parameter,
        Type="String",
        Value=json.dumps(
            [
                {
                    "arn": PLAN,
                    "window": "finetune-eval",
                    "instance_type": "ml.p5.48xlarge",
                    "ends": "2999-01-01T11:30:00+00:00",
                },
                {
                    "arn": PLAN + "-g6",
                    "window": "small",
                    "instance_type": "ml.g6.12xlarge",
                    "ends": "2999-01-01T11:30:00+00:00",
                },
            ]
        ),
    )
    stub.add_response("submit_service_job", RESPONSE)
    stub.add_response("submit_service_job", RESPONSE)
    on_plan = model_trainer(
        deployed,
        base_job_name="research-llama",
        instance_type="ml.p5.48xlarge",
        image_uri=IMAGE,
        sagemaker_session=session,
    )
    submit_with_sdk(deployed, on_plan, priority_class="standard", batch_client=client)
    # None chooses on demand, even while the team owns a plan of the type.
    on_demand = model_trainer(
        deployed,
        base_job_name="research-llama",
        instance_type="ml.p5.48xlarge",
        image_uri=IMAGE,
        sagemaker_session=session,
        training_plan_arn=None,
    )
    submit_with_sdk(deployed, on_demand, priority_class="standard", batch_client=client)
    stub.assert_no_pending_responses()
    first, second = (json.loads(request["serviceRequestPayload"])["ResourceConfig"] for request in sent)
    assert first["TrainingPlanArn"] == PLAN and "TrainingPlanArn" not in second
    assert payload_problems(sent[0]) == ""  # CreateTrainingJob accepts it
