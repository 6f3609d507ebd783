"""Narrow, reasoned acknowledgements of cdk-nag findings on single constructs."""

from __future__ import annotations

from typing import Any, Iterable

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct


def acknowledge(construct: IConstruct, reason: str, *finding_ids: str) -> None:
    """Acknowledge named findings on one construct, each with the same real reason."""
    Validations.of(construct).acknowledge(*(Acknowledgment(id=finding_id, reason=reason) for finding_id in finding_ids))


def acknowledge_wildcard_resources(construct: IConstruct, resources: Iterable[str], reason: str) -> None:
    """Acknowledge AwsSolutions-IAM5 for exactly the wildcard resources named, no others."""
    named = {nag_resource(construct, arn) for arn in resources}
    acknowledge(construct, reason, *sorted(f"AwsSolutions-IAM5[Resource::{text}]" for text in named if "*" in text))


def nag_resource(construct: IConstruct, value: Any) -> str:
    """A resource (ARN, possibly with tokens) as cdk-nag names it in finding ids."""
    return _nag_text(Stack.of(construct).resolve(value))


def _nag_text(value: Any) -> str:
    """Render a resolved CloudFormation value the way cdk-nag names it in finding ids."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        logical_id, attribute = value["Fn::GetAtt"]
        return f"<{logical_id}.{attribute}>"
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_nag_text(part) for part in parts)
    raise ValueError(f"cannot name a cdk-nag finding for {value!r}")
