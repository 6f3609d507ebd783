"""CDK constructs and a governance model for shared GPU capacity on AWS."""

import os

# jsii (under aws_cdk) prints a large banner on Node.js 20 unless told not to; only defaults,
# so a host app that sets these keeps its own choice.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from .batch import TEAM_TAG, FairShareJobQueue, QuotaManagedTrainingQueue
from .compliance import acknowledge, apply_standard_packs
from .errors import GovernanceError, Problem
from .guardrails import OrganisationGuardrails
from .loader import load_model, parse_config
from .nag import GpuGovernanceChecks, declare_capacity_controller, declare_platform_admin
from .model import (
    Account,
    BatchFairSharePool,
    BatchQuotaSharePool,
    GovernanceModel,
    Guardrails,
    HyperPodEksPool,
    HyperPodSlurmPool,
    Preset,
    PriorityClass,
    SharingPolicy,
    SharingStrategy,
    Team,
)
from .policy import compile_policy
from .tenancy import TeamTenancy, submission_role_arn

__all__ = [
    "TEAM_TAG",
    "Account",
    "BatchFairSharePool",
    "BatchQuotaSharePool",
    "FairShareJobQueue",
    "GovernanceError",
    "GovernanceModel",
    "GpuGovernanceChecks",
    "Guardrails",
    "HyperPodEksPool",
    "HyperPodSlurmPool",
    "OrganisationGuardrails",
    "Preset",
    "PriorityClass",
    "Problem",
    "QuotaManagedTrainingQueue",
    "SharingPolicy",
    "SharingStrategy",
    "Team",
    "TeamTenancy",
    "acknowledge",
    "apply_standard_packs",
    "compile_policy",
    "declare_capacity_controller",
    "declare_platform_admin",
    "load_model",
    "parse_config",
    "submission_role_arn",
]
