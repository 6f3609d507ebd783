"""The ``GpuGovernance`` cdk-nag 3 pack."""

from __future__ import annotations

import jsii
from aws_cdk import CfnResource
from cdk_nag import IApplyRule, NagMessageLevel, NagPack, NagRuleCompliance
from constructs import IConstruct

from .cfn import StackIndex, one_resource_check
from .rule import GovernanceRule, Result
from .rules import RULES

PACK_NAME = "GpuGovernance"
_NOTHING_TO_REPORT = (NagRuleCompliance.COMPLIANT, NagRuleCompliance.NOT_APPLICABLE)


@jsii.implements(IApplyRule)
class _AppliedRule:
    """A rule's result, already evaluated in Python, handed to cdk-nag to report.
    cdk-nag reads these across jsii, which needs properties rather than plain attributes."""

    def __init__(self, rule: GovernanceRule, node: CfnResource, outcome: Result | Exception) -> None:
        self._rule, self._node, self._outcome = rule, node, outcome

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

    def rule(self, node: CfnResource) -> Result:
        # Raised here, inside cdk-nag's applyRule, so cdk-nag reports it as it reports any rule's error.
        if isinstance(self._outcome, Exception):
            raise self._outcome
        return self._outcome


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
        # Within one check the rules share the resource's type, stack and properties (nag/cfn.py).
        with one_resource_check():
            for rule in RULES:
                try:
                    outcome: Result | Exception = rule.evaluate(node, self._index)
                except Exception as error:  # noqa: BLE001  cdk-nag reports a rule's error as a finding
                    outcome = error
                # cdk-nag's applyRule records nothing for a compliant result: only a finding or an
                # error crosses jsii (about six calls each), which saves most of the pack's cost.
                if outcome not in _NOTHING_TO_REPORT:
                    self._apply_rule(_AppliedRule(rule, node, outcome))
