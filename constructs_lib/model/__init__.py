"""The governance model: one declaration of the organisation, used by the file loader, the
constructs' typed props, the compiled controller policy and the CLI. Pure Python: nothing here
imports aws_cdk.

Modules, bottom up (each imports only those before it):

- ``base``: names, identifiers, limits, the frozen base class and its error reporting, the
  names of the roles the library creates; ``quota`` (a team's quota entry and its one translation
  into whole instances), ``pools`` (what every backend's pool class builds on), ``instance_types``;
- ``capacity``: capacity windows; ``teams``: sharing, presets, teams and their accounts;
- ``guardrails``, ``projects`` (projects and groups of teams, and their checks), ``pool_checks``
  (a pool's teams against its backend), ``principals`` (who acts for a team, checked);
- ``organisation``: ``GovernanceModel``, the union of the backends' pool classes and
  ``check_organisation``, which runs every check;
- ``loader`` (files to a model), ``policy`` (a model to the controllers' policy document) and
  ``props`` (``PoolGovernanceProps``, the fields every pool construct's props start with).

Each name loads on first use (PEP 562), as the package root's: a backend's pool class
(``constructs_lib/backends/<name>/pool.py``) imports ``model.base``, and the model's ``Pool``
imports the backends' pool classes. ``constructs_lib.model.<PoolClass>`` is each backend's
pool class, from the registry.
"""

from typing import TYPE_CHECKING

from constructs_lib.core.lazy import lazy_exports

if TYPE_CHECKING:
    from .base import (
        BATCH_TRAINING_JOB_PREFIX,
        DEFAULT_BOOTSTRAP_QUALIFIER,
        EMAIL_PATTERN,
        HYPERPOD_TEAM_NAME,
        MAX_BORROW_LIMIT,
        MAX_HYPERPOD_BORROW_LIMIT,
        MAX_PRIORITY_CLASSES,
        POD_ROLE_SUFFIX,
        PRINCIPAL_ARN,
        ROLE_PATH,
        SAGEMAKER_NAME_PATTERN,
        SNS_TOPIC_ARN_PATTERN,
        SUBMISSION_ROLE_SUFFIX,
        TEAM_NAME_MAX,
        TRAINING_ROLE_SUFFIX,
        UNLIMITED,
        AccountId,
        AlertTarget,
        BootstrapQualifier,
        ComputeEnvironmentArn,
        CostCentre,
        Count,
        DnsLabel,
        Ec2InstanceType,
        EksClusterName,
        EmailAddress,
        HyperPodClusterArn,
        HyperPodClusterName,
        InstanceGroupName,
        OrganizationId,
        PermissionSetName,
        PrincipalArn,
        QueueName,
        Region,
        SageMakerInstanceType,
        TeamName,
        UsdAmount,
        account_of,
        aws_partition,
        governance_error_from,
        identity_center_role_patterns,
        is_arn_pattern,
        library_role,
        project_role,
        repository_name,
        scopes_overlap,
        secrets_prefix,
        submission_policy_name,
        team_key_alias,
        team_name_scopes,
        team_role_arn,
        training_job_name_patterns,
    )
    from .guardrails import (
        EcrRepositoryArn,
        ExemptPrincipalArn,
        Guardrails,
        OrganisationTargetId,
        TagEnforcedFor,
    )
    from .organisation import (
        AnyPool,
        GovernanceModel,
        Pool,
        check_alert_topics,
        check_organisation,
    )
    from .pool_checks import (
        check_pool_teams,
    )
    from .pools import (
        FairShare,
        ReclaimSettings,
    )
    from .principals import (
        check_exemptions,
        check_principals,
    )
    from .projects import (
        PROJECT_CONTRIBUTOR,
        PROJECT_OWNER,
        DataZoneDomainId,
        DataZoneDomainUnitId,
        DataZoneId,
        DomainUnitGrant,
        DomainUnitGrantPolicy,
        DomainUnitName,
        NewDomainUnit,
        Project,
        ProjectName,
        TeamGroup,
        UnifiedStudio,
        check_groups,
        check_projects,
    )
    from .teams import (
        PRESET_SHARING,
        Account,
        GpuHourLimit,
        KubernetesTenancy,
        LimitPeriod,
        PermissionSetMember,
        PodSecurityLevel,
        Preset,
        PriorityClass,
        SharingPolicy,
        SharingStrategy,
        Team,
        members_in_account,
    )

