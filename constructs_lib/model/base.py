"""The model's base: the names, identifiers and limits every part of the model shares, the
frozen base class whose validation errors become `path: what is wrong (value) - what is allowed`
lines, and the names of the roles the library creates.

Nothing here knows a team, a pool or an organisation: those build on this module
(`organisation.py`, `capacity.py`, `slurm.py`).
"""

from __future__ import annotations

import copy
import difflib
import re
from decimal import Decimal
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from constructs_lib.core.errors import GovernanceError, Problem
from gpu_governance_runtime.contract import (
    BACKENDS,
    CONSUMER_FIELDS,
    HYPERPOD_NAMESPACE_PREFIX,
    discovery_parameter_path,
)

# --- names and identifiers ------------------------------------------------------------------

# [0-9], not \d: \d also matches other scripts' digits (a full-width account id would validate).
AccountId = Annotated[str, StringConstraints(pattern=r"^[0-9]{12}$")]
Region = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]$", max_length=32)]
PRINCIPAL_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]{1,512}$")
PrincipalArn = Annotated[str, StringConstraints(pattern=PRINCIPAL_ARN.pattern)]
# An IAM Identity Center permission set name: the sso-admin service model's PermissionSetName
# (CreatePermissionSet: 1-32 of [\w+=,.@-], \w being ASCII there).
PermissionSetName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_+=,.@-]{1,32}$")]
OrganizationId = Annotated[str, StringConstraints(pattern=r"^o-[a-z0-9]{10,32}$")]
# The CDK bootstrap template's own pattern for a qualifier.
BootstrapQualifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,10}$")]
DEFAULT_BOOTSTRAP_QUALIFIER = "hnb659fds"
# Team names become Batch quota share and fair-share identifiers, IAM role names (64 max with
# the longest suffix we add) and KMS aliases: 40 of [A-Za-z0-9_-] fits all of them.
TEAM_NAME_MAX = 40
TeamName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=TEAM_NAME_MAX)]
# HyperPod team names (and the Kubernetes namespaces made from them) are DNS labels.
HYPERPOD_TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Batch job queue / service environment names.
# Pool names: Batch names the scheduling policy <pool>-quota-share, within 128 characters.
QueueName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=128 - len("-quota-share"))
]
DnsLabel = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)]
# Instance types are short (ml.p4de.24xlarge); the cap keeps derived names within AWS limits.
SageMakerInstanceType = Annotated[str, StringConstraints(pattern=r"^ml\.[a-z0-9-]+\.[a-z0-9]+$", max_length=40)]
Ec2InstanceType = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", max_length=40)]
Count = Annotated[int, Field(ge=1, le=100_000)]

# Contacts for alerts and budgets: an email address, or an existing SNS topic (AWS Chatbot's
# Slack / Teams integrations subscribe to one) that the alarms also publish to.
EMAIL_PATTERN = r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}$"
SNS_TOPIC_ARN_PATTERN = r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$"
EmailAddress = Annotated[str, StringConstraints(pattern=EMAIL_PATTERN, max_length=254)]
AlertTarget = Annotated[str, StringConstraints(pattern=f"({EMAIL_PATTERN})|({SNS_TOPIC_ARN_PATTERN})", max_length=300)]
# A cost allocation tag value, on a team's resources and on a purchase: the characters AWS tags
# allow, up to 256 (https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html).
CostCentre = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9 _.:/=+@-]{1,256}$")]
UsdAmount = Annotated[Decimal, Field(gt=0, max_digits=12, decimal_places=2)]

MAX_PRIORITY_CLASSES = 10  # HyperPod cluster scheduler config limit
MAX_BORROW_LIMIT = 10_000  # percent; SageMaker BorrowLimit maximum (Batch has none)
MAX_HYPERPOD_BORROW_LIMIT = 500  # percent; the range SageMaker documents for HyperPod BorrowLimit
UNLIMITED: Literal["unlimited"] = "unlimited"


class _ReportingMeta(type(BaseModel)):  # pydantic's model metaclass, without a private import
    # Converting errors here rather than in __init__ matters: a custom __init__ would make
    # pydantic call it for nested models too, and nest one report inside another.
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as error:
            raise governance_error_from(error, cls) from None
        except _OrganisationProblems as error:
            raise GovernanceError(error.problems) from None


