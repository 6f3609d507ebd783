from __future__ import annotations

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

# The module, not the name: hyperpod_eks imports this pack, so it may still be loading here.
from constructs_lib.core.vocabulary import HYPERPOD_SHARING_STRATEGY

from ...model import Preset, SharingStrategy
from ..cfn import StackIndex, cfn_type, governance_metadata, properties
from ..rule import GovernanceRule, Result

_BATCH = {s: s.value.upper() for s in SharingStrategy}  # as QuotaManagedTrainingQueue spells them


def _check(node: CfnResource, index: StackIndex) -> Result:
    preset_name = governance_metadata(node).get("preset")
    if not preset_name:
        return NagRuleCompliance.NOT_APPLICABLE
    if preset_name not in {p.value for p in Preset}:
        return [f"Preset::{preset_name}"]
    expected = Preset(preset_name).sharing.strategy
    props = properties(node)
    if cfn_type(node) == "AWS::Batch::QuotaShare":
        actual, spelled = (props.get("ResourceSharingConfiguration") or {}).get("Strategy"), _BATCH[expected]
    else:
        sharing = (props.get("ComputeQuotaConfig") or {}).get("ResourceSharingConfig") or {}
        actual, spelled = sharing.get("Strategy", "LendAndBorrow"), HYPERPOD_SHARING_STRATEGY[expected]
    return [] if actual == spelled else [f"Preset::{preset_name}"]


RULE = GovernanceRule(
    id="PresetContradiction",
    info="The quota share or compute quota's sharing strategy contradicts the preset recorded for its team.",
    explanation=(
        "Presets are promises to a team: critical keeps its reservation (never lends, so starts at "
        "once), steady lends but never borrows (so is never reclaimed), background borrows and accepts "
        "preemption. A resource edited by hand or by an override that contradicts its recorded preset "
        "breaks that promise silently. Align the strategy or change the team's preset."
    ),
    resource_types=frozenset({"AWS::Batch::QuotaShare", "AWS::SageMaker::ComputeQuota"}),
    check=_check,
)