_DEFINED_IN = {
    "base": (
        "BATCH_TRAINING_JOB_PREFIX",
        "DEFAULT_BOOTSTRAP_QUALIFIER",
        "EMAIL_PATTERN",
        "HYPERPOD_TEAM_NAME",
        "MAX_BORROW_LIMIT",
        "MAX_HYPERPOD_BORROW_LIMIT",
        "MAX_PRIORITY_CLASSES",
        "POD_ROLE_SUFFIX",
        "PRINCIPAL_ARN",
        "ROLE_PATH",
        "SAGEMAKER_NAME_PATTERN",
        "SNS_TOPIC_ARN_PATTERN",
        "SUBMISSION_ROLE_SUFFIX",
        "TEAM_NAME_MAX",
        "TRAINING_ROLE_SUFFIX",
        "UNLIMITED",
        "AccountId",
        "AlertTarget",
        "BootstrapQualifier",
        "ComputeEnvironmentArn",
        "CostCentre",
        "Count",
        "DnsLabel",
        "Ec2InstanceType",
        "EksClusterName",
        "EmailAddress",
        "HyperPodClusterArn",
        "HyperPodClusterName",
        "InstanceGroupName",
        "OrganizationId",
        "PermissionSetName",
        "PrincipalArn",
        "QueueName",
        "Region",
        "SageMakerInstanceType",
        "TeamName",
        "UsdAmount",
        "account_of",
        "aws_partition",
        "governance_error_from",
        "identity_center_role_patterns",
        "is_arn_pattern",
        "library_role",
        "project_role",
        "repository_name",
        "scopes_overlap",
        "secrets_prefix",
        "submission_policy_name",
        "team_key_alias",
        "team_name_scopes",
        "team_role_arn",
        "training_job_name_patterns",
    ),
    "teams": (
        "PRESET_SHARING",
        "Account",
        "GpuHourLimit",
        "KubernetesTenancy",
        "LimitPeriod",
        "PermissionSetMember",
        "PodSecurityLevel",
        "Preset",
        "PriorityClass",
        "SharingPolicy",
        "Team",
        "members_in_account",
        "SharingStrategy",
    ),
    "organisation": (
        "AnyPool",
        "GovernanceModel",
        "Pool",
        "check_alert_topics",
        "check_organisation",
    ),
    "projects": (
        "DataZoneDomainId",
        "DataZoneDomainUnitId",
        "DataZoneId",
        "DomainUnitGrant",
        "DomainUnitGrantPolicy",
        "DomainUnitName",
        "NewDomainUnit",
        "Project",
        "ProjectName",
        "TeamGroup",
        "UnifiedStudio",
        "check_groups",
        "check_projects",
        "PROJECT_CONTRIBUTOR",
        "PROJECT_OWNER",
    ),
    "guardrails": (
        "EcrRepositoryArn",
        "ExemptPrincipalArn",
        "Guardrails",
        "OrganisationTargetId",
        "TagEnforcedFor",
    ),
    "principals": (
        "check_exemptions",
        "check_principals",
    ),
    "pool_checks": ("check_pool_teams",),
    "pools": ("FairShare", "ReclaimSettings"),
}


def _pool_classes() -> dict[str, str]:
    from constructs_lib.backends import BACKENDS

    return {backend.pool.__name__: backend.pool.__module__ for backend in BACKENDS.values()}


__getattr__, __dir__ = lazy_exports(
    __name__, {name: module for module, names in _DEFINED_IN.items() for name in names}, _pool_classes
)
