"""The controllers' Lambda code: the `gpu_governance_runtime` package plus the policy compiled
from the model, staged without Docker (plain Python, boto3 from the Lambda runtime)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import gpu_governance_runtime
from aws_cdk import aws_lambda as lambda_
from gpu_governance_runtime.contract import POLICY_FILE_NAME

from .model import GovernanceModel
from .policy import policy_json

RUNTIME_PACKAGE = Path(gpu_governance_runtime.__file__).resolve().parent


def runtime_code(model: GovernanceModel | None = None) -> lambda_.Code:
    """The asset hash is over the content, so an unchanged model gives an unchanged asset.
    Without a model the package carries no policy: for handlers that read none, whose code then
    does not change with the model."""
    staging = Path(tempfile.mkdtemp(prefix="gpu-governance-runtime-"))
    shutil.copytree(RUNTIME_PACKAGE, staging / RUNTIME_PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if model is not None:
        (staging / RUNTIME_PACKAGE.name / POLICY_FILE_NAME).write_text(policy_json(model))
    return lambda_.Code.from_asset(str(staging))
