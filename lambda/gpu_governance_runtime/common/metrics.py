"""One writer of CloudWatch embedded metric format (EMF): a JSON document on stdout from which
CloudWatch Logs extracts the metrics, with no PutMetricData call, no client and no permission.

The shape follows the EMF specification: ``_aws.Timestamp`` (epoch milliseconds) and one
``CloudWatchMetrics`` directive naming the namespace, one dimension set (at most 30 keys, each
with a string value at the top level) and the metric definitions (at most 100, each value a
number at the top level). Metric names come from the contract, which ties them to the alarms
and dashboards; a name outside it is refused here rather than published unwatched.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..contract import METRIC_NAMES
from . import log

MAX_DIMENSIONS = 30  # per dimension set
MAX_METRICS = 100  # per directive
UNITS = frozenset(
    {
        "Seconds",
        "Microseconds",
        "Milliseconds",
        "Bytes",
        "Kilobytes",
        "Megabytes",
        "Gigabytes",
        "Terabytes",
        "Bits",
        "Kilobits",
        "Megabits",
        "Gigabits",
        "Terabits",
        "Percent",
        "Count",
        "Bytes/Second",
        "Kilobytes/Second",
        "Megabytes/Second",
        "Gigabytes/Second",
        "Terabytes/Second",
        "Bits/Second",
        "Kilobits/Second",
        "Megabits/Second",
        "Gigabits/Second",
        "Terabits/Second",
        "Count/Second",
        "None",
    }
)

Values = Mapping[str, "tuple[float, str]"]  # metric name -> (value, unit)


def document(
    namespace: str, dimensions: Mapping[str, str], values: Values, *, timestamp: float | None = None
) -> dict[str, Any]:
    """The EMF document publishing ``values`` under ``dimensions`` ({} for none) at ``timestamp``
    (epoch seconds; now by default). ValueError for anything CloudWatch would drop."""
    problems = [f"metric {name!r} is not in the contract" for name in values if name not in METRIC_NAMES]
    problems += [
        f"metric {name}: unit {unit!r} is not a CloudWatch unit"
        for name, (_, unit) in values.items()
        if unit not in UNITS
    ]
    problems += [
        f"metric {name}: value {value!r} is not a finite number"
        for name, (value, _) in values.items()
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    ]
    problems += [
        f"dimension {key}: value {value!r} is not a non-empty string"
        for key, value in dimensions.items()
        if not isinstance(value, str) or not value
    ]
    problems += [f"dimension {key} has the name of a metric" for key in dimensions if key in values]
    if not values or len(values) > MAX_METRICS or len(dimensions) > MAX_DIMENSIONS or not namespace:
        problems.append(
            f"{len(values)} metrics (1-{MAX_METRICS}), {len(dimensions)} dimensions (at most {MAX_DIMENSIONS}), "
            f"namespace {namespace!r} (non-empty)"
        )
    if problems:
        raise ValueError("; ".join(problems))
    return {
        "_aws": {
            "Timestamp": int((time.time() if timestamp is None else timestamp) * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    "Dimensions": [list(dimensions)],
                    "Metrics": [{"Name": name, "Unit": unit} for name, (_, unit) in values.items()],
                }
            ],
        },
        **dimensions,
        **{name: value for name, (value, _) in values.items()},
    }


def publish(
    namespace: str,
    dimensions: Mapping[str, str],
    values: Values,
    *,
    timestamp: float | None = None,
    write: Callable[[Mapping[str, Any]], None] = log.write,
) -> None:
    """Write the document of ``document(...)`` as one log line."""
    write(document(namespace, dimensions, values, timestamp=timestamp))
