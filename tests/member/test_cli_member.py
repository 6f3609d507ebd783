"""`gpu-governance team submit-example`: what it prints runs, from the model alone or from the
team's discovery document, and bad input exits 2 with one line naming field, value and allowed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from constructs_lib.cli import main

from .aws_models import payload_problems
from .conftest import IMAGE

ROOT = Path(__file__).resolve().parents[2]


def run_snippet(snippet: str, folder: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """Run a printed batch snippet in bash with the stand-in `aws` (botocore's models) on PATH."""
    tools = folder / "bin"
    tools.mkdir(exist_ok=True)
    (tools / "aws").write_text(
        f'#!/bin/sh\ntouch aws-called\nexec "{sys.executable}" -m tests.member.fake_cli aws "$@"\n'
    )
    (tools / "aws").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tools}:/usr/bin:/bin",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'lambda'}",
        "FAKE_LOG": str(folder / "log"),
        **variables,
    }
    for name in ("TEAM_BUCKET", "TEAM_KMS_KEY"):
        if name not in variables:
            env.pop(name, None)
    return subprocess.run(["bash", "-c", snippet], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def submitted(folder: Path) -> dict:
    (call,) = [json.loads(line) for line in (folder / "log").read_text().splitlines()]
    return call["params"]


def test_from_the_model_alone_the_snippet_takes_bucket_and_key_from_the_shell(tmp_path, capsys):
    assert (
        main(
            [
                "team",
                "submit-example",
                "research",
                "--example",
                "--backend",
                "batch",
                "--image",
                IMAGE,
                "--priority-class",
                "urgent",
            ]
        )
        == 0
    )
    snippet = capsys.readouterr().out
    result = run_snippet(
        snippet, tmp_path, TEAM_BUCKET="research-bucket", TEAM_KMS_KEY="arn:aws:kms:us-east-1:111122223333:key/k"
    )
    assert result.returncode == 0, result.stderr
    request = submitted(tmp_path)
    payload = json.loads(request["serviceRequestPayload"])
    assert payload["OutputDataConfig"] == {
        "S3OutputPath": "s3://research-bucket/output/",
        "KmsKeyId": "arn:aws:kms:us-east-1:111122223333:key/k",
    }
    assert request["schedulingPriority"] == 90 and payload_problems(request) == ""


def test_without_bucket_and_key_the_snippet_stops_before_calling_aws(tmp_path, capsys):
    main(["team", "submit-example", "research", "--example", "--backend", "batch", "--image", IMAGE])
    result = run_snippet(capsys.readouterr().out, tmp_path)
    # one error, naming what to set; `aws` never runs (it used to, on an empty JSON file: a second error)
    (line,) = result.stderr.strip().splitlines()
    assert result.returncode != 0 and "TEAM_BUCKET" in line and "discovery document" in line
    assert not (tmp_path / "aws-called").exists() and not (tmp_path / "log").exists()


def test_from_the_discovery_document_the_snippet_is_complete(tmp_path, published, capsys):
    setup = tmp_path / "setup.json"
    setup.write_text(published)
    main(["team", "submit-example", "research", "--backend", "batch", "--setup", str(setup), "--image", IMAGE])
    snippet = capsys.readouterr().out
    assert "${" not in snippet
    assert run_snippet(snippet, tmp_path).returncode == 0
    assert json.loads(submitted(tmp_path)["serviceRequestPayload"])["AlgorithmSpecification"]["TrainingImage"] == IMAGE


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["nobody", "--backend", "slurm"],
            "team: not a team of the model ('nobody') - one of ['production', 'research', 'training']",
        ),
        (
            ["research", "--backend", "slurm", "--priority-class", "vip"],
            "priority_class: not a priority class of the organisation ('vip') - one of ['urgent', 'standard', 'opportunistic']",
        ),
        (
            ["research", "--backend", "batch", "--pool", "ec2-gpu", "--image", IMAGE],
            "pool: not a pool of team research on batch ('ec2-gpu') - one of ['sagemaker-training']",
        ),
        (
            ["research", "--backend", "batch", "--image", "x$(id)"],
            "--image: not an image reference ('x$(id)') - registry/repository:tag or @sha256:digest",
        ),
        (
            ["research", "--backend", "hyperpod_eks"],
            "--image: missing (None) - a training image, e.g. 111122223333.dkr.ecr.us-east-1.amazonaws.com/acme-ml/research:<tag> (the team's repository)",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, line, capsys):
    assert main(["team", "submit-example", "--example", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == ["gpu-governance team: invalid input", line]


def test_a_discovery_document_of_another_team_is_refused(tmp_path, published, capsys):
    setup = tmp_path / "setup.json"
    setup.write_text(published)
    assert main(["team", "submit-example", "training", "--backend", "batch", "--setup", str(setup)]) == 2
    assert (
        "--setup: describes another team, backend or pool ('research/batch_quota_share/sagemaker-training')"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "team", ["research", "production"]
)  # production: with its dedicated nodes' selector and toleration
def test_the_job_manifest_has_no_yaml_anchors_and_reads_back_with_the_librarys_own_loader(team, capsys):
    import yaml

    from constructs_lib.model.loader import _StrictLoader

    assert main(["team", "submit-example", team, "--example", "--backend", "hyperpod_eks", "--image", IMAGE]) == 0
    printed = capsys.readouterr().out
    assert "&id" not in printed and "*id" not in printed
    manifest = yaml.load(printed, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader that refuses aliases
    assert manifest["kind"] == "Job" and manifest["metadata"]["namespace"] == f"hyperpod-ns-{team}"
