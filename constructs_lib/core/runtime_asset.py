"""The controllers' Lambda code: the `gpu_governance_runtime` package plus the policy document
compiled from the model (``constructs_lib.model.policy.policy_json``), staged without Docker
(plain Python, boto3 from the Lambda runtime)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from aws_cdk import aws_lambda as lambda_

import gpu_governance_runtime
from gpu_governance_runtime.contract import POLICY_FILE_NAME

RUNTIME_PACKAGE = Path(gpu_governance_runtime.__file__).resolve().parent


def runtime_code(policy_document: str | None = None, documents: Mapping[str, str] | None = None) -> lambda_.Code:
    """The asset hash is over the content, so an unchanged policy gives an unchanged asset.
    Without a policy the package carries none: for handlers that read none, whose code then
    does not change with the model. ``documents``: more files (name -> text) beside it, for what
    a handler needs that would not fit in Lambda's 4 KB of environment variables."""
    staging = Path(tempfile.mkdtemp(prefix="gpu-governance-runtime-"))
    shutil.copytree(
        RUNTIME_PACKAGE, staging / RUNTIME_PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    files = {**({POLICY_FILE_NAME: policy_document} if policy_document is not None else {}), **(documents or {})}
    for name, text in files.items():
        (staging / RUNTIME_PACKAGE.name / name).write_text(text)
    return lambda_.Code.from_asset(str(staging))
