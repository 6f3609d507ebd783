"""Narrow, reasoned acknowledgements of cdk-nag findings on single constructs."""

from __future__ import annotations

import json
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
    return cfn_text(Stack.of(construct).resolve(value))


def cfn_text(value: Any) -> str:
    """A resolved CloudFormation value as one string, the way cdk-nag names it in finding ids:
    ``<LogicalId>`` for a Ref, ``<LogicalId.Attribute>`` for a GetAtt, joins joined, anything
    else as compact JSON (as cdk-nag's JSON.stringify does)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (function, argument), = value.items()
        if function == "Ref":
            return f"<{argument}>"
        if function == "Fn::GetAtt":
            return f"<{'.'.join(argument) if isinstance(argument, list) else argument}>"
        if function == "Fn::Join":
            separator, parts = argument
            return separator.join(cfn_text(part) for part in parts)
        if function == "Fn::Sub":
            return argument if isinstance(argument, str) else argument[0]
    return json.dumps(value, separators=(",", ":"))
