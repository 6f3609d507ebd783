"""The constructs side of discovery: each team's discovery document (``discovery.describe``) as an
SSM parameter per pool, and the team's bucket and parameter path as stack outputs."""

from __future__ import annotations

import json

from aws_cdk import CfnOutput, aws_ssm as ssm

from constructs_lib.model import GovernanceModel
from constructs_lib.tenancy import TeamTenancy
from gpu_governance_runtime.contract import discovery_parameter_name, discovery_parameter_path

from .discovery import describe


def publish_discovery(tenancy: TeamTenancy, model: GovernanceModel) -> dict[str, ssm.StringParameter]:
    """One discovery parameter per pool the team has a quota in (constructs_lib.member.discovery),
    readable by the team's roles (the data policy), and the two values only a deployment
    knows as outputs, all in ``tenancy``'s scope (the team's stack with ``per_team``).
    Pool name -> parameter."""
    parameters = {}
    for pool in (p for p in model.pools if p.name in tenancy.team.quotas):
        document = describe(
            model, tenancy.team.name, pool.name, bucket=tenancy.bucket.bucket_name, kms_key_arn=tenancy.key.key_arn
        )
        parameters[pool.name] = ssm.StringParameter(
            tenancy,
            f"Discovery{pool.name}",
            parameter_name=discovery_parameter_name(model.organisation, tenancy.team.name, pool.name),
            # json.dumps, not Stack.to_json_string, which drops the None of an absent borrow QoS;
            # the bucket name and key ARN stay tokens inside the text.
            string_value=json.dumps(document, separators=(",", ":")),
            description=f"Where team {tenancy.team.name} finds its capacity in pool {pool.name} (JSON)",
            tier=ssm.ParameterTier.STANDARD,
        )
    CfnOutput(
        tenancy, "BucketName", value=tenancy.bucket.bucket_name, description=f"Bucket of team {tenancy.team.name}"
    )
    CfnOutput(
        tenancy,
        "DiscoveryPath",
        value=discovery_parameter_path(model.organisation, tenancy.team.name),
        description=f"SSM path of the discovery parameters of team {tenancy.team.name}, one per pool",
    )
    return parameters
