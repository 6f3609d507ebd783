"""The ``GpuGovernance`` cdk-nag 3 pack."""

from __future__ import annotations

import jsii
from aws_cdk import CfnResource
from cdk_nag import IApplyRule, NagMessageLevel, NagPack, NagRuleCompliance
from constructs import IConstruct

from .cfn import StackIndex, one_resource_check
from .rule import GovernanceRule
from .rules import RULES

PACK_NAME = "GpuGovernance"


@jsii.implements(IApplyRule)
class _AppliedRule:
    # cdk-nag reads these across jsii, which needs properties rather than plain attributes.
    def __init__(self, rule: GovernanceRule, node: CfnResource, index: StackIndex) -> None:
        self._rule, self._node, self._index = rule, node, index

    @property
    def node(self) -> CfnResource:
        return self._node

    @property
    def info(self) -> str:
        return self._rule.info

    @property
    def explanation(self) -> str:
        return self._rule.explanation

    @property
    def level(self) -> NagMessageLevel:
        return NagMessageLevel.ERROR

    @property
    def rule_suffix_override(self) -> str:
        return self._rule.id

    def rule(self, node: CfnResource) -> NagRuleCompliance | list[str]:
        return self._rule.evaluate(node, self._index)


class GpuGovernanceChecks(NagPack):
    """Governance rules for shared GPU capacity, for any CDK app (L1 or L2 resources):
    ``Validations.of(app).add_plugins(GpuGovernanceChecks(app))``, and again inside every
    ``Stage``. Findings are named ``GpuGovernance-<rule id>`` (``[<finding>]`` where a rule
    reports several) and acknowledged with ``Validations.of(construct).acknowledge(...)``."""

    def __init__(self, scope: IConstruct | None = None) -> None:
        super().__init__(scope)
        self._pack_name = PACK_NAME
        self._index = StackIndex()

    @property
    def name(self) -> str:
        return PACK_NAME

    def _check_resource(self, node: CfnResource) -> None:
        # Filtering by type here saves a round trip through jsii per rule and resource.
        resource_type = node.cfn_resource_type
        with one_resource_check():
            for rule in RULES:
                if resource_type in rule.resource_types:
                    self._apply_rule(_AppliedRule(rule, node, self._index))