class OrganisationView(Protocol):
    """The governance model as the modules below ``organisation`` read it (capacity windows,
    instance types, projects and groups, principals, pools' teams, a backend's checks):
    ``GovernanceModel`` passes itself to their checks, and none of them
    imports it, not even for an annotation (tests/foundation/test_layers.py). Pools, teams and
    windows are the organisation's own types, which live above these modules."""

    @property
    def organisation(self) -> str: ...
    @property
    def capacity_account(self) -> Any: ...
    @property
    def pools(self) -> tuple[Any, ...]: ...
    @property
    def teams(self) -> tuple[Any, ...]: ...
    @property
    def priority_classes(self) -> tuple[Any, ...]: ...
    @property
    def capacity_windows(self) -> tuple[Any, ...]: ...
    @property
    def groups(self) -> tuple[Any, ...]: ...
    @property
    def allow_unlisted_instance_types(self) -> tuple[str, ...]: ...
    @property
    def consumer_accounts(self) -> dict[str, Any]: ...
    @property
    def external_accounts(self) -> tuple[str, ...]: ...
    @property
    def platform_admins(self) -> tuple[str, ...]: ...
    @property
    def projects(self) -> tuple[Any, ...]: ...
    @property
    def guardrails(self) -> Any: ...
    def teams_in(self, pool: str) -> tuple[Any, ...]: ...
    def members_quota(self, group: Any, pool: str) -> dict[str, int]: ...
    def hyperpod_pools_of(self, project: Any) -> tuple[Any, ...]: ...


class _Frozen(BaseModel, metaclass=_ReportingMeta):
    """Base for model objects: immutable, unknown keys rejected, errors as GovernanceError."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class _OrganisationProblems(Exception):
    def __init__(self, problems: list[Problem]):
        self.problems = problems


# SageMaker names a cluster and an instance group alike.
SAGEMAKER_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
InstanceGroupName = Annotated[str, StringConstraints(pattern=SAGEMAKER_NAME_PATTERN)]
HyperPodClusterName = Annotated[str, StringConstraints(pattern=SAGEMAKER_NAME_PATTERN)]
EksClusterName = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")]
ComputeEnvironmentArn = Annotated[
    str,
    StringConstraints(pattern=r"^arn:aws[a-z-]*:batch:[a-z0-9-]+:[0-9]{12}:compute-environment/[A-Za-z0-9_-]{1,128}$"),
]
JobQueueArn = Annotated[
    str, StringConstraints(pattern=r"^arn:aws[a-z-]*:batch:[a-z0-9-]+:[0-9]{12}:job-queue/[A-Za-z0-9_-]{1,128}$")
]
HyperPodClusterArn = Annotated[
    str, StringConstraints(pattern=r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/[a-z0-9]{12}$")
]


# --- roles the library creates -------------------------------------------------------------

ROLE_PATH = "/gpu-governance/"
"""The IAM path of every team role the library creates (submission, training, pods)."""
SUBMISSION_ROLE_SUFFIX, TRAINING_ROLE_SUFFIX, POD_ROLE_SUFFIX = "-gpu-submit", "-gpu-training", "-gpu-pods"
"""Team role names are ``<team><suffix>``; the suffixes also tell a library role from a member."""
_TEAM_ROLE_SUFFIXES = (SUBMISSION_ROLE_SUFFIX, TRAINING_ROLE_SUFFIX, POD_ROLE_SUFFIX)


def library_role(arn: str, organisation: str) -> str | None:
    """What ``arn`` is if it names a role this library (or the CDK deploying it) creates, else
    None. Such roles must never become a member, an admin or an exemption: another team's role
    or a controller would then act as a team or as the platform. Role names are unique ignoring
    case, so they are compared so."""
    kind, _, path_and_name = arn.split(":", 5)[-1].partition("/")
    if kind != "role":
        return None
    path_and_name = "/" + path_and_name.lower()
    name = path_and_name.rsplit("/", 1)[-1]
    if path_and_name.startswith(ROLE_PATH):
        return f"a role under the library's path {ROLE_PATH}"
    if name.endswith(_TEAM_ROLE_SUFFIXES):
        return f"named like a team role of the library (*{'/*'.join(_TEAM_ROLE_SUFFIXES)})"
    if name.startswith(f"{organisation}-capacity-".lower()):
        return f"named like a role of the capacity stack ({organisation}-capacity-*: the controllers)"
    if name.startswith("cdk-"):
        return "named like a CDK bootstrap role (cdk-*)"
    return None


# SageMaker Unified Studio names a project's IAM role datazone_usr_role_<project id>_<environment id>:
# every member of the project (owners, contributors, readers, people of the project's other teams) acts as it.
UNIFIED_STUDIO_PROJECT_ROLE_PREFIX = "datazone_usr_role_"


def project_role(arn: str) -> bool:
    """Whether ``arn`` is a SageMaker Unified Studio project's role, which every member of the project acts as."""
    kind, _, path_and_name = arn.split(":", 5)[-1].partition("/")
    return kind == "role" and path_and_name.rsplit("/", 1)[-1].lower().startswith(UNIFIED_STUDIO_PROJECT_ROLE_PREFIX)


