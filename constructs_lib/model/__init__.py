"""The governance model: one declaration of the organisation, used by the file loader, the
constructs' typed props, the compiled controller policy and the CLI. Pure Python: nothing here
imports aws_cdk.

Modules, bottom up (each imports only those before it):

- ``base``: names, identifiers, limits, the frozen base class and its error reporting, the
  names of the roles the library creates;
- ``capacity``: capacity windows; ``slurm``: what a ``hyperpod_slurm`` pool means in Slurm
  (names, ids, the plan) and what Slurm would refuse;
- ``organisation``: sharing, teams, pools, guardrails, ``GovernanceModel`` and its checks;
- ``loader`` (files to a model) and ``policy`` (a model to the controllers' policy document).
"""

from gpu_governance_runtime.contract import SharingStrategy

from .base import (
    DEFAULT_BOOTSTRAP_QUALIFIER, HYPERPOD_TEAM_NAME, MAX_BORROW_LIMIT, MAX_HYPERPOD_BORROW_LIMIT,
    MAX_HYPERPOD_QUOTA_RESOURCES, MAX_LIMITS_PER_QUOTA_SHARE, MAX_PRIORITY_CLASSES, MAX_SHARES_PER_QUOTA_QUEUE,
    POD_ROLE_SUFFIX, ROLE_PATH, SAGEMAKER_NAME_PATTERN, SUBMISSION_ROLE_SUFFIX, TEAM_NAME_MAX, TRAINING_ROLE_SUFFIX,
    UNLIMITED, AccountId, BootstrapQualifier, ComputeEnvironmentArn, Count, DnsLabel, Ec2InstanceType, EksClusterName,
    HyperPodClusterArn, HyperPodClusterName, InstanceGroupName, OrganizationId, PrincipalArn, QueueName, Region,
    SageMakerInstanceType, TeamName, account_of, governance_error_from, library_role,
)
from .organisation import (
    PRESET_SHARING, Account, AnyPool, BatchFairSharePool, BatchQuotaSharePool, ExemptPrincipalArn, GovernanceModel,
    Guardrails, HyperPodEksPool, HyperPodSlurmPool, KubernetesTenancy, OrganisationTargetId, PodSecurityLevel, Pool,
    Preset, PriorityClass, SharingPolicy, TagEnforcedFor, Team, check_exemptions, check_organisation,
    check_pool_teams, check_principals,
)

__all__ = [
    "DEFAULT_BOOTSTRAP_QUALIFIER", "HYPERPOD_TEAM_NAME", "MAX_BORROW_LIMIT", "MAX_HYPERPOD_BORROW_LIMIT",
    "MAX_HYPERPOD_QUOTA_RESOURCES", "MAX_LIMITS_PER_QUOTA_SHARE", "MAX_PRIORITY_CLASSES", "MAX_SHARES_PER_QUOTA_QUEUE",
    "POD_ROLE_SUFFIX", "PRESET_SHARING", "ROLE_PATH", "SAGEMAKER_NAME_PATTERN", "SUBMISSION_ROLE_SUFFIX",
    "TEAM_NAME_MAX", "TRAINING_ROLE_SUFFIX", "UNLIMITED", "Account", "AccountId", "AnyPool", "BatchFairSharePool",
    "BatchQuotaSharePool", "BootstrapQualifier", "ComputeEnvironmentArn", "Count", "DnsLabel", "Ec2InstanceType",
    "EksClusterName", "ExemptPrincipalArn", "GovernanceModel", "Guardrails", "HyperPodClusterArn",
    "HyperPodClusterName", "HyperPodEksPool", "HyperPodSlurmPool", "InstanceGroupName", "KubernetesTenancy",
    "OrganisationTargetId", "OrganizationId", "PodSecurityLevel", "Pool", "Preset", "PrincipalArn", "PriorityClass",
    "QueueName", "Region", "SageMakerInstanceType", "SharingPolicy", "SharingStrategy", "TagEnforcedFor", "Team",
    "TeamName", "account_of", "check_exemptions", "check_organisation", "check_pool_teams", "check_principals",
    "governance_error_from", "library_role",
]
