"""A small IAM policy evaluator for synthesized CloudFormation, tested on its own (test_iam_eval).

No maintained PyPI package fits: principalmapper (last release 2022) simulates a live account's
graph, policy_sentry and parliament write or lint policies, policyuniverse parses without deciding.
This one implements the parts of AWS's evaluation logic the library's policies use:

- statements: Allow / Deny, Action / NotAction, Resource / NotResource, Principal / NotPrincipal,
  ``*`` and ``?`` wildcards, policy variables (``${aws:PrincipalTag/x}``, ``${*}``...);
- conditions: String*, Arn*, Null, Bool, Numeric*, the ``IfExists`` suffix and the
  ``ForAnyValue:`` / ``ForAllValues:`` set prefixes, with AWS's rules for absent keys;
- the decision: an explicit Deny anywhere wins; SCPs must allow (not for service principals);
  in the resource's own account an identity *or* a resource policy naming the principal allows,
  across accounts both must; a resource policy that names an account (``root``) only delegates to
  that account's identity policies; KMS keys require their key policy; a role's trust policy is
  the resource policy of ``sts:AssumeRole``; ``iam:PassRole`` is decided by identity policies.

CloudFormation intrinsics (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split, Fn::If,
Fn::ImportValue against the exports of the assembly's other stacks, and Fn::GetStackOutput, the weak
reference cdk.json asks for, against their outputs) resolve to concrete ARNs
through :class:`Template`, so what is evaluated is what CloudFormation deploys. A value the
evaluator cannot compute never silently matches nothing: it fails the evaluation loudly
(:class:`UnresolvedIntrinsic`) as soon as a request depends on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

PARTITION = "aws"


# --- CloudFormation ----------------------------------------------------------------------------


class UnresolvedIntrinsic(ValueError):
    """A value the evaluator cannot compute: a guess would make a statement silently match nothing."""


# Stands for a Ref / Fn::GetAtt the evaluator does not model (a Lambda function's ARN, a
# parameter). Controllers' policies hold many; only a request that depends on one must fail.
_UNRESOLVED = "<unresolved "


def _unresolved_in(value: Any) -> str | None:
    if isinstance(value, str):
        return value if _UNRESOLVED in value else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((found for found in map(_unresolved_in, items) if found), None)


def unreadable_policy(what: str) -> dict:
    """A policy whose document the assembly does not hold (an AWS managed policy): any request of
    a principal it is attached to fails loudly instead of ignoring what it may grant."""
    return {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": f"{_UNRESOLVED}{what}>"}]}


class Template:
    """One synthesized stack with its account and region; resolves intrinsics to values."""

    def __init__(self, name: str, body: Mapping[str, Any], account: str, region: str) -> None:
        self.name, self.account, self.region = name, account, region
        self.resources: dict[str, dict[str, Any]] = body.get("Resources", {})
        self.conditions: dict[str, Any] = body.get("Conditions", {})
        self.outputs: dict[str, Any] = body.get("Outputs", {})
        self.parameters: dict[str, Any] = body.get("Parameters", {})
        self.exports: dict[str, tuple[Template, Any]] = {}  # export name -> (exporting stack, value); see link_exports
        self.stacks: dict[
            tuple[str, str], Template
        ] = {}  # (stack name, region) -> stack of the same account; see link_exports

    def props(self, logical_id: str) -> dict[str, Any]:
        return self.resources[logical_id].get("Properties", {})

    def of_type(self, *types: str) -> Iterable[tuple[str, dict[str, Any]]]:
        return ((k, self.props(k)) for k, r in self.resources.items() if r["Type"] in types)

    def _pseudo(self, name: str) -> str | None:
        return {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": PARTITION,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.name,
        }.get(name)

    def ref(self, logical_id: str) -> str:
        pseudo = self._pseudo(logical_id)
        if pseudo is not None:
            return pseudo
        if logical_id not in self.resources:
            return self._unknown(logical_id, "Ref")
        kind, props = self.resources[logical_id]["Type"], self.props(logical_id)
        if kind == "AWS::IAM::Role":
            return self.resolve(props.get("RoleName")) or f"{self.name}-{logical_id}"
        if kind == "AWS::IAM::ManagedPolicy":
            return f"arn:{PARTITION}:iam::{self.account}:policy/{self.resolve(props.get('ManagedPolicyName')) or logical_id}"
        if kind == "AWS::S3::Bucket":
            return self.resolve(props.get("BucketName")) or f"{self.name}-{logical_id}".lower()
        if kind == "AWS::KMS::Key":
            return f"{self.name}-{logical_id}".lower()  # a key id is unique, also across stacks
        if kind == "AWS::Batch::JobQueue":
            return self.get_att(logical_id, "JobQueueArn")
        if kind == "AWS::ECR::Repository" and "RepositoryName" in props:
            return self.resolve(props["RepositoryName"])
        return self._unknown(logical_id, "Ref")

    def get_att(self, logical_id: str, attribute: str) -> str:
        if logical_id not in self.resources:
            raise UnresolvedIntrinsic(f"{self.name}: Fn::GetAtt of {logical_id}, which the stack does not define")
        kind, props = self.resources[logical_id]["Type"], self.props(logical_id)
        if kind == "AWS::IAM::Role" and attribute == "Arn":
            path = self.resolve(props.get("Path")) or "/"
            return f"arn:{PARTITION}:iam::{self.account}:role{path}{self.ref(logical_id)}"
        if kind == "AWS::KMS::Key" and attribute == "Arn":
            return f"arn:{PARTITION}:kms:{self.region}:{self.account}:key/{self.ref(logical_id)}"
        if kind == "AWS::S3::Bucket" and attribute == "Arn":
            return f"arn:{PARTITION}:s3:::{self.ref(logical_id)}"
        if kind == "AWS::Batch::JobQueue" and attribute == "JobQueueArn":
            name = self.resolve(props.get("JobQueueName")) or logical_id
            return f"arn:{PARTITION}:batch:{self.region}:{self.account}:job-queue/{name}"
        if kind == "AWS::ECR::Repository" and attribute == "Arn" and "RepositoryName" in props:
            return f"arn:{PARTITION}:ecr:{self.region}:{self.account}:repository/{self.ref(logical_id)}"
        if kind == "AWS::Logs::LogGroup" and attribute == "Arn":
            name = self.resolve(props.get("LogGroupName")) or logical_id
            return f"arn:{PARTITION}:logs:{self.region}:{self.account}:log-group:{name}:*"
        return self._unknown(logical_id, attribute)

    def _unknown(self, logical_id: str, attribute: str) -> str:
        if logical_id not in self.resources and logical_id not in self.parameters:
            raise UnresolvedIntrinsic(f"{self.name}: Ref of {logical_id}, which the stack does not define")
        return f"{_UNRESOLVED}{self.name}:{logical_id}.{attribute}>"

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value if v != {"Ref": "AWS::NoValue"}]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Fn::GetAtt":
                logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.get_att(logical_id, attribute)
            if key == "Fn::Join":
                separator, parts = arg
                return separator.join(str(p) for p in self.resolve(parts))
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items)[int(self.resolve(index))]
            if key == "Fn::Split":
                separator, text = arg
                text = self.resolve(text)
                if _unresolved_in(text):  # the pieces would lose the mark
                    raise UnresolvedIntrinsic(f"{self.name}: Fn::Split of {text}")
                return text.split(separator)
            if key == "Fn::Sub":
                return self._sub(*(arg if isinstance(arg, list) else [arg, {}]))
            if key == "Fn::ImportValue":
                name = self.resolve(arg)
                if name not in self.exports:
                    raise UnresolvedIntrinsic(
                        f"{self.name}: Fn::ImportValue {name}: no stack in {self.account}/{self.region} exports it"
                    )
                exporter, exported = self.exports[name]
                return exporter.resolve(exported)
            if key == "Fn::GetStackOutput":
                # A weak cross-stack reference (cdk.json's @aws-cdk/core:defaultCrossStackReferences):
                # the named output of another stack of this account, read at deploy time.
                source = (self.resolve(arg["StackName"]), self.resolve(arg.get("Region", self.region)))
                if (
                    "RoleArn" in arg
                    or source not in self.stacks
                    or arg["OutputName"] not in self.stacks[source].outputs
                ):
                    raise UnresolvedIntrinsic(
                        f"{self.name}: Fn::GetStackOutput {arg}: no stack of {self.account} has that output"
                    )
                producer = self.stacks[source]
                return producer.resolve(producer.outputs[arg["OutputName"]]["Value"])
            if key == "Fn::If":
                name, when_true, when_false = arg
                return self.resolve(when_true if self.condition(name) else when_false)
            if key.startswith("Fn::"):
                raise ValueError(f"{self.name}: intrinsic {key} is not supported by the evaluator")
        return {k: self.resolve(v) for k, v in value.items()}

    def condition(self, name_or_expression: Any) -> bool:
        """A template condition (Fn::Equals / Not / And / Or / Condition) on the stack's values."""
        expression = self.conditions[name_or_expression] if isinstance(name_or_expression, str) else name_or_expression
        ((key, arg),) = expression.items()
        if key == "Condition":
            return self.condition(arg)
        if key == "Fn::Equals":
            return self.resolve(arg[0]) == self.resolve(arg[1])
        if key == "Fn::Not":
            return not self.condition(arg[0])
        if key == "Fn::And":
            return all(self.condition(a) for a in arg)
        if key == "Fn::Or":
            return any(self.condition(a) for a in arg)
        raise ValueError(f"{self.name}: condition function {key} is not supported by the evaluator")

    def _sub(self, text: str, variables: Mapping[str, Any]) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(self.resolve(variables[name]))
            if "." in name and not name.startswith("AWS::"):
                return self.get_att(*name.split(".", 1))
            return self.ref(name)

        return re.sub(r"\$\{([^}]+)\}", replace, text)


