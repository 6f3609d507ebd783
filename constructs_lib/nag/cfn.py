"""Reading synthesized CloudFormation from any CDK app (L1 or L2, this library's or not), and
the declarations a rule cannot infer from properties alone.

Rules see resources as CloudFormation: properties rendered and resolved, so a hand-written
``CfnPolicy`` and an L2 ``iam.Policy`` look the same. Raw overrides (``add_property_override``)
are applied after validation and are not seen, exactly as with cdk-nag's own rules.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnResource, Stack, TagManager
from constructs import IConstruct

from constructs_lib.core.acknowledgements import cfn_text as text  # noqa: F401  rules render values as findings name them
from constructs_lib.core.vocabulary import GOVERNANCE_METADATA
from gpu_governance_runtime.contract import TAG_TEAM

CAPACITY_CONTROLLER = "capacityController"
"""Declared on an IAM role that may buy capacity (Capacity Blocks, training plans)."""
PLATFORM_ADMIN = "platformAdmin"
"""Declared on an EKS access entry whose principal administers the platform."""


def _cfn(construct: IConstruct) -> CfnResource:
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path} is not a CloudFormation resource and has none as its default child")
    return resource


def declare(construct: IConstruct, flag: str) -> None:
    """Record ``flag: true`` in the resource's ``GpuGovernance`` metadata, keeping what the
    library's constructs already recorded there (team, preset)."""
    resource = _cfn(construct)
    recorded = resource.get_metadata(GOVERNANCE_METADATA) or {}
    resource.add_metadata(GOVERNANCE_METADATA, {**recorded, flag: True})


def declare_capacity_controller(role: IConstruct) -> None:
    """Declare the IAM role (L2 ``iam.Role`` or ``CfnRole``) of a capacity controller: the only
    kind of role ``GpuGovernance-CapacityPurchaseGrant`` lets buy capacity."""
    declare(role, CAPACITY_CONTROLLER)


def declare_platform_admin(access_entry: IConstruct) -> None:
    """Declare an EKS access entry whose principal is a platform administrator: the only kind
    ``GpuGovernance-EksAccessScope`` lets hold cluster-wide or cluster-admin access."""
    declare(access_entry, PLATFORM_ADMIN)


def governance_metadata(node: CfnResource) -> dict[str, Any]:
    return node.get_metadata(GOVERNANCE_METADATA) or {}


def team_of(node: CfnResource) -> str | None:
    """The team a resource belongs to: the team this library's constructs recorded on it, else its
    ``gpu-governance:team`` tag (the cost allocation tag the constructs set, and the way to mark a
    hand-written resource as a team's). None: not a team's resource."""
    recorded = governance_metadata(node).get("team")
    if recorded:
        return recorded
    if not TagManager.is_taggable(node):
        return None
    value = node.tags.tag_values().get(TAG_TEAM)
    return text(stack_of(node).resolve(value)) if value is not None else None


def aws_managed_policies(node: CfnResource) -> list[str]:
    """The names of the AWS-managed policies a role, user or group attaches (``ManagedPolicyArns``)."""
    arns = [text(arn) for arn in as_list(properties(node).get("ManagedPolicyArns"))]
    return [arn.rsplit("/", 1)[-1] for arn in arns if ":iam::aws:policy/" in arn]


_memo: dict[tuple[str, str], Any] | None = None


@contextmanager
def one_resource_check() -> Iterator[None]:
    """While one resource's rules run (``GpuGovernanceChecks._check_resource``), each resource's
    properties and identity policy are resolved once and shared by the rules: resolving is a
    round of jsii calls, and several rules read the same policy. Outside, every call resolves
    afresh, so a later aspect's change (tags, say) is seen by the next check. Callers must not
    mutate what they get."""
    global _memo
    _memo = {}
    try:
        yield
    finally:
        _memo = None


def _once(what: str, node: CfnResource, compute: Callable[[], Any]) -> Any:
    if _memo is None:
        return compute()
    key = (what, node.__jsii_ref__.ref)  # the jsii object's id: no round trip
    if key not in _memo:
        _memo[key] = compute()
    return _memo[key]


_TYPE_OF_CLASS: dict[type, str | None] = {}


def cfn_type(node: CfnResource) -> str:
    """The resource's CloudFormation type: an L1 class names its one type (read across jsii once
    per class); a generic ``CfnResource`` is asked, once per check."""
    cls = type(node)
    if cls not in _TYPE_OF_CLASS:
        _TYPE_OF_CLASS[cls] = getattr(cls, "CFN_RESOURCE_TYPE_NAME", None)
    return _TYPE_OF_CLASS[cls] or _once("type", node, lambda: node.cfn_resource_type)


def stack_of(node: CfnResource) -> Stack:
    """The resource's stack, looked up across jsii once per check."""
    return _once("stack", node, lambda: Stack.of(node))


def properties(node: CfnResource) -> dict[str, Any]:
    """The resource's CloudFormation properties, tokens resolved to intrinsics.

    Resolved first, then rendered, as CDK itself does: an L2 may hold a property as a lazy value
    (the compute environments of ``aws_batch.JobQueue``) that only resolves to plain data."""
    return _once(
        "properties", node, lambda: node._render_properties(stack_of(node).resolve(node._cfn_properties)) or {}
    )


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def referenced_logical_id(value: Any) -> str | None:
    """The logical id a ``Ref`` or ``Fn::GetAtt`` points at, if it is one."""
    if isinstance(value, dict) and "Ref" in value:
        return value["Ref"]
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        return target[0] if isinstance(target, list) else target.split(".")[0]
    return None


