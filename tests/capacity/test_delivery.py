"""Training plans delivered: each team's active training-job plans are published to its SSM
parameter, only when they change, and taken back when they end."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from gpu_governance_runtime.capacity import delivery

from .builders import at, reservation, window

PLAN = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/finetune-eval-202612101400-1"
JOBS = window(
    name="finetune-eval",
    team="research",
    market="training_plan",
    instance_type="ml.p5.48xlarge",
    consumer={"kind": "sagemaker_training_jobs", "pool": None},
)
GROUP = window(
    name="hp",
    team="training",
    market="training_plan",
    instance_type="ml.p5.48xlarge",
    consumer={"kind": "hyperpod_instance_group", "pool": "hp", "instance_group": "g", "cluster_arn": "arn"},
)
PARAMETER = "/gpu-governance/acme-ml/teams/research/capacity/training-plans"


@pytest.fixture
def ssm():
    with mock_aws():
        yield boto3.client("ssm", region_name="us-east-1")


def publish(ssm, *plans):
    return delivery.publish(windows={w.name: w for w in (JOBS, GROUP)}, owned=plans, ssm=ssm, organisation="acme-ml")


def test_an_active_plan_is_published_to_its_team_once_and_withdrawn_when_it_ends(ssm):
    active = reservation(PLAN, at(10), 1, state="active", window_name="finetune-eval")
    (result,) = publish(ssm, active)  # the HyperPod group's team gets nothing: its group is re-pointed instead
    assert result == {"team": "research", "parameter": PARAMETER, "plans": [PLAN], "changed": True}
    assert json.loads(ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"]) == [
        {"arn": PLAN, "window": "finetune-eval", "instance_type": "ml.p5.48xlarge", "ends": active.end.isoformat()}
    ]
    version = ssm.get_parameter(Name=PARAMETER)["Parameter"]["Version"]
    assert publish(ssm, active)[0]["changed"] is False  # a repeated run writes nothing
    assert ssm.get_parameter(Name=PARAMETER)["Parameter"]["Version"] == version
    scheduled = reservation(PLAN, at(10), 1, state="scheduled", window_name="finetune-eval")
    assert publish(ssm, scheduled)[0] == {"team": "research", "parameter": PARAMETER, "plans": [], "changed": True}
    assert ssm.get_parameter(Name=PARAMETER)["Parameter"]["Value"] == "[]"


def test_a_failed_write_is_reported_and_the_next_run_completes_it(ssm):
    active = reservation(PLAN, at(10), 1, state="active", window_name="finetune-eval")
    ssm.put_parameter(Name=PARAMETER, Value="x" * 10, Type="String")

    class Throttled:
        exceptions = ssm.exceptions

        def get_parameter(self, **kwargs):
            return ssm.get_parameter(**kwargs)

        def put_parameter(self, **kwargs):
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "PutParameter")

    (failed,) = publish(Throttled(), active)
    assert failed["error"].startswith("ThrottlingException")
    assert publish(ssm, active)[0]["changed"] is True
