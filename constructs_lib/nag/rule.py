"""What one governance rule is; each rule module defines one ``RULE``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from .cfn import StackIndex, cfn_type

Result = NagRuleCompliance | list[str]
"""COMPLIANT, NOT_APPLICABLE, NON_COMPLIANT, or the findings (each acknowledged on its own as
``GpuGovernance-<id>[<finding>]``; an empty list means compliant)."""


@dataclass(frozen=True, kw_only=True)
class GovernanceRule:
    """A rule of the ``GpuGovernance`` pack.

    ``id`` is public contract (acknowledgements name it); ``info`` is the one-line finding;
    ``explanation`` says what goes wrong in a shared GPU organisation if it is ignored.
    """

    id: str
    info: str
    explanation: str
    resource_types: frozenset[str]
    check: Callable[[CfnResource, StackIndex], Result]
    """Called only for resources of ``resource_types``."""

    def evaluate(self, node: CfnResource, index: StackIndex) -> NagRuleCompliance | list[str]:
        if cfn_type(node) not in self.resource_types:
            return NagRuleCompliance.NOT_APPLICABLE
        result = self.check(node, index)
        if isinstance(result, list) and not result:
            return NagRuleCompliance.COMPLIANT
        return result
