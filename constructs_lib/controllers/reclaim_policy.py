"""The reclaim controller's role policy (controllers/reclaim.py): one statement group per thing the
controller reads or acts on, each only when a governed pool needs it, and the acknowledgements of
what the policy must leave wide. The statements are pure values; the controller adds them to its
role in the order ``statements`` returns them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from aws_cdk import ArnFormat, Stack, aws_iam as iam
from constructs import IConstruct

from constructs_lib.backends import backend_of
from constructs_lib.backends.base import limited_quota_shares
from constructs_lib.core.acknowledgements import acknowledge, acknowledge_wildcard_resources
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime.contract import TAG_REQUEUED_FROM, TAG_TEAM as TEAM_TAG

if TYPE_CHECKING:
    from constructs_lib.controllers.reclaim import ReclaimTarget


def statements(
    stack: Stack,
    model: GovernanceModel,
    targets: Sequence[ReclaimTarget],
    usage_targets: Sequence[ReclaimTarget],
    *,
    ledger_arn: str,
    raised_guarantees: str | None,
) -> list[iam.PolicyStatement]:
    """Every statement of the role, the ledger's first."""
    return [
        iam.PolicyStatement(
            actions=["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"], resources=[ledger_arn]
        ),
        *_job_statements(stack, model, targets),
        *_snapshot_statements(model, targets),
        *_eks_cluster_statements(stack, model, targets),
        *_head_node_statements(stack, model, (*targets, *usage_targets)),
        *_gpu_hour_limit_statements(stack, model, targets),
        *_service_job_hold_statements(stack, model, targets),
        *_raised_guarantees_statements(stack, raised_guarantees),
    ]


def observed_eks_clusters(model: GovernanceModel, targets: Sequence[ReclaimTarget]) -> list[str]:
    """The names of the EKS clusters whose ClusterQueues the controller reads, sorted."""
    return sorted(
        {model.pool(t.pool).eks_cluster_name for t in targets if backend_of(model.pool(t.pool)).eks_access_entries}
    )


def _terminates_jobs(model: GovernanceModel, targets: Sequence[ReclaimTarget]) -> list[ReclaimTarget]:
    """The targets whose backend reclaims by terminating Batch jobs (fair share)."""
    return [t for t in targets if backend_of(model.pool(t.pool)).reclaim_terminates_jobs]


def _jobs_arn(stack: Stack) -> str:
    return stack.format_arn(
        service="batch", resource="job", resource_name="*", arn_format=ArnFormat.SLASH_RESOURCE_NAME
    )


def _job_statements(
    stack: Stack, model: GovernanceModel, targets: Sequence[ReclaimTarget]
) -> list[iam.PolicyStatement]:
    """Reading Batch jobs; on fair-share pools, terminating a victim and submitting its copy."""
    found = []
    if any(backend_of(model.pool(t.pool)).family == "batch" for t in targets):
        found.append(iam.PolicyStatement(actions=["batch:ListJobs", "batch:DescribeJobs"], resources=["*"]))
    fair_share = _terminates_jobs(model, targets)
    if not fair_share:
        return found
    # TerminateJob authorizes on the job only, with no queue condition key: the jobs of
    # this account and region that carry a team tag, as every job of a governed queue does
    # (backends/batch_queue.py _team_tag_statements). Not a list of the teams: it reached IAM's
    # 10,240 characters per role at about 420 fair-share teams.
    jobs = _jobs_arn(stack)
    found.append(
        iam.PolicyStatement(
            actions=["batch:TerminateJob"],
            resources=[jobs],
            conditions={"Null": {f"aws:ResourceTag/{TEAM_TAG}": "false"}},
        )
    )
    # Batch does not retry a terminated job: the handler submits each victim's copy to the
    # victim's queue (a governed pool's, whose shares are its teams) under a share, with its
    # tags (common/batch_copy.py): the team tag among them, so every job of a governed queue
    # carries one [aws: batch-iam.tag-on-create-context]. No team is named: a team list would
    # grow this inline policy past IAM's 10,240 characters.
    found.append(
        iam.PolicyStatement(
            actions=["batch:SubmitJob"],
            resources=[
                *(t.job_queue_arn for t in fair_share),
                stack.format_arn(
                    service="batch",
                    resource="job-definition",
                    resource_name="*",
                    arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                ),
                jobs,
            ],
            # batch:ShareIdentifier [aws: batch-iam.submit-job-share-identifier]
            conditions={"Null": {"batch:ShareIdentifier": "false", f"aws:RequestTag/{TEAM_TAG}": "false"}},
        )
    )
    # The copy's tags, authorised as batch:TagResource inside SubmitJob: documented keys only
    # (backends/batch_queue.py _team_tag_statements), a copy's tag set (a team and the requeue mark).
    found.append(
        iam.PolicyStatement(
            actions=["batch:TagResource"],
            resources=[jobs],
            conditions={"Null": {f"aws:RequestTag/{key}": "false" for key in (TEAM_TAG, TAG_REQUEUED_FROM)}},
        )
    )
    return found


