"""CDK constructs and a governance model for shared GPU capacity on AWS.

Every public name is importable from here. Nothing is imported until it is first used (PEP 562):
the commands that synthesize nothing (``gpu-governance validate``, ``simulate``, ...) never start
aws_cdk and jsii, and importing the package changes nothing in the process (no environment
variable, no Node.js process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .core.lazy import lazy_exports

# The submodule that defines each public name (one place; tests/foundation/test_public_api.py
# checks that it, __all__ and the TYPE_CHECKING imports below agree).
_DEFINED_IN = {
    "core.errors": ("GovernanceError", "Problem"),
    "model.loader": ("load_model", "parse_config"),
    "model": (
        "UNLIMITED",
        "Account",
        "BatchFairSharePool",
        "BatchQuotaSharePool",
        "GovernanceModel",
        "GpuHourLimit",
        "Guardrails",
        "HyperPodEksPool",
        "HyperPodSlurmPool",
        "KubernetesTenancy",
        "LimitPeriod",
        "Preset",
        "PriorityClass",
        "SharingPolicy",
        "SharingStrategy",
        "Team",
    ),
    "model.capacity": (
        "BatchComputeEnvironmentFeed",
        "CapacityBudget",
        "CapacityWindow",
        "EksNodeGroupFeed",
        "HyperPodInstanceGroupFeed",
        "TrainingJobsFeed",
    ),
    "model.policy": ("compile_policy",),
    "model.props": ("PoolGovernanceProps",),
    "model.quota": ("AcceleratorPartition", "ResourceQuota"),
    "core.acknowledgements": ("acknowledge", "acknowledge_wildcard_resources"),
    "organisation.compliance": ("STANDARD_PACKS", "apply_standard_packs"),
    "nag": ("GpuGovernanceChecks", "declare_capacity_controller", "declare_platform_admin"),
    "backends.batch_queue": ("TEAM_TAG",),
    "backends.batch_fair_share.construct": ("FairShareJobQueue", "FairShareJobQueueProps"),
    "backends.batch_quota_share.construct": ("QuotaManagedTrainingQueue", "QuotaManagedTrainingQueueProps"),
    "tenancy": ("TeamTenancy", "submission_role_arn"),
    "backends.hyperpod_eks.construct": ("HyperPodEksGovernance", "HyperPodEksGovernanceProps"),
    "backends.hyperpod_slurm.construct": ("HyperPodSlurmGovernance", "HyperPodSlurmGovernanceProps"),
    "backends.hyperpod_slurm.plan": ("slurm_plan",),
    "controllers.capacity": ("CapacityController",),
    "controllers.reclaim": ("ReclaimController", "ReclaimTarget"),
    "controllers.guard": ("SubmissionGuard",),
    "organisation.guardrails": ("OrganisationGuardrails",),
    "organisation.pipeline": ("GovernancePipelineStack", "GovernanceStage", "PipelineSource"),
    "deployment": (
        "CapacityAccountStack",
        "ConsumerAccountStack",
        "OrganisationGuardrailsStack",
        "TeamStack",
        "build_capacity_account",
        "build_consumer_account",
        "build_reference_app",
        "consumer_stack_name",
        "team_stack_name",
    ),
}
_MODULE_OF = {name: module for module, names in _DEFINED_IN.items() for name in names}

__all__ = [
    "STANDARD_PACKS",
    "TEAM_TAG",
    "UNLIMITED",
    "AcceleratorPartition",
    "Account",
    "BatchComputeEnvironmentFeed",
    "BatchFairSharePool",
    "BatchQuotaSharePool",
    "CapacityAccountStack",
    "CapacityBudget",
    "CapacityController",
    "CapacityWindow",
    "ConsumerAccountStack",
    "EksNodeGroupFeed",
    "FairShareJobQueue",
    "FairShareJobQueueProps",
    "GovernanceError",
    "GovernanceModel",
    "GovernancePipelineStack",
    "GovernanceStage",
    "GpuGovernanceChecks",
    "GpuHourLimit",
    "Guardrails",
    "HyperPodEksGovernance",
    "HyperPodEksGovernanceProps",
    "HyperPodEksPool",
    "HyperPodInstanceGroupFeed",
    "HyperPodSlurmGovernance",
    "HyperPodSlurmGovernanceProps",
    "HyperPodSlurmPool",
    "KubernetesTenancy",
    "LimitPeriod",
    "OrganisationGuardrails",
    "OrganisationGuardrailsStack",
    "PipelineSource",
    "PoolGovernanceProps",
    "Preset",
    "PriorityClass",
    "Problem",
    "QuotaManagedTrainingQueue",
    "QuotaManagedTrainingQueueProps",
    "ReclaimController",
    "ReclaimTarget",
    "ResourceQuota",
    "SharingPolicy",
    "SharingStrategy",
    "SubmissionGuard",
    "Team",
    "TeamStack",
    "TeamTenancy",
    "TrainingJobsFeed",
    "acknowledge",
    "acknowledge_wildcard_resources",
    "apply_standard_packs",
    "build_capacity_account",
    "build_consumer_account",
    "build_reference_app",
    "compile_policy",
    "consumer_stack_name",
    "declare_capacity_controller",
    "declare_platform_admin",
    "load_model",
    "parse_config",
    "slurm_plan",
    "submission_role_arn",
    "team_stack_name",
]

if TYPE_CHECKING:
    from .backends.batch_fair_share.construct import FairShareJobQueue, FairShareJobQueueProps
    from .backends.batch_queue import TEAM_TAG
    from .backends.batch_quota_share.construct import QuotaManagedTrainingQueue, QuotaManagedTrainingQueueProps
    from .backends.hyperpod_eks.construct import HyperPodEksGovernance, HyperPodEksGovernanceProps
    from .backends.hyperpod_slurm.construct import HyperPodSlurmGovernance, HyperPodSlurmGovernanceProps
    from .backends.hyperpod_slurm.plan import slurm_plan
    from .controllers.capacity import CapacityController
    from .controllers.guard import SubmissionGuard
    from .controllers.reclaim import ReclaimController, ReclaimTarget
    from .core.acknowledgements import acknowledge, acknowledge_wildcard_resources
    from .core.errors import GovernanceError, Problem
    from .deployment import (
        CapacityAccountStack,
        ConsumerAccountStack,
        OrganisationGuardrailsStack,
        TeamStack,
        build_capacity_account,
        build_consumer_account,
        build_reference_app,
        consumer_stack_name,
        team_stack_name,
    )
    from .model import (
        UNLIMITED,
        Account,
        BatchFairSharePool,
        BatchQuotaSharePool,
        GovernanceModel,
        GpuHourLimit,
        Guardrails,
        HyperPodEksPool,
        HyperPodSlurmPool,
        KubernetesTenancy,
        LimitPeriod,
        Preset,
        PriorityClass,
        SharingPolicy,
        SharingStrategy,
        Team,
    )
    from .model.capacity import (
        BatchComputeEnvironmentFeed,
        CapacityBudget,
        CapacityWindow,
        EksNodeGroupFeed,
        HyperPodInstanceGroupFeed,
        TrainingJobsFeed,
    )
    from .model.loader import load_model, parse_config
    from .model.policy import compile_policy
    from .model.props import PoolGovernanceProps
    from .model.quota import AcceleratorPartition, ResourceQuota
    from .nag import GpuGovernanceChecks, declare_capacity_controller, declare_platform_admin
    from .organisation.compliance import STANDARD_PACKS, apply_standard_packs
    from .organisation.guardrails import OrganisationGuardrails
    from .organisation.pipeline import GovernancePipelineStack, GovernanceStage, PipelineSource
    from .tenancy import TeamTenancy, submission_role_arn


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