def account_of(arn: str) -> str:
    return arn.split(":")[4]


# The repository name pattern of the ECR API; team names may hold what it refuses (a trailing
# '-' or '_', '___', '_-').
_ECR_NAME = re.compile(r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*")


def repository_name(organisation: str, team_name: str) -> str:
    """The team's ECR repository: ``<organisation>/<team>`` in lowercase (ECR accepts nothing
    else; team names are unique ignoring case, so no two teams share one)."""
    name = f"{organisation}/{team_name.lower()}"
    if not _ECR_NAME.fullmatch(name):
        raise GovernanceError.single(
            "teams.name",
            "cannot name an ECR repository (the team's image repository)",
            team_name,
            "letters and digits separated by single '-' runs, '_' or '__', not ending in '-' or '_'",
        )
    return name


def secrets_prefix(organisation: str, team_name: str) -> str:
    """Secrets Manager names the team's roles may read: ``<organisation>/<team>/...``."""
    return f"{organisation}/{team_name}/"


BATCH_TRAINING_JOB_PREFIX = "AWSBatch"
"""Batch's service-linked role may create only ``training-job/AWSBatch*`` (managed policy
AWSBatchServiceRolePolicyForSageMaker): Batch names the training jobs of service jobs so."""


def training_job_name_patterns(team_name: str) -> tuple[str, ...]:
    """Names a training job of the team may have: ``<team>-...`` when created directly, and the
    same after Batch's prefix when Batch creates it from a service job's payload (assumed to keep
    the payload's ``TrainingJobName`` [aws: batch-iam.training-job-name]). SageMaker writes each
    job's log streams under the same name."""
    return (f"{team_name}-*", f"{BATCH_TRAINING_JOB_PREFIX}{team_name}-*")


def team_name_scopes(organisation: str, team_name: str) -> dict[str, tuple[str, ...]]:
    """Every name scope the library derives from a team's name, as wildcard patterns with at most
    one trailing ``*``: what the team's policies (or HyperPod) hand to whoever holds the name. No
    two teams' scopes may overlap (:func:`scopes_overlap`, checked by ``check_organisation``)."""
    return {
        "training jobs and their log streams": training_job_name_patterns(team_name),
        "secrets": (f"{secrets_prefix(organisation, team_name)}*",),
        "discovery parameters": (
            discovery_parameter_path(organisation, team_name),
            f"{discovery_parameter_path(organisation, team_name)}/*",
        ),
        "access-log prefix": (f"{team_name}/*",),
        "HyperPod namespace": (f"{HYPERPOD_NAMESPACE_PREFIX}{team_name}", f"{HYPERPOD_NAMESPACE_PREFIX}{team_name}-*"),
    }


def scopes_overlap(first: str, second: str) -> bool:
    """Whether some name matches both patterns (a literal, or a literal and a trailing ``*``),
    ignoring case: SageMaker and Kubernetes names, ECR and the HyperPod CLI fold or refuse case,
    so a difference in case separates nothing."""
    a, b = first.lower(), second.lower()
    a_open, b_open = a.endswith("*"), b.endswith("*")
    a, b = a.rstrip("*"), b.rstrip("*")
    if a_open and b_open:
        return a.startswith(b) or b.startswith(a)
    if a_open or b_open:
        prefix, name = (a, b) if a_open else (b, a)
        return name.startswith(prefix)
    return a == b


def team_key_alias(organisation: str, team_name: str) -> str:
    """The alias of a team's data key."""
    return f"alias/{organisation}/{team_name}"


def aws_partition(region: str) -> str:
    """The ARN partition of a region (China and GovCloud have their own)."""
    return "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"


def submission_policy_name(organisation: str, team_name: str) -> str:
    """The customer managed policy each consumer account of a team holds that lets its members
    assume the team's submission role: named, so an Identity Center permission set can reference
    it (a permission set names customer managed policies by name and path, the same in every
    account it is assigned in)."""
    return f"{organisation}-{team_name}-gpu-submit"


def is_arn_pattern(arn: str) -> bool:
    """An ARN with IAM wildcards (an Identity Center role pattern), matched with ArnLike."""
    return "*" in arn or "?" in arn


def identity_center_role_patterns(account_id: str, permission_set: str, partition: str = "aws") -> tuple[str, str]:
    """The ARNs of the role IAM Identity Center creates in ``account_id`` for ``permission_set``:
    ``role/aws-reserved/sso.amazonaws.com/[<region>/]AWSReservedSSO_<name>_<suffix>``, with no region
    when the Identity Center instance is in us-east-1, and a suffix that changes whenever the role is
    re-created (https://docs.aws.amazon.com/singlesignon/latest/userguide/referencingpermissionsets.html).
    The roles' path is reserved to Identity Center, so nobody else can create a role matching them."""
    base = f"arn:{partition}:iam::{account_id}:role/aws-reserved/sso.amazonaws.com/"
    return f"{base}AWSReservedSSO_{permission_set}_*", f"{base}*/AWSReservedSSO_{permission_set}_*"


def team_role_arn(account_id: str, team_name: str, suffix: str, partition: str = "aws") -> str:
    """The ARN of a team role the library creates (``suffix`` one of the team role suffixes)."""
    return f"arn:{partition}:iam::{account_id}:role{ROLE_PATH}{team_name}{suffix}"


# --- pydantic errors as problems --------------------------------------------------------------

_ALLOWED_BY_TYPE = {
    "missing": "required",
    "extra_forbidden": "not a known setting; see `gpu-governance schema`",
    "literal_error": "allowed: {expected}",
    "enum": "allowed: {expected}",
    "string_pattern_mismatch": "must match {pattern}",
    "string_too_long": "at most {max_length} characters",
    "greater_than_equal": "at least {ge}",
    "less_than_equal": "at most {le}",
    "too_short": "at least {min_length} item(s)",
    "too_long": "at most {max_length} item(s)",
    "union_tag_invalid": "one of {expected_tags}",
    "union_tag_not_found": "one of {expected_tags}",
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping",
    "tuple_type": "a list",
    "list_type": "a list",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_REQUIRED_SHARING = (
    "required: a preset (preset: background, steady or critical in a file; preset=Preset.BACKGROUND, "
    "STEADY or CRITICAL for a Team) or a sharing strategy"
)
# Patterns said in words: a regular expression tells a reader little.
_PATTERN_WORDS = {
    r"^[0-9]{12}$": "12 digits, an AWS account id",
    r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/[a-z0-9]{12}$": (
        "a SageMaker HyperPod cluster ARN, arn:aws:sagemaker:<region>:<12-digit account>:cluster/<12 lowercase "
        "letters or digits> (aws sagemaker describe-cluster --cluster-name NAME --query ClusterArn)"
    ),
}


def governance_error_from(error: ValidationError, model: type[BaseModel] | None = None) -> GovernanceError:
    """Turn pydantic's report into our `path: what is wrong (value) - what is allowed` lines; an
    unknown setting of ``model`` gets the known name closest to it ("did you mean ...?")."""
    problems = []
    items = error.errors(include_url=False)
    failing_paths = {path_of(item["loc"]) for item in items}
    for item in items:
        location = path_of(item["loc"])
        kind = item["type"]
        if kind == "too_short" and any(p.startswith(location + "[") for p in failing_paths):
            continue  # a list whose items failed is not also too short
        if kind.startswith("union_tag"):  # the discriminator: a pool's backend, a feed's kind
            discriminator = (item.get("ctx") or {}).get("discriminator", "").strip("'")
            location += f".{discriminator}"
            if kind == "union_tag_not_found":  # pydantic names the tags only of one it found
                item = {**item, "ctx": {"expected_tags": ", ".join(_UNION_TAGS[discriminator])}}
        if kind == "missing" and (location == "sharing" or location.endswith(".sharing")):
            if location.removesuffix("sharing") + "preset" in failing_paths:
                continue  # the bad preset is the problem, already reported
            item = {**item, "ctx": None}
            template = _REQUIRED_SHARING
            named = item["input"].get("name") if isinstance(item.get("input"), dict) else None
            location = f"{location} of team {named!r}" if named else location
        else:
            template = _ALLOWED_BY_TYPE.get(kind)
        context = item.get("ctx") or {}
        if kind == "value_error":
            wrong, allowed = "invalid", str(context.get("error", item["msg"]))
        elif template is None:
            wrong, allowed = "invalid", item["msg"]
        else:
            wrong = "missing" if kind == "missing" else "invalid"
            if kind == "string_pattern_mismatch" and context.get("pattern") in _PATTERN_WORDS:
                template = _PATTERN_WORDS[context["pattern"]]
            try:
                allowed = template.format(**context)
            except (KeyError, IndexError):
                allowed = item["msg"]
        value = item.get("input") if kind != "missing" else None
        if kind == "extra_forbidden" and model is not None:
            close = closest_setting(model, item["loc"])
            allowed = f"not a known setting{f'; did you mean {close}?' if close else ''} (see `gpu-governance schema`)"
        problems.append(Problem(path=location, wrong=wrong, value=value, allowed=allowed))
    return GovernanceError(_dedupe(problems))


# A discriminator's tags: pools' backends and feeds' kinds.
_UNION_TAGS = {"backend": BACKENDS, "kind": tuple(CONSUMER_FIELDS)}
_PYDANTIC_BRANCH = re.compile(r"^(constrained-\w+|literal\[.*\]|function-\w+\[.*\]|int|str|bool|none)$")


def _is_union_tag(part: str) -> bool:
    return any(part in tags for tags in _UNION_TAGS.values())


def _steps(location: tuple[Any, ...]) -> list[Any]:
    """A pydantic location without its union branch names: the keys and indexes of the data."""
    return [
        part
        for part in location
        if isinstance(part, int) or not (_is_union_tag(str(part)) or _PYDANTIC_BRANCH.match(str(part)))
    ]


def known_settings(model: type[BaseModel], location: tuple[Any, ...]) -> list[str]:
    """The setting names the mapping at ``location`` may hold, from ``model``'s JSON Schema (every
    branch of a union: a pool's keys are those of any backend)."""
    schema = model.model_json_schema()
    definitions = schema.get("$defs", {})

    def branches(node: dict[str, Any]) -> list[dict[str, Any]]:
        if "$ref" in node:
            return branches(definitions[node["$ref"].rsplit("/", 1)[-1]])
        found = [node]
        for key in ("anyOf", "oneOf", "allOf"):
            for branch in node.get(key, ()):
                found += branches(branch)
        return found

    nodes = [schema]
    for step in _steps(location):
        inner = []
        for node in (b for n in nodes for b in branches(n)):
            if isinstance(step, int):
                inner += [node["items"]] if isinstance(node.get("items"), dict) else []
            elif step in node.get("properties", {}):
                inner.append(node["properties"][step])
            elif isinstance(node.get("additionalProperties"), dict):
                inner.append(node["additionalProperties"])
        nodes = inner
    return sorted({name for node in nodes for branch in branches(node) for name in branch.get("properties", {})})


def closest_setting(model: type[BaseModel], location: tuple[Any, ...]) -> str | None:
    """The known setting most like the unknown one at ``location``, if any is close."""
    close = difflib.get_close_matches(str(location[-1]), known_settings(model, location[:-1]), n=1)
    return close[0] if close else None


def without_settings(data: Any, locations: list[tuple[Any, ...]], renamed: dict[tuple[Any, ...], str]) -> Any:
    """A deep copy of ``data`` without the settings at ``locations`` (pydantic error locations),
    except those in ``renamed``, which move to the name given."""
    copied = copy.deepcopy(data)
    for location in locations:
        *parents, last = _steps(location)
        node = copied
        for step in parents:
            node = node[step]
        value = node.pop(last, None)
        if location in renamed:
            node[renamed[location]] = value
    return copied


def path_of(location: tuple[Any, ...]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _is_union_tag(str(part)) or _PYDANTIC_BRANCH.match(str(part)):
            continue  # pydantic's internal union branch names say nothing to a user
        else:
            text += f".{part}" if text else str(part)
    return text


def _dedupe(problems: list[Problem]) -> list[Problem]:
    # A value that fails every branch of `int | "unlimited" | None` yields one error per branch;
    # keep one line per path and say what all branches allow.
    by_path: dict[str, list[Problem]] = {}
    for problem in problems:
        by_path.setdefault(problem.path, []).append(problem)
    merged = []
    for path, items in by_path.items():
        if len(items) == 1:
            merged.append(items[0])
        else:
            allowed = "; or ".join(dict.fromkeys(p.allowed for p in items))
            merged.append(Problem(path=path, wrong=items[0].wrong, value=items[0].value, allowed=allowed))
    return merged


def duplicates(names: list[str], path: str, problems: list[Problem], allowed: str = "names must be unique") -> None:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            problems.append(Problem(path=f"{path}[{index}].name", wrong="duplicate name", value=name, allowed=allowed))
        seen.add(name)