def load_assembly(outdir: str | Path) -> list[Template]:
    """Every stack of a cloud assembly (``cdk.out``), in its own account and region."""
    outdir = Path(outdir)
    manifest = json.loads((outdir / "manifest.json").read_text())
    templates = []
    for name, artifact in manifest["artifacts"].items():
        if artifact["type"] != "aws:cloudformation:stack":
            continue
        account, region = artifact["environment"].removeprefix("aws://").split("/")
        body = json.loads((outdir / artifact["properties"]["templateFile"]).read_text())
        templates.append(Template(name, body, account, region))
    link_exports(templates)
    return templates


def link_exports(templates: list[Template]) -> None:
    """Give each stack the exports its Fn::ImportValue can see: those of the stacks in its own
    account and region (CloudFormation refuses a second export of the same name there), and the
    stacks of its own account whose outputs its Fn::GetStackOutput reads."""
    exports: dict[tuple[str, str, str], tuple[Template, Any]] = {}
    for template in templates:
        for output in template.outputs.values():
            if "Export" in output:
                name = (template.account, template.region, template.resolve(output["Export"]["Name"]))
                if name in exports:
                    raise UnresolvedIntrinsic(
                        f"{template.name}: export {name[2]} is also exported by {exports[name][0].name}"
                    )
                exports[name] = (template, output["Value"])
    for template in templates:
        template.exports = {
            name: value
            for (account, region, name), value in exports.items()
            if (account, region) == (template.account, template.region)
        }
        template.stacks = {(t.name, t.region): t for t in templates if t.account == template.account}