# --- IAM ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Statement:
    """One Allow statement of an identity policy, as rendered strings."""

    actions: tuple[str, ...]
    not_actions: tuple[str, ...]
    resources: tuple[str, ...]
    conditions: dict[str, Any]

    def allows(self, action: str) -> bool:
        """IAM matches actions case-insensitively with ``*`` and ``?`` wildcards."""
        matches = lambda patterns: any(fnmatch.fnmatch(action.lower(), p.lower()) for p in patterns)  # noqa: E731
        return not matches(self.not_actions) if self.not_actions else matches(self.actions)

    def condition_keys(self) -> set[str]:
        return {key.lower() for block in self.conditions.values() if isinstance(block, dict) for key in block}


@dataclass(frozen=True, kw_only=True)
class IdentityPolicy:
    """Allow statements of an identity policy and whom it is attached to: roles by logical id
    (``Ref``) or by name (imported), and whether users or groups get it too."""

    statements: tuple[Statement, ...]
    role_ids: tuple[str, ...]
    role_names: tuple[str, ...]
    users_or_groups: tuple[str, ...]


_POLICY_TYPES = {
    "AWS::IAM::Policy",
    "AWS::IAM::ManagedPolicy",
    "AWS::IAM::RolePolicy",
    "AWS::IAM::UserPolicy",
    "AWS::IAM::GroupPolicy",
}
_INLINE_OWNERS = {"AWS::IAM::Role", "AWS::IAM::User", "AWS::IAM::Group"}
IDENTITY_POLICY_TYPES = frozenset(_POLICY_TYPES | _INLINE_OWNERS)
"""Resource types that carry identity policies (see :func:`identity_policy`)."""


def identity_policy(node: CfnResource) -> IdentityPolicy:
    """The identity policy a resource of ``IDENTITY_POLICY_TYPES`` defines (policy resources,
    or the inline policies of a role, user or group)."""
    return _once("identity_policy", node, lambda: _identity_policy(node))


def _identity_policy(node: CfnResource) -> IdentityPolicy:
    kind = cfn_type(node)
    props = properties(node)
    if kind in _POLICY_TYPES:
        documents = [props.get("PolicyDocument")]
        roles = as_list(props.get("Roles")) + as_list(props.get("RoleName"))
        others = (
            as_list(props.get("Users"))
            + as_list(props.get("Groups"))
            + as_list(props.get("UserName"))
            + as_list(props.get("GroupName"))
        )
    else:
        documents = [policy.get("PolicyDocument") for policy in as_list(props.get("Policies"))]
        own = {"Ref": stack_of(node).resolve(node.logical_id)}
        roles, others = ([own], []) if kind == "AWS::IAM::Role" else ([], [own])
    return IdentityPolicy(
        statements=tuple(s for document in documents for s in _allow_statements(document)),
        role_ids=tuple(i for i in map(referenced_logical_id, roles) if i),
        role_names=tuple(text(r) for r in roles if referenced_logical_id(r) is None),
        users_or_groups=tuple(text(o) for o in others),
    )


def _allow_statements(document: Any) -> Iterator[Statement]:
    if not isinstance(document, dict):
        return
    for statement in as_list(document.get("Statement")):
        if not isinstance(statement, dict) or statement.get("Effect") != "Allow":
            continue
        yield Statement(
            actions=tuple(text(a) for a in as_list(statement.get("Action"))),
            not_actions=tuple(text(a) for a in as_list(statement.get("NotAction"))),
            # NotResource allows everything but what it names: treat it as every resource.
            resources=("*",)
            if "NotResource" in statement
            else tuple(text(r) for r in as_list(statement.get("Resource"))),
            conditions=statement.get("Condition") or {},
        )


def allowed(statements: Iterable[Statement], actions: Iterable[str]) -> list[str]:
    """Which of ``actions`` any of the statements allows, in the order given."""
    statements = list(statements)
    return [action for action in actions if any(s.allows(action) for s in statements)]


# --- resources of the same stack ------------------------------------------------------------


class StackIndex:
    """Resources of each stack by logical id, so a rule can follow a ``Ref`` from a policy to
    its role or from a function to its role. Built once per stack and rebuilt when a lookup
    misses (resources added after an earlier validation)."""

    def __init__(self) -> None:
        self._by_stack: dict[str, dict[str, CfnResource]] = {}

    def _index(self, node: CfnResource, refresh: bool) -> dict[str, CfnResource]:
        stack = stack_of(node)
        path = _once("stack path", node, lambda: stack.node.path)
        if refresh or path not in self._by_stack:
            self._by_stack[path] = {
                stack.resolve(child.logical_id): child
                for child in stack.node.find_all()
                if isinstance(child, CfnResource) and Stack.of(child).node.path == path
            }
        return self._by_stack[path]

    def resource(self, node: CfnResource, logical_id: str) -> CfnResource | None:
        """The resource with ``logical_id`` in ``node``'s stack."""
        found = self._index(node, refresh=False).get(logical_id)
        return found if found is not None else self._index(node, refresh=True).get(logical_id)

    def resources(self, node: CfnResource) -> Iterable[CfnResource]:
        """Every resource of ``node``'s stack."""
        return self._index(node, refresh=False).values()

    def is_declared(self, node: CfnResource, logical_id: str, flag: str) -> bool:
        target = self.resource(node, logical_id)
        return target is not None and bool(governance_metadata(target).get(flag))
