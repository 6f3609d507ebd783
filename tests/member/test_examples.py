"""examples/member run end to end against stubbed Batch clients (Stubber validates every request
against Batch's model; the payload is checked against SageMaker's CreateTrainingJob)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from .aws_models import payload_problems
from .conftest import IMAGE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "member"
ANSWER = {"jobArn": "arn:aws:batch:us-east-1:111122223333:service-job/abc", "jobName": "research-llama", "jobId": "abc"}


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def setup_file(tmp_path, published):
    path = tmp_path / "setup.json"
    path.write_text(published)
    return path


def batch_client():
    return boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")


def recorded(client) -> list[dict]:
    sent: list[dict] = []
    client.meta.events.register(
        "before-parameter-build.batch.SubmitServiceJob", lambda params, **_: sent.append(dict(params))
    )
    return sent


def test_boto3_example_submits_a_valid_job_into_the_share(setup_file, capsys, research_tags):
    client = batch_client()
    sent = recorded(client)
    with Stubber(client) as stub:
        stub.add_response(
            "submit_service_job",
            ANSWER,
            {
                "jobName": ANY,
                "jobQueue": "sagemaker-training",
                "serviceJobType": "SAGEMAKER_TRAINING",
                "quotaShareName": "research",
                "schedulingPriority": 50,
                "serviceRequestPayload": ANY,
                "tags": research_tags,
            },
        )
        code = example("submit_boto3").main(
            [
                "--setup",
                str(setup_file),
                "--priority-class",
                "standard",
                "--instance-type",
                "ml.p5.48xlarge",
                "--job-name",
                "llama",
                "--image",
                IMAGE,
                "--input",
                "train=s3://acme-research-bucket-1x2y3z/data/",
            ],
            batch_client=client,
        )
        stub.assert_no_pending_responses()
    assert code == 0 and "service job abc" in capsys.readouterr().out
    assert payload_problems(sent[0]) == ""


def test_boto3_example_refuses_a_class_that_does_not_exist_in_one_line(setup_file, capsys):
    code = example("submit_boto3").main(
        [
            "--setup",
            str(setup_file),
            "--priority-class",
            "vip",
            "--instance-type",
            "ml.p5.48xlarge",
            "--job-name",
            "llama",
            "--image",
            IMAGE,
            "--dry-run",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "priority_class: not a priority class of the organisation ('vip') - "
        "one of ['urgent', 'standard', 'opportunistic']"
    )


@pytest.mark.parametrize("credentials", [{}, {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x"}])
def test_boto3_example_without_credentials_or_reachable_aws_is_one_line(setup_file, credentials, tmp_path):
    # a member's shell: no AWS configuration (or keys but no network), a default region that is not the team's
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")]),
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_ENDPOINT_URL_BATCH": "http://127.0.0.1:9",
        **credentials,
    }
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "submit_boto3.py"),
            "--setup",
            str(setup_file),
            "--priority-class",
            "standard",
            "--instance-type",
            "ml.p5.48xlarge",
            "--job-name",
            "llama",
            "--image",
            IMAGE,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (
        ("no AWS credentials: act as your team's submission role" in result.stderr)
        if not credentials
        else ("could not be reached" in result.stderr)
    )


def run_sdk_example(argv: list[str], monkeypatch) -> tuple[int, dict]:
    """Run the SDK example with ``argv`` against a stubbed Batch client; returns its exit code and
    the SubmitServiceJob request the SDK sent (tests calling it are marked member_sdk)."""
    from sagemaker.core.helper.session_helper import Session
    from sagemaker.train.aws_batch import batch_api_helper

    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")
    client = batch_client()
    sent = recorded(client)
    monkeypatch.setattr(batch_api_helper, "get_batch_boto_client", lambda *a, **k: client)
    session = Session(
        boto_session=boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    )
    with mock_aws(), Stubber(client) as stub:  # moto for SSM: the team's training plans parameter, absent here
        stub.add_response("submit_service_job", ANSWER)
        code = example("submit_sagemaker_sdk").main(argv, sagemaker_session=session, batch_client=client)
        stub.assert_no_pending_responses()
    (request,) = sent
    return code, request


@pytest.mark.member_sdk
def test_sdk_example_submits_a_valid_job_into_the_share(setup_file, monkeypatch, capsys, research_tags):
    code, request = run_sdk_example(
        [
            "--setup",
            str(setup_file),
            "--priority-class",
            "urgent",
            "--instance-type",
            "ml.p5.48xlarge",
            "--job-name",
            "llama",
            "--image",
            IMAGE,
        ],
        monkeypatch,
    )
    assert code == 0 and ANSWER["jobArn"] in capsys.readouterr().out
    assert (request["quotaShareName"], request["schedulingPriority"], request["tags"]) == (
        "research",
        90,
        research_tags,
    )
    assert payload_problems(request) == "" and json.loads(request["serviceRequestPayload"])[
        "TrainingJobName"
    ].startswith("research-llama-")


def test_the_sdk_example_without_the_member_extra_says_so_in_one_line(setup_file, tmp_path):
    """Issue 41 item 11: without sagemaker-train the example ended in a 10-line traceback."""
    blocked = (
        "import importlib.abc, runpy, sys\n"
        "class NoSdk(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'sagemaker':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoSdk())\n"
        "sys.argv = ['submit_sagemaker_sdk.py'] + sys.argv[1:]\n"
        f"runpy.run_path({str(EXAMPLES / 'submit_sagemaker_sdk.py')!r}, run_name='__main__')\n"
    )
    argv = ["--setup", str(setup_file), "--priority-class", "standard", "--instance-type", "ml.p5.48xlarge"]
    argv += ["--job-name", "llama", "--image", IMAGE]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "lambda")]),
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    result = subprocess.run(
        [sys.executable, "-c", blocked, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "sagemaker-train" in line and "[member] extra" in line and "Traceback" not in result.stderr
