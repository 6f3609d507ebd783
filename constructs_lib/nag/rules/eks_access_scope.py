from __future__ import annotations

from aws_cdk import CfnResource
from cdk_nag import NagRuleCompliance

from ..cfn import PLATFORM_ADMIN, StackIndex, as_list, governance_metadata, properties, text
from ..rule import GovernanceRule, Result

_CLUSTER_ADMIN_POLICIES = ("AmazonEKSClusterAdminPolicy", "AmazonEKSAdminPolicy")
_CLUSTER_ADMIN_GROUPS = ("system:masters",)


def _check(node: CfnResource, index: StackIndex) -> Result:
    props = properties(node)
    if props.get("Type", "STANDARD") != "STANDARD" or governance_metadata(node).get(PLATFORM_ADMIN):
        return NagRuleCompliance.NOT_APPLICABLE  # node roles, or a declared platform admin
    findings = []
    for policy in as_list(props.get("AccessPolicies")):
        name = text(policy.get("PolicyArn")).rsplit("/", 1)[-1]
        if name in _CLUSTER_ADMIN_POLICIES:
            findings.append(f"Policy::{name}")
        if (policy.get("AccessScope") or {}).get("Type") == "cluster":
            findings.append(f"Scope::cluster:{name}")
    findings += [f"Group::{g}" for g in map(text, as_list(props.get("KubernetesGroups"))) if g in _CLUSTER_ADMIN_GROUPS]
    return findings


RULE = GovernanceRule(
    id="EksAccessScope",
    info="The EKS access entry gives a non-admin principal cluster-wide scope or cluster-admin rights.",
    explanation=(
        "On a shared HyperPod EKS cluster a team's role must be scoped to its own namespaces "
        "(hyperpod-ns-<team>); cluster-wide scope or an admin policy lets it read other teams' jobs "
        "and secrets, change Kueue quotas or delete other teams' workloads. Scope the entry to "
        "namespaces, or declare a platform administrator's entry with declare_platform_admin()."
    ),
    resource_types=frozenset({"AWS::EKS::AccessEntry"}),
    check=_check,
)
