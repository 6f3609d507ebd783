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
# checks that it, __all__ and the TYPE_CHECKING imports below agree); each backend's public names
# (its constructs and their props, its pool class) come from its descriptor, on first use.
_DEFINED_IN = {
    "core.errors": ("GovernanceError", "Problem"),
    "model.loader": ("load_model", "parse_config"),
    "model": (
        "UNLIMITED",
        "Account",
        "GovernanceModel",
        "GpuHourLimit",
        "Guardrails",
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
    "tenancy": ("TeamTenancy", "submission_role_arn"),
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

if TYPE_CHECKING:
    from .backends.batch_queue import TEAM_TAG
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
        GovernanceModel,
        GpuHourLimit,
        Guardrails,
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


def _backend_exports() -> dict[str, str]:
    """Each backend's public names (its descriptor's ``exports``), with the modules that define them."""
    from .backends import BACKENDS

    return {
        name: f"{backend.package}.{module}"
        for backend in BACKENDS.values()
        for module, names in backend.exports.items()
        for name in names
    }


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF, _backend_exports)
