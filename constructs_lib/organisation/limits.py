"""The hard limits of CloudFormation, IAM, CloudWatch and Lambda that the synthesized organisation
must stay within, checked twice:

- :func:`check_model` estimates from the model alone, before anything is synthesized
  (``gpu-governance validate`` and app.py), and names the setting to change;
- :func:`check_assembly` measures the synthesized templates (app.py's safety net after synthesis).

Both return :class:`Problem` lines (``path: what (value) - allowed``). No aws_cdk import: the
estimate runs in commands that synthesize nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from constructs_lib.backends import BACKENDS, backend_of
from constructs_lib.backends.base import limited_quota_shares
from constructs_lib.core.errors import Problem
from constructs_lib.model import GovernanceModel, Project, Team, account_of, is_arn_pattern

# CloudFormation, per stack. The CDK uploads every template to the bootstrap bucket, so the
# 1 MB limit of an S3 template applies, not the 51,200 bytes of a body passed inline.
MAX_RESOURCES = 500
MAX_TEMPLATE_BYTES = 1_048_576
MAX_OUTPUTS = 200
MAX_PARAMETERS = 200
# IAM (characters of the policy without whitespace; default quotas)
MAX_MANAGED_POLICIES_PER_ROLE = 10
MAX_MANAGED_POLICY_CHARACTERS = 6_144
MAX_INLINE_CHARACTERS_PER_ROLE = 10_240
MAX_TRUST_POLICY_CHARACTERS = 2_048
# CloudWatch: per dashboard
MAX_DASHBOARD_WIDGETS = 500
MAX_DASHBOARD_METRICS = 2_500
# The reclaim controller's dashboard of one pool (controllers/reclaim.py): a heading, one graph per
# share metric, then the pool's own graphs (HyperPod EKS: waiting workloads; Batch: pending work,
# preemptions, capacity-seconds lost). Every graph is one search expression over the pool's teams,
# so neither count grows with them. Each backend declares its count (constructs_lib/backends/).
RECLAIM_DASHBOARD_WIDGETS = {
    name: b.reclaim_dashboard_widgets for name, b in BACKENDS.items() if b.reclaim_dashboard_widgets
}
# Lambda: the unzipped deployment package that carries the compiled policy document
MAX_LAMBDA_UNZIPPED_BYTES = 262_144_000

# What one team adds to the stack that holds its resources, per backend of the pools it is in
# (tests/scale/test_limits.py compares these with a synthesis). TEAM_BASE: key, alias, bucket,
# bucket policy, training and submission roles, data / training-runtime / pass-role / member-access
# policies, image repository.
TEAM_BASE = 11
# batch_quota_share: quota share, submit policy, starvation alarm; batch_fair_share: submit policy,
# alarm; hyperpod_eks: compute quota, describe policy, pod role, pod identity, namespace wait,
# Kubernetes objects (plus one access entry per principal, counted apart); each pool: the team's
# discovery parameter. Each backend declares its count (``Backend.team_resources``).
TEAM_PER_POOL = {name: b.team_resources for name, b in BACKENDS.items()}
# Chargeback (constructs_lib/organisation/chargeback.py): a team in a Batch pool (observed by the reclaim
# controller) gets a usage dashboard and the policy that reads it, and with an owner an alert topic
# and its subscription; a team with a monthly budget, the budget.
TEAM_DASHBOARD, TEAM_OWNER_TOPIC, TEAM_BUDGET = 2, 2, 1
# The submission guard (constructs_lib/controllers/guard.py): a team in a quota-share pool with an owner
# gets the guard's owner topic, its TLS-only policy and the owner's subscription.
TEAM_GUARD_TOPIC = 3
# Shared: access-log bucket and policy; per pool its queue / cluster-level resources (hyperpod_eks:
# scheduler config, kubectl provider and its access entry; platform admins' entries apart).
SHARED_BASE = 2
# Batch pools: plus the reclaim controller's PoolErrors alarm and dashboard of the pool (EKS: its dashboard).
SHARED_PER_POOL = {name: b.shared_resources for name, b in BACKENDS.items()}  # ``Backend.shared_resources``
SHARED_DEDICATED_NODES = 10  # custom resource, handler, roles, policies, log group of dedicated groups
SHARED_RECLAIM = 15  # when a Batch pool exists: controller, ledger, key, topic, queue, alarms
SHARED_GUARD = 22  # when a quota-share pool exists: guard, ledger, key, topic, queue, its two rules, retries, 7 alarms
SHARED_CAPACITY_CONTROLLER = 31  # when capacity windows exist (with the Capacity Request rule and its permission)
# Chargeback: the organisation's usage dashboard (with a Batch pool or capacity windows), the
# purchases budget (with windows), one subscription per alert email on each controller's topic.
SHARED_USAGE_DASHBOARD, SHARED_PURCHASES_BUDGET = 1, 1
# Other engineers add resources per team (tenant isolation); the estimate keeps a margin for that.
MARGIN = 1.15
# Measured about 1,300 bytes per resource in team and capacity stacks (1,460 in the capacity
# stack of 300 generated teams); of the shared resources only the fair-share policy (its share
# distribution) grows with the teams, counted apart (``Backend.template_bytes_per_team``).
BYTES_PER_RESOURCE = 2_000
# The reclaim controller's inline policy: fixed part, plus a queue ARN per Batch pool (no team
# names: it may stop any job that carries a team tag, controllers/reclaim.py).
RECLAIM_POLICY_BASE = 2_500
_TRUST_POLICY_BASE = len(
    '{"Statement":[{"Action":"sts:AssumeRole","Effect":"Allow","Principal":{"AWS":[]}}],"Version":"2012-10-17"}'
)


@dataclass(frozen=True)
class StackEstimate:
    name: str
    resources: int
    template_bytes: int
    path: str  # the model path that grows this stack


def _is_batch(pool) -> bool:
    # A Batch pool's queue joins the reclaim controller's targets, with the team dashboards that draw them.
    return backend_of(pool).family == "batch"


def _access_entries(team: Team, pool) -> int:
    cluster_account = account_of(pool.cluster_arn)
    return 1 + sum(1 for arn in team.members if account_of(arn) == cluster_account)


def team_resources(model: GovernanceModel, team: Team) -> int:
    """Resources of one team, wherever the layout puts them (before the margin)."""
    count = TEAM_BASE + (TEAM_BUDGET if team.monthly_budget_usd is not None else 0)
    if any(_is_batch(model.pool(p)) for p in team.quotas):
        count += TEAM_DASHBOARD + (TEAM_OWNER_TOPIC if team.owner else 0)
    if team.owner and any(backend_of(model.pool(p)).guards_submissions for p in team.quotas):
        count += TEAM_GUARD_TOPIC
    for pool_name in team.quotas:
        pool = model.pool(pool_name)
        count += TEAM_PER_POOL[pool.backend]
        if backend_of(pool).eks_access_entries:
            count += _access_entries(team, pool)
    return count


def submission_role_policies(model: GovernanceModel, team: Team) -> int:
    """Managed policies on the team's submission role: DataAccess, PassTrainingRole and
    MemberAccess, one submit policy per Batch pool, one describe policy per EKS pool, and
    ReadDashboard with a Batch pool."""
    pools = [model.pool(p) for p in team.quotas]
    return 3 + sum(1 for p in pools if backend_of(p).submission_policy) + any(_is_batch(p) for p in pools)


def shared_resources(model: GovernanceModel) -> int:
    count = SHARED_BASE
    for pool in model.pools:
        count += SHARED_PER_POOL[pool.backend]
        if backend_of(pool).eks_access_entries:
            count += len(model.platform_admins)
            if any(
                t.kubernetes.get(pool.name) and t.kubernetes[pool.name].dedicated_instance_groups
                for t in model.teams_in(pool.name)
            ):
                count += SHARED_DEDICATED_NODES
    emails = len({target for target in model.alerts if not target.startswith("arn:")})
    if any(_is_batch(p) for p in model.pools):
        count += SHARED_RECLAIM + emails
    if any(backend_of(p).guards_submissions for p in model.pools):
        count += SHARED_GUARD + emails
    if model.capacity_windows:
        count += SHARED_CAPACITY_CONTROLLER + emails + SHARED_PURCHASES_BUDGET
    if model.capacity_windows or any(_is_batch(p) for p in model.pools):
        count += SHARED_USAGE_DASHBOARD
    return count + sum(unified_studio_resources(model, project) for project in model.projects)


def unified_studio_resources(model: GovernanceModel, project: Project) -> int:
    """The DataZone resources of one project in the capacity stack (organisation/unified_studio.py):
    a new domain unit and project, the policy grants, one membership per person, one connection
    per HyperPod cluster its teams use; none without ``unified_studio``."""
    studio = project.unified_studio
    if studio is None:
        return 0
    return (
        (studio.domain_unit is not None)
        + (studio.project_id is None)
        + len(studio.policy_grants)
        + len(project.designations())
        + len(model.hyperpod_pools_of(project))
    )


def _shared_bytes(model: GovernanceModel) -> int:
    return sum(len(model.teams_in(p.name)) * backend_of(p).template_bytes_per_team for p in model.pools)


def estimate(model: GovernanceModel) -> list[StackEstimate]:
    """The capacity-account stacks the reference app would synthesize, with margins applied."""

    def sized(name: str, resources: int, extra_bytes: int, path: str) -> StackEstimate:
        resources = int(resources * MARGIN) + 1
        return StackEstimate(name, resources, resources * BYTES_PER_RESOURCE + extra_bytes, path)

    shared, extra = shared_resources(model), _shared_bytes(model)
    if model.stack_layout == "single":
        return [
            sized(
                f"{model.organisation}-capacity",
                shared + sum(team_resources(model, t) for t in model.teams),
                extra,
                "stack_layout",
            )
        ]
    return [sized(f"{model.organisation}-capacity", shared, extra, "pools")] + [
        sized(f"{model.organisation}-team-{t.name}", team_resources(model, t), 0, f"teams[{i}]")
        for i, t in enumerate(model.teams)
    ]


def check_model(model: GovernanceModel) -> list[Problem]:
    """Every limit the synthesis or the deployment of ``model`` would hit, estimated."""
    problems: list[Problem] = []
    remedy = "set stack_layout: per_team" if model.stack_layout == "single" else "fewer pools or teams per stack"
    for stack in estimate(model):
        if stack.resources > MAX_RESOURCES:
            problems.append(
                Problem(
                    path=stack.path,
                    wrong=f"stack {stack.name} would hold about {stack.resources} resources",
                    value=model.stack_layout,
                    allowed=f"at most {MAX_RESOURCES} per stack; {remedy}",
                )
            )
        if stack.template_bytes > MAX_TEMPLATE_BYTES:
            problems.append(
                Problem(
                    path=stack.path,
                    wrong=f"template of stack {stack.name} would be about {stack.template_bytes} bytes",
                    value=model.stack_layout,
                    allowed=f"at most {MAX_TEMPLATE_BYTES} bytes per template; {remedy}",
                )
            )
    for index, team in enumerate(model.teams):
        path = f"teams[{index}]"
        if model.stack_layout == "per_team" and "_" in team.name:
            problems.append(
                Problem(
                    path=f"{path}.name",
                    wrong="not usable in a stack name (stack_layout per_team)",
                    value=team.name,
                    allowed="letters, digits and '-'",
                )
            )
        policies = submission_role_policies(model, team)
        if policies > MAX_MANAGED_POLICIES_PER_ROLE:
            problems.append(
                Problem(
                    path=f"{path}.quotas",
                    wrong="too many managed policies on the team's submission role (one per Batch or EKS pool, plus 3, plus its usage dashboard's)",
                    value=policies,
                    allowed=f"at most {MAX_MANAGED_POLICIES_PER_ROLE} (IAM default quota): fewer pools per team",
                )
            )
        trust = submission_trust_characters(model.member_principals(team))
        if trust > MAX_TRUST_POLICY_CHARACTERS:
            problems.append(
                Problem(
                    path=f"{path}.members",
                    wrong="trust policy of the submission role too long (characters)",
                    value=trust,
                    allowed=f"at most {MAX_TRUST_POLICY_CHARACTERS}: fewer members, e.g. one role the people assume",
                )
            )
    problems += _reclaim_problems(model)
    problems += _policy_document_problems(model)
    problems += _guardrail_problems(model)
    return problems


# One statement of the submission role's trust (tenancy.member_trust): the members' accounts as
# principal, their ARNs under aws:PrincipalArn, the organisation condition at its longest.
_TRUST_STATEMENT = len(
    '{"Action":"sts:AssumeRole","Condition":{"ArnEquals":{"aws:PrincipalArn":[]},"StringEquals":'
    '{"aws:PrincipalOrgID":"o-0123456789abcdefghijklmnopqrstuv"}},"Effect":"Allow","Principal":{"AWS":[]}},'
)


def submission_trust_characters(principals: tuple[str, ...]) -> int:
    """An upper bound of the submission role's trust policy size: a statement per kind (exact,
    pattern), each ARN once and each account root once per statement."""
    kinds = {is_arn_pattern(arn) for arn in principals}
    roots = {(is_arn_pattern(arn), account_of(arn)) for arn in principals}
    return (
        _TRUST_POLICY_BASE
        + len(kinds) * _TRUST_STATEMENT
        + sum(len(arn) + 3 for arn in principals)
        + len(roots) * (len("arn:aws-us-gov:iam::123456789012:root") + 3)
    )


def _reclaim_problems(model: GovernanceModel) -> list[Problem]:
    batch_pools = [p for p in model.pools if _is_batch(p)]
    if not batch_pools:
        return []
    problems = []
    for index, pool in enumerate(model.pools):
        widgets = RECLAIM_DASHBOARD_WIDGETS.get(pool.backend, 0)
        metrics = widgets - 1  # one search expression per graph, none in the heading
        for what, value, limit in (
            ("widgets", widgets, MAX_DASHBOARD_WIDGETS),
            ("metrics", metrics, MAX_DASHBOARD_METRICS),
        ):
            if value > limit:
                problems.append(
                    Problem(
                        path=f"pools[{index}]",
                        wrong=f"the pool's reclaim dashboard would show too many {what}",
                        value=value,
                        allowed=f"at most {limit} per CloudWatch dashboard",
                    )
                )
    account, region = model.capacity_account.account_id, model.capacity_account.region
    queues = {p.name: f"arn:aws:batch:{region}:{account}:job-queue/{p.name}" for p in batch_pools}
    switched = limited_quota_shares(
        {p: q for p, q in queues.items() if backend_of(model.pool(p)).gpu_hour_switch == "quota_share"},
        model,
    )
    size = RECLAIM_POLICY_BASE + sum(len(arn) + 3 for arn in [*queues.values(), *switched])
    if size > MAX_INLINE_CHARACTERS_PER_ROLE:
        problems.append(
            Problem(
                path="pools",
                wrong="the reclaim controller's policy would be too long (characters; it names every Batch pool's job queue "
                "and the quota shares it switches at GPU-hour limits)",
                value=size,
                allowed=f"at most {MAX_INLINE_CHARACTERS_PER_ROLE} inline per role",
            )
        )
    return problems


def _policy_document_problems(model: GovernanceModel) -> list[Problem]:
    from constructs_lib.model.policy import policy_json
    from gpu_governance_runtime import __file__ as runtime_init

    package = sum(f.stat().st_size for f in Path(runtime_init).parent.rglob("*") if f.is_file())
    size = package + len(policy_json(model).encode())
    if size <= MAX_LAMBDA_UNZIPPED_BYTES:
        return []
    return [
        Problem(
            path="teams",
            wrong="compiled policy document and controller code too large for Lambda (bytes)",
            value=size,
            allowed=f"at most {MAX_LAMBDA_UNZIPPED_BYTES} unzipped",
        )
    ]


def _guardrail_problems(model: GovernanceModel) -> list[Problem]:
    if model.guardrails is None:
        return []
    # The guardrails module builds the documents (and imports aws_cdk): only when declared.
    from constructs_lib.organisation.guardrails import guardrail_size_problems

    return guardrail_size_problems(model, model.guardrails)


# --- after synthesis --------------------------------------------------------------------------


def _size(document: Any) -> int:
    # Intrinsic functions stand for ARNs of about the same length; close enough for a safety net.
    return len(json.dumps(document, separators=(",", ":")))


def check_template(name: str, template: dict, body_bytes: int) -> list[Problem]:
    """The per-stack limits of one synthesized template."""
    problems = []
    resources = template.get("Resources", {})
    for section, limit in (("Resources", MAX_RESOURCES), ("Outputs", MAX_OUTPUTS), ("Parameters", MAX_PARAMETERS)):
        count = len(template.get(section, {}))
        if count > limit:
            problems.append(
                Problem(
                    path=f"{name}.{section}", wrong="too many in one stack", value=count, allowed=f"at most {limit}"
                )
            )
    if body_bytes > MAX_TEMPLATE_BYTES:
        problems.append(
            Problem(
                path=name, wrong="template too large (bytes)", value=body_bytes, allowed=f"at most {MAX_TEMPLATE_BYTES}"
            )
        )
    managed: dict[str, int] = {}
    inline: dict[str, int] = {}
    for logical_id, resource in resources.items():
        kind, props = resource.get("Type"), resource.get("Properties", {})
        roles = [r["Ref"] for r in props.get("Roles", []) if isinstance(r, dict) and "Ref" in r]
        if kind == "AWS::IAM::ManagedPolicy":
            size = _size(props.get("PolicyDocument", {}))
            if size > MAX_MANAGED_POLICY_CHARACTERS:
                problems.append(
                    Problem(
                        path=f"{name}.{logical_id}",
                        wrong="managed policy too long (characters)",
                        value=size,
                        allowed=f"at most {MAX_MANAGED_POLICY_CHARACTERS}",
                    )
                )
            for role in roles:
                managed[role] = managed.get(role, 0) + 1
        elif kind == "AWS::IAM::Policy":
            for role in roles:
                inline[role] = inline.get(role, 0) + _size(props.get("PolicyDocument", {}))
        elif kind == "AWS::IAM::Role":
            managed[logical_id] = managed.get(logical_id, 0) + len(props.get("ManagedPolicyArns", []))
            inline[logical_id] = inline.get(logical_id, 0) + sum(
                _size(p.get("PolicyDocument", {})) for p in props.get("Policies", [])
            )
            trust = _size(props.get("AssumeRolePolicyDocument", {}))
            if trust > MAX_TRUST_POLICY_CHARACTERS:
                problems.append(
                    Problem(
                        path=f"{name}.{logical_id}",
                        wrong="trust policy too long (characters)",
                        value=trust,
                        allowed=f"at most {MAX_TRUST_POLICY_CHARACTERS}",
                    )
                )
    for role, count in managed.items():
        if count > MAX_MANAGED_POLICIES_PER_ROLE:
            problems.append(
                Problem(
                    path=f"{name}.{role}",
                    wrong="too many managed policies on one role",
                    value=count,
                    allowed=f"at most {MAX_MANAGED_POLICIES_PER_ROLE}",
                )
            )
    for role, size in inline.items():
        if size > MAX_INLINE_CHARACTERS_PER_ROLE:
            problems.append(
                Problem(
                    path=f"{name}.{role}",
                    wrong="inline policies of one role too long (characters)",
                    value=size,
                    allowed=f"at most {MAX_INLINE_CHARACTERS_PER_ROLE}",
                )
            )
    return problems


def template_files(outdir: str | Path) -> Iterable[Path]:
    """The stack templates of a cloud assembly, nested assemblies (Stages) included."""
    return sorted(Path(outdir).rglob("*.template.json"))


def check_assembly(outdir: str | Path) -> list[Problem]:
    problems: list[Problem] = []
    for path in template_files(outdir):
        problems += check_template(
            path.name.removesuffix(".template.json"), json.loads(path.read_text()), path.stat().st_size
        )
    return problems