# --- one policy document -----------------------------------------------------------------------


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def arn_account(arn: str) -> str:
    parts = arn.split(":")
    return parts[4] if len(parts) > 5 else ""


_VARIABLE = re.compile(r"\$\{([^}]+)\}")


def _substitute(pattern: str, context: Mapping[str, list[str]]) -> str | None:
    """Policy variables in a Resource or condition value; None when a variable is absent (the
    value then matches nothing). ``${*}``, ``${?}`` and ``${$}`` stand for the literal characters,
    which are escaped so the wildcard match treats them literally."""
    missing = False

    def replace(match: re.Match[str]) -> str:
        nonlocal missing
        name = match.group(1)
        if name in ("*", "?", "$"):
            return f"[{name}]" if name != "$" else "$"
        key, _, default = name.partition(", ")
        values = context.get(key.lower())
        if not values:
            if default:
                return default.strip("'")
            missing = True
            return ""
        return values[0]

    result = _VARIABLE.sub(replace, pattern)
    return None if missing else result


def _wildcard(pattern: str, value: str, *, case_sensitive: bool = True) -> bool:
    if not case_sensitive:
        pattern, value = pattern.lower(), value.lower()
    # fnmatch knows [seq]; IAM does not, except for the escapes _substitute produced.
    escaped = re.sub(r"\[(?![*?]\])", "[[]", pattern)
    return fnmatchcase(value, escaped)


def _arn_like(pattern: str, value: str) -> bool:
    """ArnLike compares the six ARN fields one by one; wildcards stay inside a field."""
    pattern_parts, value_parts = pattern.split(":", 5), value.split(":", 5)
    if len(pattern_parts) != 6 or len(value_parts) != 6:
        return pattern == "*"
    return all(_wildcard(p, v) for p, v in zip(pattern_parts, value_parts, strict=True))


