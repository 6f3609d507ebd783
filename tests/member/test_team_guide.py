"""docs/team-guide.md as a member would run it, against the reference organisation: every
``sh test`` block runs in bash with stand-ins for aws, kubectl and Slurm (tests/member/fake_cli.py)
that refuse what the real services would; every ``sh stubbed`` block runs its example in-process
against a stubbed Batch client. A block with any other tag fails the test: nothing in the guide
goes unrun."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from constructs_lib.model.loader import default_config_text
from gpu_governance_runtime import contract

from .aws_models import payload_problems
from .test_examples import run_sdk_example

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "team-guide.md"
BLOCK = re.compile(r"^```(\w+)(?: (\w+))?\n(.*?)^```$", re.MULTILINE | re.DOTALL)
MEMBER_LOGIN = "researchscientists"  # the cluster login of the research team's member role (docs/slurm.md)


def blocks(kind: str) -> list[str]:
    return [body for language, tag, body in BLOCK.findall(GUIDE.read_text()) if language == "sh" and tag == kind]


def test_every_shell_block_of_the_guide_is_run():
    tags = {(language, tag) for language, tag, _ in BLOCK.findall(GUIDE.read_text())}
    assert tags == {("sh", "test"), ("sh", "stubbed")}


@pytest.fixture(scope="module")
def ran(tmp_path_factory, request):
    model, published = request.getfixturevalue("model"), request.getfixturevalue("published")
    folder = tmp_path_factory.mktemp("guide")
    tools = folder / "bin"
    tools.mkdir()
    shims = {
        tool: f'exec "{sys.executable}" -m tests.member.fake_cli {tool} "$@"'
        for tool in ("aws", "kubectl", "sbatch", "squeue", "scancel")
    }
    shims |= {
        "gpu-governance": f'exec "{sys.executable}" -m constructs_lib.cli "$@"',
        "python": f'exec "{sys.executable}" "$@"',
    }
    for name, line in shims.items():
        (tools / name).write_text(f"#!/bin/sh\n{line}\n")
        (tools / name).chmod(0o755)
    (folder / "examples").symlink_to(ROOT / "examples")
    parameters = folder / "published-parameters.json"
    name = contract.discovery_parameter_name(model.organisation, "research", "sagemaker-training")
    parameters.write_text(json.dumps({name: published}))
    log = folder / "calls.jsonl"
    (folder / "governance.yaml").write_text(default_config_text())  # the file the platform team shares
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_GOVERNANCE_CONFIG", "TEAM_BUCKET", "TEAM_KMS_KEY")}
    env |= {
        "PATH": f"{tools}:/usr/bin:/bin",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'lambda'}",
        "FAKE_LOG": str(log),
        "FAKE_PARAMETERS": str(parameters),
        "USER": MEMBER_LOGIN,
    }
    script = "set -euo pipefail\n" + "\n".join(blocks("test"))
    result = subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return folder, calls, result.stdout


def test_batch_blocks_submit_a_valid_job_into_the_teams_share_and_watch_and_stop_it(ran, deployed, research_tags):
    _, calls, _ = ran
    submitted = [c["params"] for c in calls if c.get("operation") == "SubmitServiceJob"]
    (request,) = submitted
    assert (request["jobQueue"], request["quotaShareName"], request["schedulingPriority"]) == (
        "sagemaker-training",
        "research",
        50,
    )
    assert request["tags"] == research_tags and payload_problems(request) == ""
    payload = json.loads(request["serviceRequestPayload"])
    assert (
        payload["OutputDataConfig"]["KmsKeyId"] == deployed.kms_key_arn
        and payload["RoleArn"] == deployed.execution_role_arn
    )
    operations = [c.get("operation") for c in calls if c["tool"] == "aws"]
    assert {"GetParameter", "ListServiceJobs", "DescribeServiceJob", "UpdateServiceJob", "TerminateServiceJob"} <= set(
        operations
    )


def test_every_aws_call_of_the_guide_names_the_teams_region(ran, deployed):
    # a member's default region may be another one: every call says where the team's setup lives
    _, calls, _ = ran
    regions = {c["operation"]: c["options"].get("--region") for c in calls if c["tool"] == "aws"}
    assert regions and set(regions.values()) == {deployed.region}, regions


def test_the_boto3_example_in_the_guide_prints_the_request_it_would_send(ran):
    _, _, stdout = ran
    start = stdout.index('{\n  "jobName"')  # the pretty-printed request, after the CLI snippet's one-line answer
    request = json.loads(stdout[start : stdout.index("\n}\n", start) + 2])
    assert (
        request["quotaShareName"] == "research"
        and request["schedulingPriority"] == 90
        and payload_problems(request) == ""
    )


def test_hyperpod_blocks_apply_an_admitted_job_to_the_teams_queue_and_delete_it(ran):
    _, calls, _ = ran
    applied = [c["manifest"] for c in calls if c["tool"] == "kubectl" and c.get("verb") == "apply"]
    (job,) = applied
    assert job["metadata"]["namespace"] == "hyperpod-ns-research"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "standard-priority"
    assert [c.get("verb") for c in calls if c["tool"] == "kubectl"] == ["apply", "get", "get", "delete"]


def test_slurm_blocks_submit_with_the_teams_account_partition_and_qos(ran):
    _, calls, _ = ran
    submitted = [c["flags"] for c in calls if c["tool"] == "sbatch"]
    assert submitted == [
        {"account": "research", "partition": "research", "qos": "research.urgent", "gres": "gpu:8"},
        {"account": "research", "partition": "borrow", "qos": "research.borrow", "gres": "gpu:8"},
    ]


@pytest.mark.member_sdk
def test_the_sdk_block_submits_through_the_sdk(ran, monkeypatch):
    folder, _, _ = ran
    (body,) = blocks("stubbed")
    argv = shlex.split(body)
    assert argv[:2] == ["python", "examples/member/submit_sagemaker_sdk.py"]
    monkeypatch.chdir(folder)  # setup.json as the guide's first block saved it
    code, request = run_sdk_example(argv[2:], monkeypatch)
    assert code == 0 and request["quotaShareName"] == "research" and payload_problems(request) == ""


def test_the_stand_ins_refuse_what_the_services_would(ran, tmp_path):
    folder, _, _ = ran
    env = {
        **os.environ,
        "PATH": f"{folder / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'lambda'}",
        "FAKE_LOG": str(tmp_path / "log"),
        "FAKE_PARAMETERS": str(folder / "published-parameters.json"),
        "USER": MEMBER_LOGIN,
    }
    refused = {
        "another team's Slurm account": "sbatch --account=training --partition=training --qos=training.urgent --gres=gpu:1 x.sh",
        "a QoS of another team": "sbatch --account=research --partition=research --qos=training.urgent --gres=gpu:1 x.sh",
        "a Batch member that does not exist": "aws batch describe-service-job --job-name x",
        "another team's namespace": "kubectl get workloads -n hyperpod-ns-nobody",
        "a discovery parameter never published": "aws ssm get-parameter --name /gpu-governance/acme-ml/research/sagemaker-training",
    }
    for what, line in refused.items():
        result = subprocess.run(["bash", "-c", line], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode != 0, what