def _snapshot_statements(model: GovernanceModel, targets: Sequence[ReclaimTarget]) -> list[iam.PolicyStatement]:
    """The observed quota-share queues' snapshots and each share's waiting jobs."""
    observed = [t.job_queue_arn for t in targets if backend_of(model.pool(t.pool)).reclaim_reads_snapshot]
    if not observed:
        return []
    return [
        iam.PolicyStatement(actions=["batch:GetJobQueueSnapshot"], resources=observed),
        # each share's waiting jobs; these two support no resource-level permission
        iam.PolicyStatement(actions=["batch:ListServiceJobs", "batch:DescribeServiceJob"], resources=["*"]),
    ]


def _eks_cluster_statements(
    stack: Stack, model: GovernanceModel, targets: Sequence[ReclaimTarget]
) -> list[iam.PolicyStatement]:
    """The usage observer finds each cluster's endpoint and CA; Kubernetes RBAC decides the rest."""
    clusters = observed_eks_clusters(model, targets)
    if not clusters:
        return []
    return [
        iam.PolicyStatement(
            actions=["eks:DescribeCluster"],
            resources=[stack.format_arn(service="eks", resource="cluster", resource_name=name) for name in clusters],
        )
    ]


def _head_node_statements(
    stack: Stack, model: GovernanceModel, targets: Sequence[ReclaimTarget]
) -> list[iam.PolicyStatement]:
    """Shell commands on the Slurm head nodes, through SSM Run Command."""
    head_nodes = [t.head_node_instance_id for t in targets if backend_of(model.pool(t.pool)).reached_on_head_node]
    if not head_nodes:
        return []
    document = run_shell_script_arn(stack)
    return [
        iam.PolicyStatement(
            actions=["ssm:SendCommand"], resources=[document, *(ssm_target_arn(stack, n) for n in head_nodes)]
        ),
        iam.PolicyStatement(actions=["ssm:CancelCommand", "ssm:GetCommandInvocation"], resources=["*"]),
    ]


def run_shell_script_arn(stack: Stack) -> str:
    """The AWS-owned SSM document both controllers run on Slurm head nodes (no account in its ARN)."""
    return stack.format_arn(
        service="ssm",
        account="",
        resource="document",
        resource_name="AWS-RunShellScript",
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )


def ssm_target_arn(stack: Stack, target_id: str) -> str:
    """The ARN SSM Run Command authorizes a head node by: an EC2 instance, or a managed instance (mi-)."""
    if target_id.startswith("i-"):
        return stack.format_arn(
            service="ec2", resource="instance", resource_name=target_id, arn_format=ArnFormat.SLASH_RESOURCE_NAME
        )
    return stack.format_arn(
        service="ssm", resource="managed-instance", resource_name=target_id, arn_format=ArnFormat.SLASH_RESOURCE_NAME
    )


def _gpu_hour_limit_statements(
    stack: Stack, model: GovernanceModel, targets: Sequence[ReclaimTarget]
) -> list[iam.PolicyStatement]:
    """The admission switches of exactly the teams with a GPU-hour limit (reclaim/gpu_hours.py):
    their quota shares, their compute quotas' clusters, and the default bus for the 80 % event."""
    switch = {t.pool: backend_of(model.pool(t.pool)).gpu_hour_switch for t in targets}
    limited = {
        t.pool: [team.name for team in model.teams_in(t.pool) if team.gpu_hour_limit] for t in targets if switch[t.pool]
    }
    limited = {pool: teams for pool, teams in limited.items() if teams}
    if not limited:
        return []
    queues = {t.pool: t.job_queue_arn for t in targets if t.pool in limited and switch[t.pool] == "quota_share"}
    found = [
        iam.PolicyStatement(
            actions=["events:PutEvents"],
            resources=[stack.format_arn(service="events", resource="event-bus", resource_name="default")],
        )
    ]
    if queues:
        found += [
            iam.PolicyStatement(actions=["batch:ListQuotaShares"], resources=sorted(queues.values())),
            iam.PolicyStatement(
                actions=["batch:DescribeQuotaShare", "batch:UpdateQuotaShare"],
                resources=limited_quota_shares(queues, model),
            ),
        ]
    clusters = sorted({model.pool(pool).cluster_arn for pool in limited if switch[pool] == "compute_quota"})
    if clusters:
        # Compute quota ARNs end in an id SageMaker generates: the quotas of the clusters' account and region.
        quotas = sorted({"{}:{}:{}:{}:{}:compute-quota/*".format(*cluster.split(":")[:5]) for cluster in clusters})
        found += [
            iam.PolicyStatement(actions=["sagemaker:ListComputeQuotas"], resources=["*"]),
            iam.PolicyStatement(
                actions=["sagemaker:DescribeComputeQuota", "sagemaker:UpdateComputeQuota"], resources=quotas
            ),
        ]
    return found