_STRING_TESTS = {
    "StringEquals": lambda p, v: p == v,
    "StringLike": lambda p, v: _wildcard(p, v),
    "StringEqualsIgnoreCase": lambda p, v: p.lower() == v.lower(),
    "ArnEquals": _arn_like,  # AWS treats ArnEquals like ArnLike
    "ArnLike": _arn_like,
    "NumericEquals": lambda p, v: float(p) == float(v),
    "NumericLessThan": lambda p, v: float(v) < float(p),
    "NumericLessThanEquals": lambda p, v: float(v) <= float(p),
    "NumericGreaterThan": lambda p, v: float(v) > float(p),
    "NumericGreaterThanEquals": lambda p, v: float(v) >= float(p),
    "Bool": lambda p, v: p.lower() == v.lower(),
}
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotLike": "StringLike",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
}


def _condition(operator: str, key: str, patterns: list[str], context: Mapping[str, list[str]]) -> bool:
    values = context.get(key.lower())
    set_prefix, _, operator = operator.rpartition(":")
    if_exists = operator.endswith("IfExists")
    operator = operator.removesuffix("IfExists")
    if operator == "Null":
        want_absent = str(patterns[0]).lower() == "true"
        return (values is None or values == []) == want_absent
    if values is None:
        # An absent key matches nothing: ForAnyValue is false, ForAllValues vacuously true,
        # IfExists and the (single-valued) negated operators true.
        if if_exists or set_prefix == "ForAllValues":
            return True
        return set_prefix != "ForAnyValue" and operator in _NEGATED
    negated = operator in _NEGATED
    test = _STRING_TESTS[_NEGATED.get(operator, operator)]
    resolved = [p for p in (_substitute(str(p), context) for p in patterns) if p is not None]
    one = lambda value: any(test(p, value) for p in resolved)  # noqa: E731
    if set_prefix == "ForAllValues":
        matched = all(one(v) for v in values)
        return (not any(one(v) for v in values)) if negated else matched
    if set_prefix == "ForAnyValue":
        return any(not one(v) for v in values) if negated else any(one(v) for v in values)
    # Single-valued key: a negated operator is true when no pattern matches.
    return not any(one(v) for v in values) if negated else any(one(v) for v in values)


def conditions_hold(block: Mapping[str, Mapping[str, Any]] | None, context: Mapping[str, list[str]]) -> bool:
    return all(
        _condition(operator, key, [str(v) for v in as_list(value)], context)
        for operator, keys in (block or {}).items()
        for key, value in keys.items()
    )


@dataclass(frozen=True)
class Principal:
    """Who asks: an IAM role (``arn``) or a service (``service``)."""

    arn: str = ""
    service: str = ""

    @property
    def account(self) -> str:
        return arn_account(self.arn)


def _principal_matches(spec: Any, principal: Principal) -> tuple[bool, bool]:
    """(matches, names the principal itself). Naming the account (root or id) matches every
    principal of it but only delegates to that account's identity policies."""
    if spec == "*":
        return True, False
    for kind, values in (spec or {}).items():
        for value in as_list(values):
            if kind == "AWS":
                if value == "*":
                    return True, False
                if principal.arn and value == principal.arn:
                    return True, True
                account_root = re.fullmatch(r"(?:arn:[^:]+:iam::)?(\d{12})(?::root)?", value)
                if principal.arn and account_root and account_root.group(1) == principal.account:
                    return True, False
            elif kind == "Service" and principal.service and value == principal.service:
                return True, True
    return False, False


@dataclass(frozen=True)
class Request:
    principal: Principal
    action: str
    resource: str
    context: Mapping[str, list[str]] = field(default_factory=dict)


def statement_applies(statement: Mapping[str, Any], request: Request, *, resource_policy: bool) -> tuple[bool, bool]:
    """(applies, names the principal itself); the second part matters for resource policies."""
    action = request.action.lower()
    if "Action" in statement:
        if not any(_wildcard(a.lower(), action) for a in as_list(statement["Action"])):
            return False, False
    elif any(_wildcard(a.lower(), action) for a in as_list(statement.get("NotAction"))):
        return False, False
    unresolved = _unresolved_in(statement)
    if unresolved:
        raise UnresolvedIntrinsic(
            f"{request.action} on {request.resource} depends on {unresolved}, which the evaluator cannot compute"
        )

    def resource_matches(patterns: list[str]) -> bool:
        return any(
            (p := _substitute(pattern, request.context)) is not None and _wildcard(p, request.resource)
            for pattern in patterns
        )

    if "Resource" in statement:
        if not resource_matches(as_list(statement["Resource"])):
            return False, False
    elif "NotResource" in statement and resource_matches(as_list(statement["NotResource"])):
        return False, False
    names_principal = False
    if resource_policy:
        if "Principal" in statement:
            matches, names_principal = _principal_matches(statement["Principal"], request.principal)
            if not matches:
                return False, False
        elif "NotPrincipal" in statement and _principal_matches(statement["NotPrincipal"], request.principal)[0]:
            return False, False
    if not conditions_hold(statement.get("Condition"), request.context):
        return False, False
    return True, names_principal


