"""SageMaker Unified Studio projects from the model's ``projects``: per project, the Unified
Studio project (or an existing one by id), a domain unit and policy grants where declared, the
memberships of its owner and members, and a connection to each HyperPod cluster its teams use.

Projects are a collaboration boundary, not a security boundary. This construct creates no IAM
role, policy, key grant or EKS access entry, and gives the project no execution role: a member
sees the project and its clusters in Unified Studio and acts on them only through a team role
(docs/unified-studio.md). Deploy it in the account and region of the Unified Studio domain, or of
an account associated with it.
"""

from __future__ import annotations

from aws_cdk import aws_datazone as datazone
from constructs import Construct

from constructs_lib.core.acknowledgements import acknowledge
from constructs_lib.model import DomainUnitGrantPolicy, GovernanceModel, Project

_GRANT = datazone.CfnPolicyGrant
_GRANT_DETAIL = {
    DomainUnitGrantPolicy.ADD_TO_PROJECT_MEMBER_POOL: (
        "add_to_project_member_pool",
        _GRANT.AddToProjectMemberPoolPolicyGrantDetailProperty,
    ),
    DomainUnitGrantPolicy.CREATE_PROJECT: ("create_project", _GRANT.CreateProjectPolicyGrantDetailProperty),
    DomainUnitGrantPolicy.OVERRIDE_PROJECT_OWNERS: (
        "override_project_owners",
        _GRANT.OverrideProjectOwnersPolicyGrantDetailProperty,
    ),
}
"""Each grantable policy's PolicyGrantDetail member and its struct."""


def _principal_id(arn: str) -> str:
    """A construct id naming the principal, not its position: removing one member leaves the
    others' logical ids (and so their memberships) as they are."""
    return arn.split(":", 4)[4].replace("/", "-")


class UnifiedStudioProjects(Construct):
    """Every project of ``model`` that declares ``unified_studio``; ``projects`` maps a project's
    name to its project id (a token for the projects created here)."""

    def __init__(self, scope: Construct, id: str, *, model: GovernanceModel) -> None:
        super().__init__(scope, id)
        self.projects: dict[str, str] = {}
        self.connections: dict[str, list[datazone.CfnConnection]] = {}
        for project in model.projects:
            if project.unified_studio is not None:
                self._project(model, project)

    def _project(self, model: GovernanceModel, project: Project) -> None:
        studio = project.unified_studio
        domain = studio.domain_id
        scope = Construct(self, f"Project{project.name}")
        unit_id = studio.domain_unit_id
        if studio.domain_unit is not None:
            unit = datazone.CfnDomainUnit(
                scope,
                "DomainUnit",
                domain_identifier=domain,
                name=studio.domain_unit.name,
                parent_domain_unit_identifier=studio.domain_unit.parent_domain_unit_id,
                description=f"GPU governance project {project.name} of {model.organisation}",
            )
            unit_id = unit.attr_id
        for grant in studio.policy_grants:
            member, detail = _GRANT_DETAIL[grant.policy]
            _GRANT(
                scope,
                f"Grant{grant.policy.value}{_principal_id(grant.principal)}",
                domain_identifier=domain,
                entity_type="DOMAIN_UNIT",
                entity_identifier=unit_id,
                policy_type=grant.policy.value.upper(),
                principal=_GRANT.PolicyGrantPrincipalProperty(
                    user=_GRANT.UserPolicyGrantPrincipalProperty(user_identifier=grant.principal)
                ),
                detail=_GRANT.PolicyGrantDetailProperty(
                    **{member: detail(include_child_domain_units=grant.include_child_domain_units)}
                ),
            )
        if studio.project_id is not None:
            project_id = studio.project_id
        else:
            # No ProjectExecutionRole: the library never hands a role to every member at once.
            created = datazone.CfnProject(
                scope,
                "Project",
                domain_identifier=domain,
                name=project.name,
                domain_unit_id=unit_id,
                project_profile_id=studio.project_profile_id,
                description=f"Teams {', '.join(project.teams)} of {model.organisation}; access comes from team roles only",
            )
            project_id = created.attr_id
        self.projects[project.name] = project_id
        for principal, designation in project.designations().items():
            # Not the project's MembershipAssignments: that property is create-only, so a new
            # member would replace the project.
            membership = datazone.CfnProjectMembership(
                scope,
                f"Member{_principal_id(principal)}",
                domain_identifier=domain,
                project_identifier=project_id,
                designation=designation,
                member=datazone.CfnProjectMembership.MemberProperty(user_identifier=principal),
            )
            acknowledge(
                membership,
                "The AWS::DataZone::ProjectMembership schema names only the domain and the project as its primary "
                "identifier, yet a project has one membership per member (CreateProjectMembership takes the member).",
                "CloudFormation-Validate::E3019",
            )
        self.connections[project.name] = [
            datazone.CfnConnection(
                scope,
                f"Connection{pool.name}",
                domain_identifier=domain,
                project_identifier=project_id,
                name=pool.cluster_name,
                description=f"HyperPod cluster of pool {pool.name}: use it through your team's role",
                props=datazone.CfnConnection.ConnectionPropertiesInputProperty(
                    hyper_pod_properties=datazone.CfnConnection.HyperPodPropertiesInputProperty(
                        cluster_name=pool.cluster_name
                    )
                ),
            )
            for pool in model.hyperpod_pools_of(project)
        ]
