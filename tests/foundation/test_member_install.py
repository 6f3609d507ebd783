"""The light install (item 4 of issue 26): `pip install cdk-gpu-governance` brings no aws-cdk-lib,
jsii or Node.js, and the member commands and the submission helpers work without them; the
constructs say which extra they need."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

from .test_cli_imports import ROOT, clean_environment

# Python with the CDK's modules made unimportable, as in a venv with only the base dependencies.
WITHOUT_CDK = """
import importlib.abc, json, sys
class NoCdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("aws_cdk", "constructs", "cdk_nag", "jsii"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoCdk())
"""

MEMBER_RUN = (
    WITHOUT_CDK
    + """
from constructs_lib.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
from constructs_lib.member import TeamSetup, sbatch_line, service_job_request, team_setup, training_job_manifest
from constructs_lib.model.loader import load_model
import dataclasses
setup = dataclasses.replace(team_setup(load_model(sys.argv[2]), "research", backend="batch"), bucket="b", kms_key_arn="arn:aws:kms:us-east-1:111122223333:key/k")
request = service_job_request(setup, job_name="research-x", priority_class="standard", instance_type="ml.p5.48xlarge", image_uri="img:1")
print(json.dumps({"codes": codes, "queue": request["jobQueue"]}))
"""
)


def test_the_base_dependencies_hold_no_cdk_and_the_cdk_extra_holds_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {
        requirement.split(">")[0].split("<")[0].split("=")[0].strip().lower() for requirement in project["dependencies"]
    }
    assert names == {"pydantic", "pyyaml", "boto3"}
    assert {"aws-cdk-lib", "constructs", "cdk-nag"} <= {
        r.split(">")[0].strip().lower() for r in project["optional-dependencies"]["cdk"]
    }


def test_member_commands_and_helpers_run_without_the_cdk(tmp_path):
    config = str(ROOT / "constructs_lib" / "data" / "default-governance.yaml")
    squeue = tmp_path / "squeue.txt"
    squeue.write_text("7|train|research|research.standard|PENDING|1|research|100|2026-12-01T09:00:00|Resources\n")
    commands = [
        ["team", "show", "research", "--config", config],
        ["team", "submit-example", "research", "--backend", "slurm", "--config", config],
        ["team", "submit-example", "research", "--backend", "hyperpod_eks", "--image", "img:1", "--config", config],
        ["status", "--team", "research", "--pool", "hyperpod-slurm", "--squeue", str(squeue), "--config", config],
        [
            "usage",
            "report",
            "--from",
            "2026-12-01",
            "--to",
            "2026-11-01",
            "--config",
            config,
        ],  # refused before AWS: exit 2
        ["validate", "--config", config],
    ]
    result = subprocess.run(
        [sys.executable, "-c", MEMBER_RUN, json.dumps(commands), config],
        cwd=ROOT,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"codes": [0, 0, 0, 0, 2, 0], "queue": "sagemaker-training"}


def test_a_construct_without_the_cdk_names_the_extra_to_install():
    code = (
        WITHOUT_CDK
        + """
import constructs_lib
try:
    constructs_lib.HyperPodEksGovernance
except ModuleNotFoundError as error:
    print(error)
"""
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean_environment(), capture_output=True, text=True, timeout=120
    )
    assert "install the [cdk] extra (pip install 'cdk-gpu-governance[cdk]')" in result.stdout, result.stderr[-2000:]
