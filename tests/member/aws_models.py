"""Check requests against botocore's own service models, as the real services would parse them:
Batch's SubmitServiceJob, and its serviceRequestPayload against SageMaker's CreateTrainingJob."""

from __future__ import annotations

import json
from typing import Any

import botocore.session
from botocore.validate import ParamValidator

_SESSION = botocore.session.get_session()


def operation(service: str, name: str):
    return _SESSION.get_service_model(service).operation_model(name)


def problems(service: str, name: str, params: dict[str, Any]) -> str:
    """botocore's validation report for ``params`` (empty when valid): types, required members,
    enums, lengths and ranges, unknown members."""
    report = ParamValidator().validate(params, operation(service, name).input_shape)
    return report.generate_report() if report.has_errors() else ""


def payload_problems(request: dict[str, Any]) -> str:
    """The payload Batch hands SageMaker, checked as a CreateTrainingJob request."""
    payload = json.loads(request["serviceRequestPayload"])
    return problems("sagemaker", "CreateTrainingJob", payload)
