"""Check at cold start that the runtime's boto3 knows every operation this function calls.

The functions run on the boto3 the Lambda Python runtime ships, which lags behind releases and
differs between regions, while the code calls recent APIs (Capacity Block extensions, training
plans, Batch quota-share snapshots). Bundling a pinned boto3 would add about 35 MB (botocore's
models) to every function's asset and cold start, so instead each handler declares the
operations it calls (``REQUIRED_OPERATIONS``; tests/capacity/test_api_calls_exist.py keeps the
declaration equal to the calls in the code) and refuses to start when one is missing: one ERROR
log line naming them and the botocore version, one ``MissingApiOperations`` metric, and an
import error, so every invocation fails and the function's error alarm fires, before anything
is half done.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import botocore

from .common import log, metrics
from .contract import MISSING_API_OPERATIONS

Required = Mapping[str, Iterable[str]]  # service name -> operation names (PascalCase, as in the API)


def missing(clients: Mapping[str, Any], required: Required) -> list[str]:
    """``service:Operation`` for each required operation the given clients' models lack."""
    return sorted(
        f"{service}:{operation}"
        for service, operations in required.items()
        for operation in operations
        if operation not in clients[service].meta.service_model.operation_names
    )


def require(clients: Mapping[str, Any], required: Required, *, namespace: str) -> None:
    absent = missing(clients, required)
    if not absent:
        return
    log.error(
        "the Lambda runtime's boto3 lacks operations this function calls; it will not start",
        missing=absent,
        botocore=botocore.__version__,
        fix="use a newer Lambda Python runtime (or region) whose boto3 has them",
    )
    metrics.publish(namespace, {}, {MISSING_API_OPERATIONS: (len(absent), "Count")})
    raise RuntimeError(f"botocore {botocore.__version__} lacks {', '.join(absent)}")
