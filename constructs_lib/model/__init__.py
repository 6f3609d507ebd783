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
    DEFAULT_BOOTSTRAP_QUALIFIER, EMAIL_PATTERN, HYPERPOD_TEAM_NAME, MAX_BORROW_LIMIT, MAX_HYPERPOD_BORROW_LIMIT,
    MAX_HYPERPOD_QUOTA_RESOURCES, MAX_LIMITS_PER_QUOTA_SHARE, MAX_PRIORITY_CLASSES, MAX_SHARES_PER_FAIR_SHARE_QUEUE, MAX_SHARES_PER_QUOTA_QUEUE,
    POD_ROLE_SUFFIX, ROLE_PATH, SAGEMAKER_NAME_PATTERN, SNS_TOPIC_ARN_PATTERN, SUBMISSION_ROLE_SUFFIX,
    TEAM_NAME_MAX, TRAINING_ROLE_SUFFIX, UNLIMITED, AccountId, AlertTarget, BootstrapQualifier,
    ComputeEnvironmentArn, CostCentre, Count, DnsLabel, Ec2InstanceType, EksClusterName, EmailAddress,
    HyperPodClusterArn, HyperPodClusterName, InstanceGroupName, OrganizationId, PrincipalArn, QueueName, Region,
    SageMakerInstanceType, TeamName, UsdAmount, account_of, governance_error_from, library_role, project_role, repository_name,
    secrets_prefix, team_key_alias, team_role_arn, aws_partition, identity_center_role_patterns, is_arn_pattern,
    submission_policy_name, PermissionSetName,
    BATCH_TRAINING_JOB_PREFIX, scopes_overlap, team_name_scopes, training_job_name_patterns,
)
from .organisation import (
    PRESET_SHARING, PROJECT_CONTRIBUTOR, PROJECT_OWNER, Account, AnyPool, BatchFairSharePool, BatchQuotaSharePool,
    DataZoneDomainId, DataZoneDomainUnitId, DataZoneId, DomainUnitGrant, DomainUnitGrantPolicy, DomainUnitName,
    EcrRepositoryArn, ExemptPrincipalArn, GovernanceModel, Guardrails, HyperPodEksPool, HyperPodSlurmPool,
    KubernetesTenancy, NewDomainUnit, OrganisationTargetId, PodSecurityLevel, Pool, Preset, PriorityClass, Project,
    ProjectName, PermissionSetMember, SlurmHeadNode, ReclaimSettings, SharingPolicy, TagEnforcedFor, Team, TeamGroup, UnifiedStudio, check_alert_topics, check_exemptions,
    check_groups, check_organisation, check_pool_teams, check_principals, check_projects, members_in_account,
)

__all__ = [
    "DEFAULT_BOOTSTRAP_QUALIFIER", "EMAIL_PATTERN", "HYPERPOD_TEAM_NAME", "MAX_BORROW_LIMIT",
    "MAX_HYPERPOD_BORROW_LIMIT", "MAX_HYPERPOD_QUOTA_RESOURCES", "MAX_LIMITS_PER_QUOTA_SHARE",
    "MAX_PRIORITY_CLASSES", "MAX_SHARES_PER_FAIR_SHARE_QUEUE", "MAX_SHARES_PER_QUOTA_QUEUE", "POD_ROLE_SUFFIX", "PRESET_SHARING",
    "PROJECT_CONTRIBUTOR", "PROJECT_OWNER", "ROLE_PATH", "SAGEMAKER_NAME_PATTERN", "SNS_TOPIC_ARN_PATTERN",
    "SUBMISSION_ROLE_SUFFIX", "TEAM_NAME_MAX", "TRAINING_ROLE_SUFFIX", "UNLIMITED", "Account", "AccountId",
    "AlertTarget", "AnyPool", "BatchFairSharePool", "BatchQuotaSharePool", "BootstrapQualifier",
    "ComputeEnvironmentArn", "CostCentre", "Count", "DataZoneDomainId", "DataZoneDomainUnitId", "DataZoneId",
    "DnsLabel", "DomainUnitGrant", "DomainUnitGrantPolicy", "DomainUnitName", "Ec2InstanceType", "EcrRepositoryArn",
    "EksClusterName", "EmailAddress", "ExemptPrincipalArn", "GovernanceModel", "Guardrails", "HyperPodClusterArn",
    "HyperPodClusterName", "HyperPodEksPool", "HyperPodSlurmPool", "InstanceGroupName", "KubernetesTenancy",
    "NewDomainUnit", "OrganisationTargetId", "OrganizationId", "PodSecurityLevel", "Pool", "Preset", "PrincipalArn",
    "PriorityClass", "Project", "ProjectName", "QueueName", "ReclaimSettings", "Region", "SageMakerInstanceType", "SharingPolicy",
    "SharingStrategy", "TagEnforcedFor", "Team", "TeamName", "UnifiedStudio", "UsdAmount", "account_of",
    "check_alert_topics", "check_exemptions", "check_organisation", "check_pool_teams", "check_principals",
    "TeamGroup", "check_groups", "check_projects", "governance_error_from", "library_role", "members_in_account", "project_role", "repository_name",
    "secrets_prefix", "team_key_alias", "team_role_arn", "aws_partition", "identity_center_role_patterns",
    "is_arn_pattern", "submission_policy_name", "PermissionSetName", "PermissionSetMember", "SlurmHeadNode",
    "BATCH_TRAINING_JOB_PREFIX", "scopes_overlap", "team_name_scopes", "training_job_name_patterns",
]
