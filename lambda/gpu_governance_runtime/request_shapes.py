"""Turn data a Describe call returned into the request shape of the call that writes it back.

Responses carry output-only members the matching create or update call refuses (a launch
template's ``MetadataOptions.State``, ``Operator``, ``NetworkInterfaces[].Ipv6Addresses[].IsPrimaryIpv6``):
sending them back fails with ``ParamValidationError``. ``conform`` walks the request shape of
the installed botocore model and keeps only what it accepts, so members added to the API later
are carried over without a code change.
"""

from __future__ import annotations

from typing import Any


def conform(value: Any, shape: Any) -> Any:
    """``value`` restricted to what ``shape`` (a botocore request shape) accepts."""
    if shape.type_name == "structure" and isinstance(value, dict):
        return {name: conform(value[name], member) for name, member in shape.members.items() if name in value}
    if shape.type_name == "list" and isinstance(value, list):
        return [conform(item, shape.member) for item in value]
    if shape.type_name == "map" and isinstance(value, dict):
        return {key: conform(item, shape.value) for key, item in value.items()}
    return value