@dataclass(frozen=True)
class Verdict:
    denied: bool = False
    allowed: bool = False
    names_principal: bool = False  # some Allow of a resource policy named the principal itself


def evaluate(
    documents: Iterable[Mapping[str, Any] | None], request: Request, *, resource_policy: bool = False
) -> Verdict:
    denied = allowed = names = False
    for document in documents:
        for statement in as_list((document or {}).get("Statement")):
            applies, named = statement_applies(statement, request, resource_policy=resource_policy)
            if not applies:
                continue
            if statement.get("Effect") == "Deny":
                denied = True
            else:
                allowed, names = True, names or named
    return Verdict(denied=denied, allowed=allowed, names_principal=names)


# --- the organisation ------------------------------------------------------------------------


@dataclass
class World:
    """Identity policies of principals, resource policies by resource ARN (KMS key policies, bucket
    policies, ECR repository policies, role trust policies) and SCPs by account, as deployed."""

    identity: dict[str, list[dict]] = field(default_factory=dict)  # principal ARN -> documents
    key_policies: dict[str, dict] = field(default_factory=dict)  # key ARN -> key policy
    bucket_policies: dict[str, list[dict]] = field(default_factory=dict)  # bucket name -> documents
    trust: dict[str, dict] = field(default_factory=dict)  # role ARN -> trust policy
    bucket_accounts: dict[str, str] = field(default_factory=dict)
    repository_policies: dict[str, dict] = field(default_factory=dict)  # ECR repository ARN -> repository policy
    scps: dict[str, list[dict]] = field(default_factory=dict)  # account -> SCP documents

    def add_identity(self, principal_arn: str, document: dict) -> None:
        self.identity.setdefault(principal_arn, []).append(document)

    def _resource_policy(self, resource: str) -> tuple[str, list[dict], bool]:
        """(owner account, documents, required): KMS key policies and trust policies are required."""
        if resource.startswith(f"arn:{PARTITION}:s3:::"):
            bucket = resource.split(":::", 1)[1].split("/", 1)[0]
            return self.bucket_accounts.get(bucket, ""), self.bucket_policies.get(bucket, []), False
        if resource in self.key_policies:
            return arn_account(resource), [self.key_policies[resource]], True
        if resource in self.repository_policies:
            return arn_account(resource), [self.repository_policies[resource]], False
        return arn_account(resource), [], False

    def is_allowed(self, request: Request) -> bool:
        principal = request.principal
        context = {
            **(
                {"aws:principalarn": [principal.arn], "aws:principalaccount": [principal.account]}
                if principal.arn
                else {}
            ),
            **{k.lower(): v for k, v in request.context.items()},
        }
        request = Request(principal, request.action, request.resource, context)
        action = request.action.lower()
        if principal.service:
            # A service acting for its caller: only the role's trust policy decides AssumeRole.
            if action != "sts:assumerole" or request.resource not in self.trust:
                return False
            verdict = evaluate([self.trust[request.resource]], request, resource_policy=True)
            return verdict.allowed and not verdict.denied
        scps = self.scps.get(principal.account)
        scp = evaluate(scps or [], request) if scps else Verdict(allowed=True)
        identity = evaluate(self.identity.get(principal.arn, []), request)
        if action == "iam:passrole":
            return scp.allowed and not scp.denied and identity.allowed and not identity.denied
        if action == "sts:assumerole":
            owner, documents, required = arn_account(request.resource), [self.trust.get(request.resource, {})], True
        else:
            owner, documents, required = self._resource_policy(request.resource)
        resource = evaluate(documents, request, resource_policy=True)
        if scp.denied or identity.denied or resource.denied or not scp.allowed:
            return False
        same_account = owner in ("", principal.account)  # "*" and account-less ARNs: the caller's own
        if required:
            # Key and trust policies must allow; naming the account only delegates to its IAM.
            return resource.allowed and (identity.allowed or (same_account and resource.names_principal))
        if same_account:
            return identity.allowed or resource.names_principal
        return identity.allowed and resource.allowed
