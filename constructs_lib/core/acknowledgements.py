"""Narrow, reasoned acknowledgements of cdk-nag findings on single constructs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct

# The standard packs (compliance.STANDARD_PACKS) that apply each rule the library acknowledges in
# more than one pack, by the rule's cdk-nag name; tests/nag/test_acknowledgements.py checks it
# against the packs of the installed cdk-nag. A pack absent here does not have the rule, and
# acknowledging an id no pack reports would only hide a typo.
_CONTROL_PACKS = ("NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")
PACKS_WITH_RULE: dict[str, tuple[str, ...]] = {
    "CloudWatchLogGroupEncrypted": _CONTROL_PACKS,
    "DynamoDBInBackupPlan": ("NIST.800.53.R5", "HIPAA.Security"),
    "IAMNoInlinePolicy": _CONTROL_PACKS,
    "LambdaConcurrency": ("NIST.800.53.R5", "HIPAA.Security"),
    "LambdaDLQ": ("NIST.800.53.R5", "HIPAA.Security", "Serverless"),
    "LambdaInsideVPC": _CONTROL_PACKS,
    "S3BucketReplicationEnabled": _CONTROL_PACKS,
    "S3DefaultEncryptionKMS": _CONTROL_PACKS,
}


def finding_ids(finding_or_rule: str) -> tuple[str, ...]:
    """``Pack-Rule[...]`` as it is; a bare rule name (no pack prefix) as that rule in every
    standard pack that has it, in PACKS_WITH_RULE's order."""
    if "-" in finding_or_rule:
        return (finding_or_rule,)
    if finding_or_rule not in PACKS_WITH_RULE:
        raise ValueError(f"{finding_or_rule}: no pack prefix and not in PACKS_WITH_RULE ({sorted(PACKS_WITH_RULE)})")
    return tuple(f"{pack}-{finding_or_rule}" for pack in PACKS_WITH_RULE[finding_or_rule])


def acknowledge(construct: IConstruct, reason: str, *findings: str) -> None:
    """Acknowledge findings on one construct, each with the same real reason. A finding is an id
    (``AwsSolutions-IAM5[Action::kms:ReEncrypt*]``) or a bare rule name (``LambdaInsideVPC``),
    which stands for the rule in every standard pack that has it."""
    Validations.of(construct).acknowledge(
        *(Acknowledgment(id=finding_id, reason=reason) for finding in findings for finding_id in finding_ids(finding))
    )


def acknowledge_wildcard_resources(construct: IConstruct, resources: Iterable[str], reason: str) -> None:
    """Acknowledge AwsSolutions-IAM5 for exactly the wildcard resources named, no others."""
    named = set(nag_resources(construct, resources))
    acknowledge(construct, reason, *sorted(f"AwsSolutions-IAM5[Resource::{text}]" for text in named if "*" in text))


def nag_resource(construct: IConstruct, value: Any) -> str:
    """A resource (ARN, possibly with tokens) as cdk-nag names it in finding ids."""
    return cfn_text(Stack.of(construct).resolve(value))


def nag_resources(construct: IConstruct, values: Iterable[Any]) -> list[str]:
    """Several resources as cdk-nag names them, resolved together: each resolve is a round trip
    through jsii, and a team's policies name dozens of resources (docs/performance.md)."""
    return [cfn_text(value) for value in Stack.of(construct).resolve(list(values))]


def cfn_text(value: Any) -> str:
    """A resolved CloudFormation value as one string, the way cdk-nag names it in finding ids:
    ``<LogicalId>`` for a Ref, ``<LogicalId.Attribute>`` for a GetAtt, joins joined, anything
    else as compact JSON (as cdk-nag's JSON.stringify does)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
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