def _service_job_hold_statements(
    stack: Stack, model: GovernanceModel, targets: Sequence[ReclaimTarget]
) -> list[iam.PolicyStatement]:
    """A disabled quota share still starts the jobs submitted to it [aws: batch.quota-share-disabled]: the
    controller terminates a limited or paused team's queued service jobs (reclaim/gpu_hours.py, hold). Any
    governed team's (a team tag), not a list of the teams, which would outgrow IAM's inline policy limit."""
    if not any(
        team.gpu_hour_limit or team.paused
        for t in targets
        if backend_of(model.pool(t.pool)).gpu_hour_switch == "quota_share"
        for team in model.teams_in(t.pool)
    ):
        return []
    return [
        iam.PolicyStatement(
            actions=["batch:TerminateServiceJob"],
            resources=[
                stack.format_arn(
                    service="batch", resource="service-job", resource_name="*", arn_format=ArnFormat.SLASH_RESOURCE_NAME
                )
            ],
            conditions={"Null": {f"aws:ResourceTag/{TEAM_TAG}": "false"}},
        )
    ]


def _raised_guarantees_statements(stack: Stack, parameter: str | None) -> list[iam.PolicyStatement]:
    """Read-only, that one parameter (capacity/raised.py)."""
    if not parameter:
        return []
    return [
        iam.PolicyStatement(
            actions=["ssm:GetParameter"],
            resources=[stack.format_arn(service="ssm", resource="parameter", resource_name=parameter.lstrip("/"))],
        )
    ]


def acknowledge_policy(
    policy: IConstruct,
    statements: Sequence[iam.PolicyStatement],
    model: GovernanceModel,
    targets: Sequence[ReclaimTarget],
) -> None:
    """What the role's inline policy leaves wide, and why."""
    acknowledge(
        policy,
        "An inline policy keeps the preemption permission with this one role; a managed policy could be "
        "attached to other principals.",
        "IAMNoInlinePolicy",
    )
    acknowledge(
        policy,
        "The CDK KMS grant names these wildcards; the key is this controller's own and its policy lets "
        "this role only encrypt, decrypt and generate data keys.",
        "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
    )
    if _terminates_jobs(model, targets):
        acknowledge(
            policy,
            "The controller tags only the copy it submits of a job it stopped, with that job's tags (a team and "
            "gpu-governance:requeued-from). No documented condition key tells a job being submitted from an "
            "existing one (docs/aws-behaviour.md, batch-iam.tag-on-create-context), and a team list would grow "
            "this policy past IAM's size: it is trusted here as far as its TerminateJob already trusts it.",
            "GpuGovernance-JobControlWithoutShare[Action::batch:TagResource]",
        )
    acknowledge_wildcard_resources(
        policy,
        [r for s in statements for r in s.resources],
        "batch:ListJobs, batch:DescribeJobs, batch:ListServiceJobs, batch:DescribeServiceJob, ssm:GetCommandInvocation and ssm:CancelCommand "
        "support no resource-level permission; "
        "batch:TerminateJob authorizes only on the job ARN (no queue condition key): it is limited to this account "
        "and region's jobs tagged with a governed team, and the controller terminates only jobs it planned. "
        "A victim's copy is submitted with the victim's own job definition (any revision a team used, hence "
        "job-definition/*; job/* is the copy about to exist) to a governed queue under a share, with a team tag, and "
        "tagged with a copy's tags: a team and gpu-governance:requeued-from. "
        "sagemaker:ListComputeQuotas supports no resource-level permission, and a compute quota's ARN ends in an id SageMaker "
        "generates: the controller finds a team's by cluster and name and changes only its ActivationState at a GPU-hour limit. "
        "A service job's id does not exist before submission: batch:TerminateServiceJob is limited to service jobs tagged "
        "with a governed team, and the controller terminates only the queued jobs of a team over its GPU-hour limit or paused. "
        "Beyond MAX_NAMED_QUOTA_SHARES teams with a GPU-hour limit, a limited team's queue's quota-share/* (at most 20 shares a queue) "
        "keeps the inline policy within IAM's size.",
    )
    if "*" not in {r for s in statements for r in s.resources}:
        # Active tracing's xray:PutTraceSegments and xray:PutTelemetryRecords are on every controller's role.
        acknowledge_wildcard_resources(
            policy,
            ["*"],
            "xray:PutTraceSegments and xray:PutTelemetryRecords (the function's active tracing) support no "
            "resource-level permission.",
        )
