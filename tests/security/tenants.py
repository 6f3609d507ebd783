"""The tenants of a synthesized organisation as an attacker sees them: every role a team can act
as, every resource that belongs to a team, and the requests one team makes against another's.

Ownership comes from the library's naming contract (role ``<team>-gpu-<kind>``, key alias
``alias/<org>/<team>``, a bucket encrypted with the team's key, quota share named after the team,
fair-share identifier = team), never from logical ids or stack names, so the proof reads any
organisation in either stack layout (``per_team`` puts each team's resources in its own stack of
the capacity account)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from constructs_lib.batch import TEAM_TAG
from constructs_lib.controllers.capacity import capacity_controller_role_name
from constructs_lib.controllers.reclaim import reclaim_controller_role_name
from constructs_lib.model import GovernanceModel, Team, submission_policy_name
from constructs_lib.tenancy import TRAINING_LOG_GROUP, training_job_name_patterns
from gpu_governance_runtime.contract import DISCOVERY_PARAMETER_ROOT, TAG_COST_CENTRE, submission_tags

from .iam_eval import Principal, Request, Template, World, as_list, unreadable_policy

ROLE_KINDS = ("submit", "training", "pods")
SAGEMAKER = Principal(service="sagemaker.amazonaws.com")
EKS_POD_IDENTITY = Principal(service="pods.eks.amazonaws.com")
TLS = {"aws:SecureTransport": ["true"]}


@dataclass
class Tenant:
    name: str
    roles: dict[str, str] = field(default_factory=dict)  # kind -> role ARN (kinds above, member:<arn>)
    key: str = ""
    bucket: str = ""
    quota_shares: list[tuple[str, str]] = field(default_factory=list)  # (queue ARN, share ARN)
    fair_share_queues: list[str] = field(default_factory=list)
    pod_sessions: list[dict] = field(
        default_factory=list
    )  # what EKS Pod Identity asks with, per association of the pods role
    repository: str = ""  # ECR repository ARN
    parameters: list[str] = field(default_factory=list)  # discovery parameter ARNs, one per pool
    submission_tags: dict[str, str] = field(default_factory=dict)  # what its own jobs carry (team, cost centre)
    access_log_bucket: str = ""  # the shared bucket its bucket's access logs go to, under "<team>/"


@dataclass
class Organisation:
    world: World
    tenants: dict[str, Tenant]
    capacity: Template  # one stack of the capacity account: its account and region name the ARNs
    organisation: str = ""
    controllers: dict[str, str] = field(default_factory=dict)  # "reclaim" / "capacity" -> role ARN, where deployed


def read_organisation(model: GovernanceModel, templates: list[Template]) -> Organisation:
    world = World()
    tenants = {t.name: Tenant(t.name, submission_tags=submission_tags(t.name, t.cost_centre)) for t in model.teams}
    in_capacity = [
        t
        for t in templates
        if (t.account, t.region) == (model.capacity_account.account_id, model.capacity_account.region)
    ]
    members = [arn for team in model.teams for arn in team.members]
    for template in templates:
        _read_identities(world, template, members)
        for logical_id, props in template.of_type("AWS::KMS::Key"):
            world.key_policies[template.get_att(logical_id, "Arn")] = template.resolve(props["KeyPolicy"])
        for _, props in template.of_type("AWS::S3::BucketPolicy"):
            bucket = template.resolve(props["Bucket"])
            world.bucket_policies.setdefault(bucket, []).append(template.resolve(props["PolicyDocument"]))
        for logical_id, _ in template.of_type("AWS::S3::Bucket"):
            world.bucket_accounts[template.ref(logical_id)] = template.account
        for logical_id, props in template.of_type("AWS::ECR::Repository"):
            if "RepositoryPolicyText" in props:
                world.repository_policies[template.get_att(logical_id, "Arn")] = template.resolve(
                    props["RepositoryPolicyText"]
                )
        for _, props in template.of_type("AWS::Organizations::Policy"):
            if props.get("Type") == "SERVICE_CONTROL_POLICY":
                _attach_scp(world, model, template.resolve(props["Content"]))
    for template in templates:
        _read_permission_set_policies(world, template, model)
    for team in model.teams:
        tenant = tenants[team.name]
        for role in identity_center_roles(model, team):
            tenant.roles[f"member:{role}"] = role
        for kind in ROLE_KINDS:
            arn = next((a for a in world.trust if a.endswith(f"/{team.name}-gpu-{kind}")), None)
            if arn:
                tenant.roles[kind] = arn
        for member in team.members:
            tenant.roles[f"member:{member}"] = member
    for template in in_capacity:
        _read_team_resources(template, model, tenants)
    for template in in_capacity:  # keys first: a bucket is the team's by its key, in any stack
        _read_team_buckets(template, tenants)
        _read_pod_identities(template, tenants)
    names = {
        "reclaim": reclaim_controller_role_name(model.organisation),
        "capacity": capacity_controller_role_name(model.organisation),
    }
    controllers = {kind: arn for kind, name in names.items() for arn in world.trust if arn.endswith(f"/{name}")}
    return Organisation(world, tenants, in_capacity[0], model.organisation, controllers)


def _read_team_resources(template: Template, model: GovernanceModel, tenants: dict[str, Tenant]) -> None:
    for _, props in template.of_type("AWS::KMS::Alias"):
        team = props["AliasName"].removeprefix(f"alias/{model.organisation}/")
        if team in tenants:
            tenants[team].key = template.resolve(props["TargetKeyId"])
    by_lowercase = {name.lower(): tenant for name, tenant in tenants.items()}
    for logical_id, props in template.of_type("AWS::ECR::Repository"):
        tenant = by_lowercase.get(props["RepositoryName"].removeprefix(f"{model.organisation}/"))
        if tenant:
            tenant.repository = template.get_att(logical_id, "Arn")
    for _, props in template.of_type("AWS::SSM::Parameter"):
        team, _, pool = (
            props["Name"].removeprefix(f"{DISCOVERY_PARAMETER_ROOT}/{model.organisation}/teams/").partition("/")
        )
        if team in tenants and pool:
            tenants[team].parameters.append(
                f"arn:aws:ssm:{template.region}:{template.account}:parameter{props['Name']}"
            )
    for _, props in template.of_type("AWS::Batch::QuotaShare"):
        queue = template.resolve(props["JobQueue"])
        tenants[props["QuotaShareName"]].quota_shares.append((queue, f"{queue}/quota-share/{props['QuotaShareName']}"))
    for logical_id, props in template.of_type("AWS::Batch::JobQueue"):
        policy_id = props["SchedulingPolicyArn"]["Fn::GetAtt"][0]
        for share in template.props(policy_id).get("FairsharePolicy", {}).get("ShareDistribution", []):
            tenants[share["ShareIdentifier"]].fair_share_queues.append(template.get_att(logical_id, "JobQueueArn"))


def _read_team_buckets(template: Template, tenants: dict[str, Tenant]) -> None:
    for logical_id, props in template.of_type("AWS::S3::Bucket"):
        rules = template.resolve(props.get("BucketEncryption", {})).get("ServerSideEncryptionConfiguration", [])
        keys = {r["ServerSideEncryptionByDefault"].get("KMSMasterKeyID") for r in rules}
        for tenant in tenants.values():
            if tenant.key in keys:
                tenant.bucket = template.ref(logical_id)
                tenant.access_log_bucket = template.resolve(
                    props.get("LoggingConfiguration", {}).get("DestinationBucketName", "")
                )


def _read_pod_identities(template: Template, tenants: dict[str, Tenant]) -> None:
    """The request EKS Pod Identity makes to assume the role of an association: the session tags
    it sets from the association (and the cluster's account as the source)."""
    owners = {t.roles["pods"]: t for t in tenants.values() if "pods" in t.roles}
    for _, props in template.of_type("AWS::EKS::PodIdentityAssociation"):
        role = template.resolve(props["RoleArn"])
        if role in owners:
            owners[role].pod_sessions.append(
                {
                    "aws:SourceAccount": [template.account],
                    "aws:RequestTag/eks-cluster-name": [template.resolve(props["ClusterName"])],
                    "aws:RequestTag/kubernetes-namespace": [template.resolve(props["Namespace"])],
                    "aws:RequestTag/kubernetes-service-account": [template.resolve(props["ServiceAccount"])],
                }
            )


def _read_identities(world: World, template: Template, members: list[str]) -> None:
    """Identity policies by principal ARN: inline policies, AWS::IAM::Policy and managed
    policies attached to roles by reference or by name (imported member roles and users)."""
    role_arns: dict[str, str] = {}
    for logical_id, props in template.of_type("AWS::IAM::Role"):
        arn = template.get_att(logical_id, "Arn")
        role_arns[template.ref(logical_id)] = arn
        world.trust[arn] = template.resolve(props["AssumeRolePolicyDocument"])
        for policy in as_list(props.get("Policies")):
            world.add_identity(arn, template.resolve(policy["PolicyDocument"]))
    managed = {
        template.ref(k): template.resolve(p["PolicyDocument"]) for k, p in template.of_type("AWS::IAM::ManagedPolicy")
    }
    for logical_id, props in template.of_type("AWS::IAM::Role"):
        for policy_arn in template.resolve(as_list(props.get("ManagedPolicyArns"))):
            world.add_identity(
                template.get_att(logical_id, "Arn"), managed.get(policy_arn) or unreadable_policy(policy_arn)
            )
    for _, props in template.of_type("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        document = template.resolve(props["PolicyDocument"])
        for kind, names in (("role", props.get("Roles")), ("user", props.get("Users"))):
            for name in template.resolve(as_list(names)):
                if kind == "role" and name in role_arns:
                    world.add_identity(role_arns[name], document)
                    continue
                # Imported roles and users are attached by name: the declared members so named.
                for member in members:
                    if (
                        member.startswith(f"arn:aws:iam::{template.account}:{kind}/")
                        and member.rsplit("/", 1)[1] == name
                    ):
                        world.add_identity(member, document)


def identity_center_roles(model: GovernanceModel, team: Team) -> list[str]:
    """Roles IAM Identity Center may create for the team's permission sets: with the Identity
    Center region in the path and without (an instance in us-east-1), each with a suffix."""
    roles = []
    for permission_set in team.permission_sets:
        account = model.consumer_accounts[permission_set.account or team.account].account_id
        roles += [
            f"arn:aws:iam::{account}:role/aws-reserved/sso.amazonaws.com/eu-west-2/AWSReservedSSO_{permission_set.name}_0123456789abcdef",
            f"arn:aws:iam::{account}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_{permission_set.name}_fedcba9876543210",
        ]
    return roles


def _read_permission_set_policies(world: World, template: Template, model: GovernanceModel) -> None:
    """A permission set carries the team's submit policy of its account by name (docs/team-guide.md):
    its Identity Center roles there hold that policy."""
    for _, props in template.of_type("AWS::IAM::ManagedPolicy"):
        name = template.resolve(props.get("ManagedPolicyName"))
        for team in model.teams:
            if name == submission_policy_name(model.organisation, team.name):
                for role in identity_center_roles(model, team):
                    if role.split(":")[4] == template.account:
                        world.add_identity(role, template.resolve(props["PolicyDocument"]))


def _attach_scp(world: World, model: GovernanceModel, content: dict) -> None:
    """Beside AWS's default FullAWSAccess, on every account of the organisation but the
    management account (SCPs never apply there; the proof does not read target ids)."""
    management = model.guardrails.management_account.account_id if model.guardrails else None
    accounts = {model.capacity_account.account_id, *(a.account_id for a in model.consumer_accounts.values())}
    for account in accounts - {management}:
        world.scps.setdefault(account, [{"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}]).append(
            content
        )


# --- what one team asks of another ---------------------------------------------------------------


def _batch_arn(capacity: Template, resource: str) -> str:
    return f"arn:aws:batch:{capacity.region}:{capacity.account}:{resource}"


def log_streams(capacity: Template, team: str) -> list[str]:
    group = f"arn:aws:logs:{capacity.region}:{capacity.account}:log-group:{TRAINING_LOG_GROUP}"
    return [
        f"{group}:log-stream:{pattern.replace('*', 'job-1')}/algo-1-1700000000"
        for pattern in training_job_name_patterns(team)
    ]


def training_job_arns(capacity: Template, team: str) -> list[str]:
    """A training job of the team as created directly and as Batch creates it."""
    return [
        f"arn:aws:sagemaker:{capacity.region}:{capacity.account}:training-job/{p.replace('*', 'job-1')}"
        for p in training_job_name_patterns(team)
    ]


def secret_arn(capacity: Template, organisation: str, team: str) -> str:
    """A secret under the team's prefix, with the random suffix Secrets Manager appends."""
    return f"arn:aws:secretsmanager:{capacity.region}:{capacity.account}:secret:{organisation}/{team}/hf-token-AbCdEf"


def training_job(capacity: Template, name: str) -> dict[str, list[str]]:
    return {
        "aws:SourceArn": [f"arn:aws:sagemaker:{capacity.region}:{capacity.account}:training-job/{name}"],
        "aws:SourceAccount": [capacity.account],
    }


@dataclass(frozen=True)
class Probe:
    """One question: may ``principal`` do ``action`` on every one of ``resources`` (IAM authorises
    each resource of a request on its own), with the request's ``context`` plus each resource's
    own keys (its tags)?"""

    label: str
    action: str
    resources: tuple[str, ...]
    context: dict
    resource_context: tuple[dict, ...] = ()

    def allowed(self, world: World, principal: Principal) -> bool:
        extra = self.resource_context or tuple({} for _ in self.resources)
        return all(
            world.is_allowed(Request(principal, self.action, r, {**self.context, **e}))
            for r, e in zip(self.resources, extra, strict=False)
        )


def sent_tags(org: Organisation, attacker: str, victim: Tenant) -> Iterator[dict]:
    """The request tags an attacker may submit with: its team's name or the victim's, with its own
    cost centre, the victim's or none (the attacker's own tags included: its real submission)."""
    own = org.tenants[attacker].submission_tags if attacker in org.tenants else {}
    centres = {own.get(TAG_COST_CENTRE), victim.submission_tags.get(TAG_COST_CENTRE), None}
    for team in sorted({attacker, victim.name}):
        for centre in sorted(centres, key=str):
            tags = {TEAM_TAG: team, **({TAG_COST_CENTRE: centre} if centre else {})}
            yield {**{f"aws:RequestTag/{k}": [v] for k, v in tags.items()}, "aws:TagKeys": list(tags)}


def probes_against(org: Organisation, attacker: str, victim: Tenant) -> Iterator[Probe]:
    """Everything ``attacker``'s roles must not do to ``victim``; ``_reads`` are the Describe/List
    calls AWS cannot scope, asked so the proof shows exactly which cross-tenant reads remain."""
    capacity = org.capacity
    if victim.key:
        for action in (
            "kms:Decrypt",
            "kms:Encrypt",
            "kms:GenerateDataKey",
            "kms:ReEncryptFrom",
            "kms:DescribeKey",
            "kms:CreateGrant",
            "kms:PutKeyPolicy",
            "kms:ScheduleKeyDeletion",
        ):
            yield Probe(f"key {action}", action, (victim.key,), {})
    if victim.bucket:
        objects = f"arn:aws:s3:::{victim.bucket}/data/x"
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            yield Probe(f"bucket {action}", action, (objects,), TLS)
        for action in ("s3:ListBucket", "s3:PutBucketPolicy"):
            yield Probe(f"bucket {action}", action, (f"arn:aws:s3:::{victim.bucket}",), TLS)
    new_service_job = _batch_arn(capacity, "service-job/new")
    for queue, share in victim.quota_shares:
        for context in sent_tags(org, attacker, victim):
            yield Probe("submit into share", "batch:SubmitServiceJob", (queue, share, new_service_job), context)
    new_job = _batch_arn(capacity, "job/new")
    victim_definition = _batch_arn(capacity, f"job-definition/{victim.name}-train:1")
    for queue in victim.fair_share_queues:
        owned_by_victim = {f"aws:ResourceTag/{TEAM_TAG}": [victim.name]}
        for share in {attacker, victim.name}:
            for tags in sent_tags(org, attacker, victim):
                context = {"batch:ShareIdentifier": [share], **tags}
                yield Probe(
                    "submit with the team's job definition",
                    "batch:SubmitJob",
                    (queue, new_job, victim_definition),
                    context,
                    ({}, {}, owned_by_victim),
                )
    for role_kind, role in victim.roles.items():
        if role_kind.startswith("member:"):
            continue
        yield Probe(f"assume {role_kind} role", "sts:AssumeRole", (role,), {})
        for service in ("sagemaker.amazonaws.com", "pods.eks.amazonaws.com", "batch.amazonaws.com"):
            yield Probe(
                f"pass {role_kind} role to {service}", "iam:PassRole", (role,), {"iam:PassedToService": [service]}
            )
    for stream in log_streams(capacity, victim.name):
        for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
            yield Probe(f"write training logs {action}", action, (stream,), {})
    for job in training_job_arns(capacity, victim.name):
        for action in ("sagemaker:DescribeTrainingJob", "sagemaker:StopTrainingJob"):
            yield Probe(f"training job {action}", action, (job,), {})
    for stream in log_streams(capacity, victim.name):
        yield Probe("training logs logs:GetLogEvents", "logs:GetLogEvents", (stream,), {})
    if victim.repository:
        for action in (
            "ecr:BatchGetImage",
            "ecr:GetDownloadUrlForLayer",
            "ecr:PutImage",
            "ecr:InitiateLayerUpload",
            "ecr:BatchDeleteImage",
            "ecr:ListImages",
        ):
            yield Probe(f"images {action}", action, (victim.repository,), {})
    for parameter in victim.parameters:
        for action in ("ssm:GetParameter", "ssm:GetParameters"):
            yield Probe(f"discovery {action}", action, (parameter,), {})
    secret = secret_arn(capacity, org.organisation, victim.name)
    for action in ("secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret", "secretsmanager:PutSecretValue"):
        yield Probe(f"secret {action}", action, (secret,), {})
    for key in {victim.key, f"arn:aws:kms:{capacity.region}:{capacity.account}:alias/{org.organisation}/{attacker}"}:
        # Create a secret under B's prefix, even with A's own key.
        yield Probe(
            "secret secretsmanager:CreateSecret",
            "secretsmanager:CreateSecret",
            (secret,),
            {"secretsmanager:KmsKeyArn": [key]},
        )
    group = f"arn:aws:logs:{capacity.region}:{capacity.account}:log-group:{TRAINING_LOG_GROUP}"
    for action, resource in (
        ("batch:DescribeServiceJob", "*"),
        ("batch:ListServiceJobs", "*"),
        ("batch:DescribeJobs", "*"),
        ("batch:ListJobs", "*"),
        ("sagemaker:ListTrainingJobs", "*"),
        ("cloudwatch:GetMetricData", "*"),
        ("logs:DescribeLogStreams", group),
    ):
        yield Probe(f"read {action}", action, (resource,), {})


JOB_CONTROL = {
    "service-job": ("batch:TerminateServiceJob", "batch:UpdateServiceJob"),
    "job": ("batch:TerminateJob", "batch:CancelJob"),
}


def job_attack(org: Organisation, principal: Principal, attacker: str, victim: Tenant) -> list[str]:
    """Stop or reprioritise the victim's running jobs, directly or in two steps: remove or
    overwrite the team tag, then act on a job that now looks like the attacker's."""
    found = []
    world = org.world
    for kind, controls in JOB_CONTROL.items():
        job = _batch_arn(org.capacity, f"{kind}/victim-{victim.name}")
        tags = {TEAM_TAG: victim.name}
        steps = []
        as_resource = lambda: {f"aws:ResourceTag/{k}": [v] for k, v in tags.items()}  # noqa: E731
        if world.is_allowed(
            Request(principal, "batch:UntagResource", job, {**as_resource(), "aws:TagKeys": [TEAM_TAG]})
        ):
            tags, steps = {}, steps + ["UntagResource"]
        retag = {**as_resource(), f"aws:RequestTag/{TEAM_TAG}": [attacker], "aws:TagKeys": [TEAM_TAG]}
        if world.is_allowed(Request(principal, "batch:TagResource", job, retag)):
            tags, steps = {TEAM_TAG: attacker}, steps + ["TagResource"]
        for action in controls:
            if world.is_allowed(Request(principal, action, job, as_resource())):
                found.append(" then ".join(steps + [action]))
    return found
