"""A proof over all requests, in the manner of IAM Access Analyzer's Zelkova: the synthesized
identity, resource (key, bucket, repository), trust and service-control policies become one
formula in the theories of strings and regular expressions, and cvc5 decides whether ANY request
(action, resource ARN, tags, condition-key values) is allowed to a principal on a resource that
belongs to another team (ownership.py). A satisfiable answer is an attack, and the solver's model
is the witness request; "unknown" (the per-query time limit) is a failure, never a pass.

The encoding follows iam_eval's decision procedure statement by statement (the two must agree:
test_prover checks them against each other):

- the request: ``action`` (lower case), ``resource`` and, per condition key the policies name, a
  presence flag and a value (set-valued keys such as ``aws:TagKeys`` get ``SET_SLOTS`` values);
  ``aws:PrincipalArn`` and ``aws:PrincipalAccount`` are the principal's, every other key is free;
- wildcards become regular expressions (``*`` any string, ``?`` any character); ``Arn*``
  operators match field by field (a wildcard never crosses ``:`` before the resource field);
- ``aws:RequestTag/<key>`` is present exactly when ``<key>`` is among ``aws:TagKeys``;
- creating a job (SubmitJob, SubmitServiceJob, and the TagResource Batch authorises inside them)
  is a request flag. How Batch builds the context of that TagResource no page says
  [aws: batch-iam.tag-on-create-context], so the prover takes a reading (ownership.Reading): whether the
  submission's own keys (``batch:ShareIdentifier``, ``batch:SchedulingPriority``) may be in it
  (outside a submission they never are: the Service Authorization Reference lists them for no
  other action), and whether the new job's ``aws:ResourceTag/<key>`` is absent or holds the
  requested tags (IAM: "or in requests that create a resource with an attached tag");
- principals are concrete (one query per role), so ``Principal`` blocks are decided in Python.

Left out (docs/security.md): numeric and date operators and policy variables (none synthesized;
the encoder refuses them), more than ``SET_SLOTS`` values of one set-valued key, session
policies and permission boundaries (none synthesized), and what no policy can see (payloads,
Kubernetes RBAC)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import cvc5
from cvc5 import Kind

from .iam_eval import _UNRESOLVED, Principal, World, _principal_matches, as_list
from .ownership import (
    CREATED,
    CREATING_ACTIONS,
    OWNER_TAG,
    OWNER_TAG_KEYS,
    READINGS,
    Owned,
    Reading,
    owned_by_name,
    owned_by_tag,
)
from .tenants import Organisation

OTHER_ACTION = "<any action no policy names>"
SET_SLOTS = 4  # a requeue copy names four keys: team, cost centre, requeued-from, times-preempted
# Actions with no resource-level permissions (Service Authorization Reference): authorised on "*".
RESOURCELESS = {
    "batch:describejobs",
    "batch:listjobs",
    "batch:describeservicejob",
    "batch:listservicejobs",
    "sagemaker:listtrainingjobs",
    "cloudwatch:getmetricdata",
    "cloudwatch:getmetricstatistics",
    "cloudwatch:listmetrics",
    "cloudwatch:putmetricdata",
    "ecr:getauthorizationtoken",
}
ARN_SERVICE = {"sts": "iam"}  # sts:AssumeRole is authorised on the role's (IAM) ARN
SET_VALUED = {"aws:tagkeys"}
SUBMISSION_KEYS = {
    "batch:shareidentifier": ("batch:submitjob", "batch:submitservicejob"),
    "batch:schedulingpriority": ("batch:submitservicejob",),
}
TIME_LIMIT_MS = 20_000
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotLike": "StringLike",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}
_SUPPORTED = {"StringEquals", "StringLike", "StringEqualsIgnoreCase", "ArnEquals", "ArnLike", "Bool"}


class Unsupported(ValueError):
    """A policy element the encoding does not model: refused, never silently read as false."""


@dataclass
class Answer:
    question: str
    satisfiable: bool
    seconds: float
    witness: dict[str, Any] = field(default_factory=dict)


class Unknown(AssertionError):
    """The solver gave no answer within the time limit: the proof failed."""


class Encoder:
    """The request as solver variables, and policies as formulas over them."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.tm = cvc5.TermManager()
        tm = self.tm
        self.string = tm.getStringSort()
        self.true, self.false = tm.mkTrue(), tm.mkFalse()
        self.action = tm.mkConst(self.string, "action")
        self.resource = tm.mkConst(self.string, "resource")
        self.creating = tm.mkConst(tm.getBooleanSort(), "creating")
        self.keys: dict[str, list[tuple[Any, Any]]] = {}
        self.names: dict[str, str] = {}  # lower-case key -> as written (a request tag's key keeps its case)
        # A resource tag a policy reads may hold a requested tag of the same key (Reading.resource_tags).
        requested = {f"aws:RequestTag/{k.split('/', 1)[1]}" for k in keys if k.lower().startswith("aws:resourcetag/")}
        for key in sorted(set(keys) | requested | SET_VALUED, key=str.lower):
            lower = key.lower()
            if lower in self.keys:
                continue
            self.names[lower] = key
            slots = SET_SLOTS if lower in SET_VALUED else 1
            self.keys[lower] = [
                (tm.mkConst(tm.getBooleanSort(), f"has {key} {i}"), tm.mkConst(self.string, f"{key} {i}"))
                for i in range(slots)
            ]
        self._regex_cache: dict[tuple[str, str], Any] = {}
        self._statement_cache: dict[tuple[int, str], Any] = {}

    # --- terms -------------------------------------------------------------------------------

    def t(self, kind: Kind, *args: Any) -> Any:
        return self.tm.mkTerm(kind, *args)

    def s(self, text: str) -> Any:
        return self.tm.mkString(text)

    def any_of(self, terms: list[Any]) -> Any:
        return self.false if not terms else terms[0] if len(terms) == 1 else self.t(Kind.OR, *terms)

    def all_of(self, terms: list[Any]) -> Any:
        return self.true if not terms else terms[0] if len(terms) == 1 else self.t(Kind.AND, *terms)

    def implies(self, a: Any, b: Any) -> Any:
        return self.t(Kind.IMPLIES, a, b)

    def eq(self, a: Any, b: Any) -> Any:
        return self.t(Kind.EQUAL, a, b)

    def matches(self, value: Any, regex: Any) -> Any:
        return self.t(Kind.STRING_IN_REGEXP, value, regex)

    def glob(self, pattern: str, *, field_bound: bool = False) -> Any:
        """IAM wildcards as a regular expression; ``field_bound``: ``*`` and ``?`` never match ':'."""
        cached = self._regex_cache.get((pattern, str(field_bound)))
        if cached is not None:
            return cached
        if "${" in pattern:
            raise Unsupported(f"policy variable in {pattern!r}")
        any_char = self.t(Kind.REGEXP_ALLCHAR)
        if field_bound:
            any_char = self.t(Kind.REGEXP_DIFF, any_char, self.t(Kind.STRING_TO_REGEXP, self.s(":")))
        parts, literal = [], ""
        for char in pattern:
            if char in "*?":
                if literal:
                    parts.append(self.t(Kind.STRING_TO_REGEXP, self.s(literal)))
                    literal = ""
                parts.append(self.t(Kind.REGEXP_STAR, any_char) if char == "*" else any_char)
            else:
                literal += char
        if literal or not parts:
            parts.append(self.t(Kind.STRING_TO_REGEXP, self.s(literal)))
        regex = parts[0] if len(parts) == 1 else self.t(Kind.REGEXP_CONCAT, *parts)
        self._regex_cache[(pattern, str(field_bound))] = regex
        return regex

    def arn_glob(self, pattern: str) -> Any:
        """ArnLike: six fields matched one by one, wildcards inside a field (iam_eval._arn_like)."""
        fields = pattern.split(":", 5)
        if len(fields) != 6:
            return self.t(Kind.REGEXP_ALL) if pattern == "*" else self.t(Kind.REGEXP_NONE)
        colon = self.t(Kind.STRING_TO_REGEXP, self.s(":"))
        parts = []
        for index, part in enumerate(fields):
            parts += [self.glob(part, field_bound=index < 5)] + ([colon] if index < 5 else [])
        return self.t(Kind.REGEXP_CONCAT, *parts)

    def in_patterns(self, value: Any, patterns: Iterable[str], *, lower: bool = False) -> Any:
        return self.any_of([self.matches(value, self.glob(p.lower() if lower else p)) for p in patterns])

    # --- the request ---------------------------------------------------------------------------

    def present(self, key: str) -> Any:
        return self.any_of([has for has, _ in self.keys[key.lower()]])

    def well_formed(self, principal: Principal, action: str, creatable_patterns: list[str], reading: Reading) -> Any:
        """What every request satisfies, whoever sends it, with ``reading``'s tagging inside a submission."""
        action_chars = self.t(
            Kind.REGEXP_UNION,
            self.t(Kind.REGEXP_RANGE, self.s("a"), self.s("z")),
            self.t(Kind.REGEXP_RANGE, self.s("0"), self.s("9")),
            self.t(Kind.STRING_TO_REGEXP, self.s(":")),
            self.t(Kind.STRING_TO_REGEXP, self.s("-")),
        )
        facts = [
            self.matches(self.action, self.t(Kind.REGEXP_STAR, action_chars))
        ]  # IAM compares actions ignoring case
        fixed = {"aws:principalarn": principal.arn, "aws:principalaccount": principal.account}
        for key, value in fixed.items():
            if key in self.keys:
                ((has, var),) = self.keys[key]
                facts += [has, self.eq(var, self.s(value))]
        tag_keys = self.keys["aws:tagkeys"]
        for lower in self.keys:
            if lower.startswith("aws:requesttag/"):
                tag = self.names[lower].split("/", 1)[1]
                listed = self.any_of([self.t(Kind.AND, has, self.eq(var, self.s(tag))) for has, var in tag_keys])
                facts.append(self.eq(self.present(lower), listed))
            if lower.startswith("aws:resourcetag/"):
                facts.append(self.implies(self.creating, self._created_with(lower, reading)))
            if lower in SUBMISSION_KEYS and action not in SUBMISSION_KEYS[lower]:
                # only inside the submission, and there only if the reading puts them there
                inside = self.creating if reading.submission_keys else self.false
                facts.append(self.implies(self.present(lower), inside))
        if action in RESOURCELESS:
            facts.append(self.eq(self.resource, self.s("*")))
        elif action != OTHER_ACTION:
            # An action is authorised on the ARNs of its own service.
            service = action.split(":", 1)[0]
            facts.append(self.matches(self.resource, self.glob(f"arn:aws:{ARN_SERVICE.get(service, service)}:*")))
        else:
            prefix = self.tm.mkConst(self.string, "service")
            facts.append(self.t(Kind.STRING_PREFIX, self.t(Kind.STRING_CONCAT, prefix, self.s(":")), self.action))
            facts.append(
                self.t(
                    Kind.OR,
                    self.eq(self.resource, self.s("*")),
                    self.t(
                        Kind.STRING_PREFIX,
                        self.t(Kind.STRING_CONCAT, self.s("arn:aws:"), prefix, self.s(":")),
                        self.resource,
                    ),
                )
            )
        if action in CREATING_ACTIONS:
            creatable = self.any_of([self.matches(self.resource, self.glob(pattern)) for pattern in creatable_patterns])
            # Submitting always makes a new job; TagResource may tag a new job (inside the submission) or an existing one.
            facts.append(
                self.eq(self.creating, creatable)
                if action != "batch:tagresource"
                else self.implies(self.creating, creatable)
            )
        else:
            facts.append(self.t(Kind.NOT, self.creating))
        return self.all_of(facts)

    def _created_with(self, resource_tag: str, reading: Reading) -> Any:
        """A new resource's ``aws:ResourceTag/<key>``: absent, or the requested tag of that key."""
        if not reading.resource_tags:
            return self.t(Kind.NOT, self.present(resource_tag))
        ((has, value),) = self.keys[resource_tag]
        ((asked, wanted),) = self.keys[f"aws:requesttag/{resource_tag.split('/', 1)[1]}"]
        return self.all_of([self.eq(has, asked), self.implies(has, self.eq(value, wanted))])

    # --- policies ------------------------------------------------------------------------------

    def condition(self, operator: str, key: str, values: list[str]) -> Any:
        slots = self.keys[key.lower()]
        set_prefix, _, operator = operator.rpartition(":")
        if_exists = operator.endswith("IfExists")
        operator = operator.removesuffix("IfExists")
        present = self.present(key)
        if operator == "Null":
            want_absent = str(values[0]).lower() == "true"
            return self.t(Kind.NOT, present) if want_absent else present
        negated = operator in _NEGATED
        base = _NEGATED.get(operator, operator)
        if base not in _SUPPORTED:
            raise Unsupported(f"condition operator {operator} on {key}")

        def one(value: Any) -> Any:
            tests = []
            for pattern in values:
                if "${" in pattern:
                    raise Unsupported(f"policy variable in condition {operator} {key}: {pattern}")
                if base == "StringEquals":
                    tests.append(self.eq(value, self.s(pattern)))
                elif base == "StringLike":
                    tests.append(self.matches(value, self.glob(pattern)))
                elif base in ("StringEqualsIgnoreCase", "Bool"):
                    tests.append(self.eq(self.t(Kind.STRING_TO_LOWER, value), self.s(pattern.lower())))
                else:
                    tests.append(self.matches(value, self.arn_glob(pattern)))
            return self.any_of(tests)

        if set_prefix == "ForAllValues":
            held = (
                self.t(Kind.NOT, self.any_of([self.t(Kind.AND, has, one(v)) for has, v in slots]))
                if negated
                else self.all_of([self.implies(has, one(v)) for has, v in slots])
            )
        elif set_prefix == "ForAnyValue" or len(slots) > 1:
            if negated and set_prefix == "ForAnyValue":
                held = self.any_of([self.t(Kind.AND, has, self.t(Kind.NOT, one(v))) for has, v in slots])
            else:
                matched = self.any_of([self.t(Kind.AND, has, one(v)) for has, v in slots])
                held = self.t(Kind.NOT, matched) if negated else matched
        else:
            ((_, value),) = slots
            held = self.t(Kind.NOT, one(value)) if negated else one(value)
        when_absent = if_exists or set_prefix == "ForAllValues" or (set_prefix != "ForAnyValue" and negated)
        return self.t(Kind.ITE, present, held, self.true if when_absent else self.false)

    def statement(
        self, statement: Mapping[str, Any], principal: Principal | None, *, action_known: bool
    ) -> tuple[Any, bool]:
        """(applies, names the principal itself). ``principal`` is given for resource policies;
        ``action_known``: the caller already matched the statement's actions to the request's."""
        matched = (
            (True, False)
            if principal is None or ("Principal" not in statement and "NotPrincipal" not in statement)
            else (
                _principal_matches(statement["Principal"], principal)
                if "Principal" in statement
                else (not _principal_matches(statement["NotPrincipal"], principal)[0], False)
            )
        )
        if not matched[0]:
            return self.false, False
        key = (id(statement), action_known)
        if key not in self._statement_cache:
            self._statement_cache[key] = self._applies(statement, action_known)
        return self._statement_cache[key], matched[1]

    def _applies(self, statement: Mapping[str, Any], action_known: bool) -> Any:
        parts = []
        if not action_known:
            if "Action" in statement:
                parts.append(self.in_patterns(self.action, as_list(statement["Action"]), lower=True))
            else:
                parts.append(
                    self.t(Kind.NOT, self.in_patterns(self.action, as_list(statement.get("NotAction")), lower=True))
                )
        unresolved = _UNRESOLVED in str(statement)
        if unresolved:
            # A value iam_eval cannot compute (a controller's function ARN): an Allow is read as
            # allowing its actions on everything, a Deny as denying nothing: never a missed attack.
            if statement.get("Effect") == "Deny":
                return self.false
        elif "Resource" in statement:
            parts.append(self.in_patterns(self.resource, as_list(statement["Resource"])))
        elif "NotResource" in statement:
            parts.append(self.t(Kind.NOT, self.in_patterns(self.resource, as_list(statement["NotResource"]))))
        if not unresolved:
            for operator, keys in (statement.get("Condition") or {}).items():
                for key, value in keys.items():
                    parts.append(self.condition(operator, key, [str(v) for v in as_list(value)]))
        return self.all_of(parts)

    def verdict(
        self, statements: Iterable[Mapping[str, Any]], principal: Principal | None, *, action_known: bool
    ) -> tuple[Any, Any, Any]:
        """(allowed, denied, allowed by a statement naming the principal itself)."""
        allows, denies, named = [], [], []
        for statement in statements:
            applies, names = self.statement(statement, principal, action_known=action_known)
            if statement.get("Effect") == "Deny":
                denies.append(applies)
            else:
                allows.append(applies)
                if names:
                    named.append(applies)
        return self.any_of(allows), self.any_of(denies), self.any_of(named)


