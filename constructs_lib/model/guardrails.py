"""What the organisation allows beyond its teams: the guardrails it deploys (service control and
tag policies) and the shared image repositories every team may pull from."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from .base import (
    DEFAULT_BOOTSTRAP_QUALIFIER,
    BootstrapQualifier,
    _Frozen,
)
from .teams import Account

# A root, OU or account id (the AWS::Organizations::Policy TargetIds pattern).
OrganisationTargetId = Annotated[
    str, StringConstraints(pattern=r"^(r-[0-9a-z]{4,32}|[0-9]{12}|ou-[0-9a-z]{4,32}-[a-z0-9]{8,32})$")
]
# A role ARN without wildcards, or an IAM Identity Center role whose random suffix is "*". Which
# accounts may hold one (the capacity and management accounts) is checked with the organisation.
ExemptPrincipalArn = Annotated[
    str,
    StringConstraints(
        pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/(aws-reserved/sso\.amazonaws\.com/([a-z0-9-]+/)?"
        r"AWSReservedSSO_[A-Za-z0-9_+=,.@-]{1,32}_(\*|[0-9a-f]{16})|[A-Za-z0-9+=,.@_/-]{1,512})$",
    ),
]
TagEnforcedFor = Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]+:([a-z0-9-]+|ALL_SUPPORTED)$", max_length=128)]


class Guardrails(_Frozen):
    """Organisation guardrails, deployed only when declared: service control policies that leave
    buying capacity and changing quotas to the platform's roles, and a tag policy for the team tag.
    Deployed to the management (or delegated administrator) account; see docs/delivery.md."""

    management_account: Account
    target_ids: tuple[OrganisationTargetId, ...] = Field(
        min_length=1, description="Root, OU or account ids the policies attach to"
    )
    exempt_principals: tuple[ExemptPrincipalArn, ...] = Field(
        default=(),
        description="Further roles (e.g. break-glass) exempt from the service control policy: role ARNs in the capacity or "
        "management account, no wildcards except the random suffix of an IAM Identity Center role",
    )
    cdk_bootstrap_qualifier: BootstrapQualifier = Field(
        default=DEFAULT_BOOTSTRAP_QUALIFIER,
        description="CDK bootstrap qualifier of the capacity account: its CloudFormation execution role may change quotas",
    )
    tag_enforced_for: tuple[TagEnforcedFor, ...] = Field(
        default=(),
        description="Resource types ('service:type' or 'service:ALL_SUPPORTED') where a wrong team tag is refused, not only reported",
    )

    @model_validator(mode="after")
    def _no_duplicate_targets(self) -> Guardrails:
        repeated = sorted({t for t in self.target_ids if self.target_ids.count(t) > 1})
        if repeated:
            raise ValueError(f"target_ids must be unique; repeated: {repeated}")
        return self


# The repository name pattern of the ECR API (2-256 characters), in an ARN without wildcards.
_ECR_REPOSITORY_NAME = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
_ECR_REPOSITORY_ARN = re.compile(
    rf"arn:aws[a-z-]*:ecr:[a-z]{{2}}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]:[0-9]{{12}}:repository/(?P<name>{_ECR_REPOSITORY_NAME})"
)


def _ecr_repository_arn(value: str) -> str:
    found = _ECR_REPOSITORY_ARN.fullmatch(value)
    if not found or not 2 <= len(found.group("name")) <= 256:
        raise ValueError(
            "an ECR repository ARN without wildcards, arn:aws:ecr:<region>:<account id>:repository/<name>; "
            "the name of 2-256 lowercase letters and digits separated by '.', '_', '__', '-' or '/'"
        )
    return value


EcrRepositoryArn = Annotated[str, AfterValidator(_ecr_repository_arn)]
