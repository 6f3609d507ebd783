"""Plans reach the work (issue 24, outcome 9): a training plan bought for a team is set as
``ResourceConfig.TrainingPlanArn`` on the team's training jobs, read from the parameter its
discovery document names (the capacity controller writes it, ``capacity/delivery.py``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from constructs_lib.cli import main
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import active_training_plan, service_job_request, submit_training_job, unique_job_name
from gpu_governance_runtime import contract

from .aws_models import payload_problems
from .conftest import IMAGE

PLAN = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/finetune-eval-202612101130-1"
NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
PUBLISHED = json.dumps(
    [
        {
            "arn": PLAN,
            "window": "finetune-eval",
            "instance_type": "ml.p5.48xlarge",
            "ends": "2026-12-11T11:30:00+00:00",
        },
        {
            "arn": PLAN + "-g6",
            "window": "small",
            "instance_type": "ml.g6.12xlarge",
            "ends": "2026-12-11T11:30:00+00:00",
        },
    ]
)


def job(setup, **overrides):
    return {
        "job_name": unique_job_name(setup.team, "llama"),
        "priority_class": "urgent",
        "instance_type": "ml.p5.48xlarge",
        "image_uri": IMAGE,
        **overrides,
    }


def test_the_discovery_document_names_the_teams_training_plans_parameter(deployed):
    assert deployed.training_plans_parameter == contract.team_training_plans_parameter(
        deployed.organisation, "research"
    )


def test_the_plan_of_the_instance_type_is_chosen_and_an_ended_one_never(deployed):
    assert active_training_plan(deployed, "ml.p5.48xlarge", PUBLISHED, now=NOW) == PLAN
    assert active_training_plan(deployed, "ml.p4d.24xlarge", PUBLISHED, now=NOW) is None
    assert active_training_plan(deployed, "ml.p5.48xlarge", PUBLISHED, now=datetime(2026, 12, 12, tzinfo=UTC)) is None
    assert active_training_plan(deployed, "ml.p5.48xlarge", None) is None
    with pytest.raises(GovernanceError, match="not the team's training plans"):
        active_training_plan(deployed, "ml.p5.48xlarge", "{oops")


def test_a_submitted_job_runs_on_the_teams_active_plan(deployed):
    request = service_job_request(deployed, **job(deployed, job_name="research-llama-1"), training_plan_arn=PLAN)
    assert json.loads(request["serviceRequestPayload"])["ResourceConfig"]["TrainingPlanArn"] == PLAN
    assert payload_problems(request) == ""  # CreateTrainingJob accepts it
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    with mock_aws(), Stubber(client) as stub:
        ssm = boto3.client("ssm", region_name="us-east-1")
        ssm.put_parameter(
            Name=deployed.training_plans_parameter,
            Value=json.dumps([{**json.loads(PUBLISHED)[0], "ends": "2999-01-01T11:30:00+00:00"}]),
            Type="String",
        )
        stub.add_response(
            "submit_service_job",
            {
                "jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/1",
                "jobName": "research-llama-1",
                "jobId": "1",
            },
            service_job_request(deployed, **job(deployed, job_name="research-llama-1"), training_plan_arn=PLAN),
        )
        submit_training_job(client, deployed, ssm_client=ssm, **job(deployed, job_name="research-llama-1"))
        stub.assert_no_pending_responses()


def test_submit_example_sets_the_plan_from_the_published_plans(deployed, published, tmp_path, capsys):
    setup_file, plans_file = tmp_path / "setup.json", tmp_path / "plans.json"
    setup_file.write_text(published)
    plans_file.write_text(json.dumps([{**json.loads(PUBLISHED)[0], "ends": "2999-01-01T11:30:00+00:00"}]))
    args = [
        "team",
        "submit-example",
        "research",
        "--backend",
        "batch",
        "--setup",
        str(setup_file),
        "--image",
        IMAGE,
        "--instance-type",
        "ml.p5.48xlarge",
    ]
    assert main(args + ["--training-plans", str(plans_file)]) == 0
    out = capsys.readouterr().out
    assert f"# on the team's training plan {PLAN} (ResourceConfig.TrainingPlanArn)" in out
    assert f'\\"TrainingPlanArn\\": \\"{PLAN}\\"' in out
    assert main(args) == 0
    assert (
        f"pass --training-plans with the value of `aws ssm get-parameter --name {deployed.training_plans_parameter}"
        in capsys.readouterr().out
    )