def condition_keys(world: World) -> set[str]:
    keys: set[str] = {"aws:PrincipalArn", "aws:PrincipalAccount"}
    documents = (
        [d for docs in world.identity.values() for d in docs]
        + list(world.key_policies.values())
        + list(world.trust.values())
    )
    documents += [d for docs in world.bucket_policies.values() for d in docs] + list(world.repository_policies.values())
    documents += [d for docs in world.scps.values() for d in docs]
    for document in documents:
        for statement in as_list((document or {}).get("Statement")):
            for block in (statement.get("Condition") or {}).values():
                keys |= set(block)
    return keys


def _statements(documents: Iterable[Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
    return [st for document in documents for st in as_list((document or {}).get("Statement"))]


def _wild(statement: Mapping[str, Any]) -> bool:
    """Whether the statement can match an action no policy names literally."""
    return "Action" not in statement or any(c in a for a in as_list(statement["Action"]) for c in "*?")


class Prover:
    """One organisation's policies, and the questions asked of them.

    Each question is split by action: the actions the policies name literally, grouped by which
    statements match them (decided here, exactly as iam_eval matches actions), plus one group for
    every other action (only wildcard statements can match it; the solver matches those). Within
    a group the formula holds only the statements that can apply, which keeps queries small."""

    def __init__(
        self, org: Organisation, *, reading: Reading = READINGS[0], time_limit_ms: int = TIME_LIMIT_MS
    ) -> None:
        self.org, self.world, self.time_limit_ms, self.reading = org, org.world, time_limit_ms, reading
        self.encoder = Encoder(condition_keys(org.world))
        self.tagged = owned_by_tag(org)
        self.answers: list[Answer] = []
        world = self.world
        # Resource policies: (kind, the resource, statements, required, owner account or None for the ARN's own).
        self._bearers: list[tuple[str, str, list[Mapping[str, Any]], bool, str | None]] = []
        self._bearers += [("key", key, _statements([p]), True, None) for key, p in world.key_policies.items()]
        self._bearers += [
            ("bucket", b, _statements(docs), False, world.bucket_accounts.get(b, ""))
            for b, docs in world.bucket_policies.items()
        ]
        self._bearers += [
            ("repository", r, _statements([p]), False, None) for r, p in world.repository_policies.items()
        ]
        self._bearers += [("trust", role, _statements([p]), True, None) for role, p in world.trust.items()]
        every = [st for docs in world.identity.values() for st in _statements(docs)] + [
            st for _, _, sts, _, _ in self._bearers for st in sts
        ]
        every += [st for docs in world.scps.values() for st in _statements(docs)]
        self.literal_actions = {
            a.lower()
            for st in every
            for a in as_list(st.get("Action") or st.get("NotAction"))
            if not any(c in a for c in "*?")
        }
        self.literal_actions |= {
            "iam:passrole",
            "sts:assumerole",
            *CREATING_ACTIONS,
            *(a for acts in SUBMISSION_KEYS.values() for a in acts),
        }
        self._match_cache: dict[tuple[int, str], bool] = {}

    def under(self, reading: Reading) -> Prover:
        """This prover asking its questions under ``reading`` (the same policies, formulas and answers)."""
        other = copy.copy(self)
        other.reading = reading
        return other

    def _matches(self, statement: Mapping[str, Any], action: str) -> bool:
        """Whether the statement's Action / NotAction matches ``action`` (OTHER_ACTION: could match one)."""
        key = (id(statement), action)
        if key not in self._match_cache:
            if action == OTHER_ACTION:
                self._match_cache[key] = _wild(statement)
            else:
                hit = any(
                    fnmatchcase(action, a.lower())
                    for a in as_list(statement.get("Action") or statement.get("NotAction"))
                )
                self._match_cache[key] = hit if "Action" in statement else not hit
        return self._match_cache[key]

    def _for(self, statements: Iterable[Mapping[str, Any]], action: str) -> list[Mapping[str, Any]]:
        return [st for st in statements if self._matches(st, action)]

    # --- IAM's decision, over every request of one action group ------------------------------

    def allowed(self, principal: Principal, action: str) -> Any:
        """iam_eval.World.is_allowed as a formula, for requests whose action is ``action`` (or,
        for OTHER_ACTION, any action no policy names); for a role or user, services are not asked."""
        e, world = self.encoder, self.world
        known = action != OTHER_ACTION
        scps = world.scps.get(principal.account)
        if scps:
            scp_allow, scp_deny, _ = e.verdict(self._for(_statements(scps), action), None, action_known=known)
            scp_ok = e.t(Kind.AND, scp_allow, e.t(Kind.NOT, scp_deny))
        else:
            scp_ok = e.true
        id_allow, id_deny, _ = e.verdict(
            self._for(_statements(world.identity.get(principal.arn, [])), action), None, action_known=known
        )
        if action == "iam:passrole":
            return e.all_of([scp_ok, e.t(Kind.NOT, id_deny), id_allow])
        res_allow, res_deny, res_named, required, buckets_at, bucket_same = [], [], [], [], [], []
        service = action.split(":", 1)[0]
        for kind, name, statements, must, owner in self._bearers:
            if (kind == "trust") != (action == "sts:assumerole"):
                continue  # AssumeRole is decided by trust policies only, anything else never by them
            if action != OTHER_ACTION and not name.startswith(f"arn:aws:{ARN_SERVICE.get(service, service)}:"):
                continue  # the request's resource is an ARN of the action's own service (well_formed)
            if kind == "bucket":
                at = e.in_patterns(e.resource, [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"])
            else:
                at = e.eq(e.resource, e.s(name))
            allow, deny, named = e.verdict(self._for(statements, action), principal, action_known=known)
            res_allow.append(e.t(Kind.AND, at, allow))
            res_deny.append(e.t(Kind.AND, at, deny))
            res_named.append(e.t(Kind.AND, at, named))
            if must:
                required.append(at)
            if owner is not None:
                buckets_at.append(at)
                bucket_same.append(e.t(Kind.AND, at, e.true if owner in ("", principal.account) else e.false))
        res_allow_t, res_deny_t, res_named_t = e.any_of(res_allow), e.any_of(res_deny), e.any_of(res_named)
        required_t = e.true if action == "sts:assumerole" else e.any_of(required)
        # The resource's account: the fifth field of a six-field ARN ("" or the caller's is its own).
        no_colon = e.t(Kind.REGEXP_DIFF, e.t(Kind.REGEXP_ALLCHAR), e.t(Kind.STRING_TO_REGEXP, e.s(":")))
        field_re, colon = e.t(Kind.REGEXP_STAR, no_colon), e.t(Kind.STRING_TO_REGEXP, e.s(":"))
        other_account = e.t(
            Kind.REGEXP_DIFF, e.t(Kind.REGEXP_PLUS, no_colon), e.t(Kind.STRING_TO_REGEXP, e.s(principal.account))
        )
        foreign = e.t(
            Kind.REGEXP_CONCAT,
            field_re,
            colon,
            field_re,
            colon,
            field_re,
            colon,
            field_re,
            colon,
            other_account,
            colon,
            e.t(Kind.REGEXP_ALL),
        )
        same_by_arn = e.t(Kind.NOT, e.matches(e.resource, foreign))
        same = e.t(Kind.ITE, e.any_of(buckets_at), e.any_of(bucket_same), same_by_arn) if buckets_at else same_by_arn
        by_resource = e.all_of(
            [
                e.t(Kind.NOT, res_deny_t),
                e.implies(
                    required_t, e.t(Kind.AND, res_allow_t, e.t(Kind.OR, id_allow, e.t(Kind.AND, same, res_named_t)))
                ),
                e.implies(
                    e.t(Kind.NOT, required_t),
                    e.t(Kind.ITE, same, e.t(Kind.OR, id_allow, res_named_t), e.t(Kind.AND, id_allow, res_allow_t)),
                ),
            ]
        )
        return e.all_of([scp_ok, e.t(Kind.NOT, id_deny), by_resource])

    def action_groups(self, principal: Principal) -> list[list[str]]:
        """The actions some Allow for ``principal`` can match, grouped by the statements that match
        them (and how the request is shaped for them); OTHER_ACTION alone when a wildcard Allow exists."""
        world = self.world
        identity = _statements(world.identity.get(principal.arn, []))
        resource = [
            st
            for _, _, sts, _, _ in self._bearers
            for st in sts
            if st.get("Effect") != "Deny"
            and ("Principal" not in st or _principal_matches(st["Principal"], principal)[0])
        ]
        allows = [st for st in identity if st.get("Effect") != "Deny"] + resource
        everything = (
            identity
            + [st for _, _, sts, _, _ in self._bearers for st in sts]
            + _statements(world.scps.get(principal.account, []))
        )
        groups: dict[tuple, list[str]] = {}
        for action in sorted(self.literal_actions):
            if any(self._matches(st, action) for st in allows):
                shape = (
                    action in ("iam:passrole", "sts:assumerole"),
                    action in CREATING_ACTIONS,
                    tuple(action in acts for acts in SUBMISSION_KEYS.values()),
                )
                signature = (shape, frozenset(id(st) for st in everything if self._matches(st, action)))
                groups.setdefault(signature, []).append(action)
        result = [actions for signature, actions in groups.items() if not signature[0][0]]
        result += [[a] for signature, actions in groups.items() if signature[0][0] for a in actions]
        if any(_wild(st) for st in allows):
            result.append([OTHER_ACTION])
        return result

    # --- ownership -------------------------------------------------------------------------------

    def not_own(self, team: str, action: str) -> Any:
        """The request acts on something that is not ``team``'s: another team's by name, an existing
        job tagged for another team, an existing job definition or training plan not tagged for
        ``team``, or a job being created for someone else. An existing job without a team tag is no
        team's: none is in a governed queue (:meth:`untagged_submission`), and no documented key
        tells tagging a new job from tagging an existing one (ownership.py). Only the resources of
        the action's own service are named (well_formed keeps the request there)."""
        e = self.encoder
        service = action.split(":", 1)[0]
        arn_prefix = "arn:aws:" if action == OTHER_ACTION else f"arn:aws:{ARN_SERVICE.get(service, service)}:"
        relevant = lambda patterns: [p for p in patterns if p.startswith(arn_prefix)]  # noqa: E731
        others = [
            pattern
            for name, owned in self.ownership().items()
            if name != team
            for o in owned
            for pattern in relevant(o.arns)
        ]
        tag = f"aws:ResourceTag/{OWNER_TAG}".lower()
        request_tag = f"aws:RequestTag/{OWNER_TAG}".lower()
        ((has_tag, tag_value),) = e.keys[tag] if tag in e.keys else [(e.false, e.s(""))]
        ours = e.t(Kind.AND, has_tag, e.eq(tag_value, e.s(team)))
        jobs = relevant([self.tagged[kind] for kind in CREATED])
        other_kinds = relevant([pattern for kind, pattern in self.tagged.items() if kind not in CREATED])
        existing_not_ours = e.t(
            Kind.AND,
            e.t(Kind.NOT, e.creating),
            e.any_of(
                [
                    e.t(Kind.AND, e.in_patterns(e.resource, jobs), e.t(Kind.AND, has_tag, e.t(Kind.NOT, ours)))
                    if jobs
                    else e.false,
                    e.t(Kind.AND, e.in_patterns(e.resource, other_kinds), e.t(Kind.NOT, ours))
                    if other_kinds
                    else e.false,
                ]
            ),
        )
        named, for_team = e.keys[request_tag][0] if request_tag in e.keys else (e.false, e.s(""))
        if action == "batch:tagresource":
            # Tagging inside a submission takes effect only with the submission, which decides the
            # job's share and requires its team tag: it is someone else's job if it names another team.
            created_for = [e.t(Kind.AND, named, e.t(Kind.NOT, e.eq(for_team, e.s(team))))]
        else:
            created_for = [e.t(Kind.NOT, e.t(Kind.AND, named, e.eq(for_team, e.s(team))))]
        if "batch:shareidentifier" in e.keys and action != "batch:tagresource":
            ((has_share, share),) = e.keys["batch:shareidentifier"]
            fair_share_job = e.matches(
                e.resource, e.glob(self.tagged["batch job"])
            )  # quota shares are named by the share's ARN instead
            created_for.append(e.all_of([fair_share_job, has_share, e.t(Kind.NOT, e.eq(share, e.s(team)))]))
        created_not_ours = e.t(Kind.AND, e.creating, e.any_of(created_for)) if action in CREATING_ACTIONS else e.false
        return e.any_of([e.in_patterns(e.resource, others), existing_not_ours, created_not_ours])

    def ownership(self) -> dict[str, list[Owned]]:
        if not hasattr(self, "_ownership"):
            self._ownership = {name: owned_by_name(self.org, tenant) for name, tenant in self.org.tenants.items()}
        return self._ownership

    # --- asking ----------------------------------------------------------------------------------

    def _solver(self) -> cvc5.Solver:
        solver = cvc5.Solver(self.encoder.tm)
        solver.setOption("produce-models", "true")
        solver.setOption("incremental", "true")
        solver.setOption("strings-exp", "true")  # str.to_lower (IgnoreCase and Bool operators)
        solver.setOption("tlimit-per", str(self.time_limit_ms))
        solver.setLogic("QF_SLIA")
        return solver

    def ask(
        self, question: str, principal: Principal, actions: list[str], *goal: Any, solver: cvc5.Solver | None = None
    ) -> Answer:
        """Is a request of ``principal`` with one of ``actions`` (a group) allowed and ``goal``?"""
        e = self.encoder
        solver = solver or self._solver()
        solver.push()
        action = actions[0]
        solver.assertFormula(e.well_formed(principal, action, [self.tagged[kind] for kind in CREATED], self.reading))
        if action == OTHER_ACTION:
            solver.assertFormula(
                e.t(Kind.NOT, e.any_of([e.eq(e.action, e.s(a)) for a in sorted(self.literal_actions)]))
            )
        else:
            solver.assertFormula(e.any_of([e.eq(e.action, e.s(a)) for a in actions]))
        solver.assertFormula(self.allowed(principal, action))
        for term in goal:
            solver.assertFormula(term)
        start = time.perf_counter()
        result = solver.checkSat()
        seconds = time.perf_counter() - start
        if result.isUnknown():
            raise Unknown(
                f"{question} ({action}...): no answer within {self.time_limit_ms} ms ({result.getUnknownExplanation()})"
            )
        answer = Answer(question, result.isSat(), seconds, self._witness(solver) if result.isSat() else {})
        solver.pop()
        self.answers.append(answer)
        return answer

    def _witness(self, solver: cvc5.Solver) -> dict[str, Any]:
        e = self.encoder
        value = lambda term: solver.getValue(term)  # noqa: E731
        context = {}
        for lower, slots in e.keys.items():
            values = [value(v).getStringValue() for has, v in slots if value(has).getBooleanValue()]
            if values:
                context[e.names[lower]] = values
        return {
            "action": value(e.action).getStringValue(),
            "resource": value(e.resource).getStringValue(),
            "creating": value(e.creating).getBooleanValue(),
            "context": context,
        }

    def cross_tenant(self, principal: Principal, team: str) -> list[Answer]:
        """Is ANY request of ``principal`` (a role of ``team``) allowed on what is not ``team``'s?
        One answer per action group; a satisfiable one carries the witness request."""
        solver = self._solver()
        return [
            self.ask(
                f"{principal.arn} ({team}) outside its team",
                principal,
                actions,
                self.not_own(team, actions[0]),
                solver=solver,
            )
            for actions in self.action_groups(principal)
        ]

    def untagged_submission(self, principal: Principal, queue: str) -> list[Answer]:
        """Can ``principal`` submit into ``queue`` (a governed queue) a job that carries no team
        tag? IAM authorises a submission on its queue too, so a refusal there refuses the job."""
        e = self.encoder
        untagged = e.t(Kind.NOT, e.present(f"aws:RequestTag/{OWNER_TAG}"))
        return [
            self.ask(
                f"{principal.arn}: {action} into {queue} untagged",
                principal,
                [action],
                e.eq(e.resource, e.s(queue)),
                untagged,
            )
            for action in ("batch:submitjob", "batch:submitservicejob")
        ]

    def owner_changed(self, principal: Principal, team: str) -> list[Answer]:
        """Can ``principal``, one of ``team``'s, remove a job's team, cost-centre or platform tag,
        or put another team's name in its team tag? Either would make the job another team's to
        stop (or no team's, hence anyone's to claim)."""
        e = self.encoder
        existing_job = [e.in_patterns(e.resource, [self.tagged[kind] for kind in CREATED]), e.t(Kind.NOT, e.creating)]
        removes = e.any_of(
            [e.t(Kind.AND, has, e.eq(key, e.s(name))) for has, key in e.keys["aws:tagkeys"] for name in OWNER_TAG_KEYS]
        )
        ((named, value),) = e.keys[f"aws:RequestTag/{OWNER_TAG}".lower()]
        renames = e.t(Kind.AND, named, e.t(Kind.NOT, e.eq(value, e.s(team))))
        return [
            self.ask(
                f"{principal.arn} removes an owner tag", principal, ["batch:untagresource"], *existing_job, removes
            ),
            self.ask(f"{principal.arn} names another team", principal, ["batch:tagresource"], *existing_job, renames),
        ]

    def _fixed(self, action: str, resource: str, creating: bool) -> list[Any]:
        e = self.encoder
        return [e.eq(e.resource, e.s(resource)), e.creating if creating else e.t(Kind.NOT, e.creating)]

    def reaches(
        self, principal: Principal, action: str, resource: str, *, creating: bool = False, **fixed: str
    ) -> Answer:
        """A positive check: is ``action`` on ``resource`` allowed for some context (with ``fixed`` keys)?"""
        e = self.encoder
        goal = self._fixed(action, resource, creating)
        for key, value in fixed.items():
            (has, var), *_ = e.keys[key.lower()]
            goal += [has, e.eq(var, e.s(value))]
        return self.ask(f"{principal.arn}: {action} on {resource}", principal, [self._group_of(action)], *goal)

    def _group_of(self, action: str) -> str:
        return action.lower() if action.lower() in self.literal_actions else OTHER_ACTION

    def decides(
        self,
        principal: Principal,
        action: str,
        resource: str,
        context: Mapping[str, list[str]],
        *,
        creating: bool = False,
    ) -> bool:
        """The answer for one concrete request (every key not in ``context`` absent): iam_eval's."""
        e = self.encoder
        given = {k.lower(): v for k, v in context.items()}
        goal = self._fixed(action, resource, creating) + [e.eq(e.action, e.s(action.lower()))]
        for lower, slots in e.keys.items():
            if lower in ("aws:principalarn", "aws:principalaccount"):
                continue
            values = given.get(lower, [])
            if len(values) > len(slots):
                raise Unsupported(f"{len(values)} values of {lower}: the encoding holds {len(slots)}")
            for index, (has, var) in enumerate(slots):
                goal += [has, e.eq(var, e.s(values[index]))] if index < len(values) else [e.t(Kind.NOT, has)]
        return self.ask(
            f"{principal.arn}: {action} on {resource} with {context}", principal, [self._group_of(action)], *goal
        ).satisfiable


def principals_of(org: Organisation) -> list[tuple[str, Principal]]:
    """(team, principal) for every role a team can act as, and every declared member."""
    return [(team.name, Principal(arn=arn)) for team in org.tenants.values() for arn in team.roles.values()]


def name_overlap(first: Iterable[str], second: Iterable[str]) -> str | None:
    """A name (in lower case) that a pattern of ``first`` and one of ``second`` both match,
    ignoring case, or None: the pairwise proof that two teams' name scopes are disjoint."""
    e = Encoder(())
    solver = cvc5.Solver(e.tm)
    solver.setOption("produce-models", "true")
    solver.setOption("tlimit-per", str(TIME_LIMIT_MS))
    solver.setLogic("QF_SLIA")
    name = e.tm.mkConst(e.string, "name")
    solver.assertFormula(e.in_patterns(name, first, lower=True))
    solver.assertFormula(e.in_patterns(name, second, lower=True))
    result = solver.checkSat()
    if result.isUnknown():
        raise Unknown(f"overlap of {first} and {second}: no answer within {TIME_LIMIT_MS} ms")
    return solver.getValue(name).getStringValue() if result.isSat() else None
