"""The capacity controller's role policy: what each kind of capacity, each consumer, each raised
quota and each Slurm head node its windows name lets it do, and why the wildcards that remain are
needed (the acknowledgements). ``grant_capacity`` is the one entry; the capacity controller calls it."""

from __future__ import annotations

from typing import Any

from aws_cdk import ArnFormat, Stack, aws_iam as iam

from constructs_lib.capacity_kinds import KINDS, KindGrant, kind_of
from constructs_lib.controllers.reclaim_policy import run_shell_script_arn, ssm_target_arn
from constructs_lib.core.acknowledgements import acknowledge, acknowledge_wildcard_resources
from constructs_lib.core.hyperpod_cluster_iam import acknowledge_update_cluster, update_cluster_statements
from constructs_lib.model import GovernanceModel
from constructs_lib.model.capacity import BatchComputeEnvironmentFeed, raising_windows
from gpu_governance_runtime.contract import (
    CONSUMER_BATCH_COMPUTE_ENVIRONMENT,
    CONSUMER_EKS_NODE_GROUP,
    CONSUMER_HYPERPOD_INSTANCE_GROUP,
    CONSUMER_SAGEMAKER_TRAINING_JOBS,
    PURCHASE_TAG_KEYS,
    TAG_MANAGED_BY,
    TAG_REQUEUED_FROM,
    raised_guarantees_parameter,
    team_training_plans_parameter,
)

TAG_KEYS = list(PURCHASE_TAG_KEYS)


def polls_team_spend(model: GovernanceModel) -> bool:
    """Whether the capacity controller reads each team's spend from Cost Explorer once a day:
    when a team declares a monthly budget, which needs the team tag activated for cost allocation anyway."""
    return any(team.monthly_budget_usd is not None for team in model.teams)


def grant_capacity(controller: Any, model: GovernanceModel) -> None:
    """Add to ``controller.role`` (a ``CapacityController``'s) what its windows need, then acknowledge
    the policy's wildcards. Statements in a fixed order: the kinds every run reads, the consumers, the
    kinds the windows buy, the quotas they raise, the parameters the controller publishes."""
    stack = Stack.of(controller)
    grant = _kind_grant(stack, controller.controller_id)
    feeds = [w.feeds for w in model.capacity_windows]
    bought = {kind_of(w).name for w in model.capacity_windows}
    statements = [s for kind in KINDS.values() if kind.granted_always for s in kind.statements(grant)]
    statements.append(
        iam.PolicyStatement(
            actions=["events:PutEvents"],
            resources=[stack.format_arn(service="events", resource="event-bus", resource_name="default")],
        )
    )
    statements += _consumer_statements(stack, grant, feeds)
    statements += [
        s for kind in KINDS.values() if not kind.granted_always and kind.name in bought for s in kind.statements(grant)
    ]
    statements += _quota_raise_statements(stack, model)
    statements += _parameter_statements(stack, model)
    requeue = _requeue_statements(grant) if _batch_feeds(feeds) else []
    pools = {p.name: p for p in model.pools}
    clusters = sorted({pools[f.pool].cluster_arn for f in feeds if f.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP})
    cluster = update_cluster_statements(controller, clusters) if clusters else []
    slurm = _slurm_statements(stack, model, controller.slurm_head_nodes)
    for statement in statements + requeue + cluster + slurm:
        controller.role.add_to_policy(statement)
    _acknowledge(controller.role.node.find_child("DefaultPolicy"), statements, requeue, cluster, slurm)


def _kind_grant(stack: Stack, controller_id: str) -> KindGrant:
    return KindGrant(
        arn=lambda service, resource: _every(stack, service, resource),
        tagged_by_us={
            "StringEquals": {f"aws:RequestTag/{TAG_MANAGED_BY}": controller_id},
            "ForAllValues:StringEquals": {"aws:TagKeys": TAG_KEYS},
        },
        managed_by_us={"StringEquals": {f"aws:ResourceTag/{TAG_MANAGED_BY}": controller_id}},
    )


def _every(stack: Stack, service: str, resource: str) -> str:
    """Every ``resource`` of ``service`` in the controller's region and account."""
    return stack.format_arn(
        service=service, resource=resource, resource_name="*", arn_format=ArnFormat.SLASH_RESOURCE_NAME
    )


def _batch_feeds(feeds: list[Any]) -> list[Any]:
    return [f for f in feeds if f.kind == CONSUMER_BATCH_COMPUTE_ENVIRONMENT]


def _consumer_statements(stack: Stack, grant: KindGrant, feeds: list[Any]) -> list[iam.PolicyStatement]:
    """Moving the window's consumers onto what was bought: launch templates, Batch compute
    environments and queues, EKS node groups (rotation.py, consumers.py)."""
    statements = []
    if any(hasattr(f, "launch_template_name") for f in feeds):
        statements += [
            iam.PolicyStatement(
                actions=["ec2:CreateLaunchTemplateVersion"], resources=[grant.arn("ec2", "launch-template")]
            ),
            # consumers.py: the zones of the consumer's subnets, where a block can be used (no resource-level permission).
            iam.PolicyStatement(actions=["ec2:DescribeSubnets"], resources=["*"]),
        ]
    batch_feeds = _batch_feeds(feeds)
    if batch_feeds:
        statements += [
            # rotation.py: only the block compute environments are updated and only their queues reordered; the on-demand
            # compute environments, where running work stays, are never touched.
            iam.PolicyStatement(
                actions=["batch:UpdateComputeEnvironment"],
                resources=sorted({f.block_compute_environment for f in batch_feeds}),
            ),
            iam.PolicyStatement(
                actions=list(BatchComputeEnvironmentFeed.queue_reorders),
                resources=sorted({f.job_queue for f in batch_feeds}),
            ),
            iam.PolicyStatement(
                actions=[
                    "batch:DescribeComputeEnvironments",
                    "batch:DescribeJobQueues",
                    "batch:ListJobs",
                    "batch:DescribeJobs",
                    "ec2:DescribeInstances",
                    "ec2:DescribeInstanceTypes",
                ],
                resources=["*"],
            ),
        ]
    node_groups = sorted(
        {
            stack.format_arn(
                service="eks", resource="nodegroup", resource_name=f"{f.cluster_name}/{f.nodegroup_name}/*"
            )
            for f in feeds
            if f.kind == CONSUMER_EKS_NODE_GROUP
        }
    )
    if node_groups:
        # rotation.py: read the node group, move its version, scale it up at a block's start and to zero before its end.
        statements.append(
            iam.PolicyStatement(
                actions=["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "eks:UpdateNodegroupVersion"],
                resources=node_groups,
            )
        )
    return statements


def _requeue_statements(grant: KindGrant) -> list[iam.PolicyStatement]:
    """Requeue at drain: the queue, job definition and ECS cluster are Batch's, known at run time only.
    A copy carries its original's tags and the requeue mark (common/batch_copy.py), which its
    submission and the tagging inside it must name: documented keys only [aws: batch-iam.tag-on-create-context]."""
    copy = {"Null": {f"aws:RequestTag/{TAG_REQUEUED_FROM}": "false"}}
    jobs = grant.arn("batch", "job")
    return [
        iam.PolicyStatement(actions=["ecs:ListContainerInstances"], resources=[grant.arn("ecs", "cluster")]),
        iam.PolicyStatement(actions=["batch:TerminateJob"], resources=[jobs]),
        iam.PolicyStatement(actions=["batch:TagResource"], resources=[jobs], conditions=copy),
        iam.PolicyStatement(
            actions=["batch:SubmitJob"],
            resources=[grant.arn("batch", "job-queue"), grant.arn("batch", "job-definition"), jobs],
            conditions=copy,
        ),
    ]


def _quota_raise_statements(stack: Stack, model: GovernanceModel) -> list[iam.PolicyStatement]:
    """The owner's quota share or HyperPod compute quota raised while its capacity is active (capacity/shares.py)."""
    raising = raising_windows(model)
    pools = {p.name: p for p in model.pools}
    statements = []
    raised = sorted({(w.feeds.pool, w.team) for w in raising if w.feeds.kind == CONSUMER_SAGEMAKER_TRAINING_JOBS})
    if raised:
        queue = lambda pool: stack.format_arn(service="batch", resource="job-queue", resource_name=pool)  # noqa: E731
        statements += [
            iam.PolicyStatement(
                actions=["batch:ListQuotaShares"], resources=sorted({queue(pool) for pool, _ in raised})
            ),
            # The pool's service environment holds the raised guarantees (the environment is named after the pool).
            iam.PolicyStatement(
                actions=["batch:UpdateServiceEnvironment"],
                resources=sorted(
                    {
                        stack.format_arn(service="batch", resource="service-environment", resource_name=pool)
                        for pool, _ in raised
                    }
                ),
            ),
            iam.PolicyStatement(actions=["batch:DescribeServiceEnvironments"], resources=["*"]),
            iam.PolicyStatement(
                actions=["batch:DescribeQuotaShare", "batch:UpdateQuotaShare"],
                resources=[f"{queue(pool)}/quota-share/{team}" for pool, team in raised],
            ),
        ]
    quota_clusters = sorted(
        {pools[w.feeds.pool].cluster_arn for w in raising if w.feeds.kind == CONSUMER_HYPERPOD_INSTANCE_GROUP}
    )
    if quota_clusters:
        # Compute quota ARNs end in an id SageMaker generates; the controller finds each team's by cluster and name.
        quotas = sorted(
            {"{}:{}:{}:{}:{}:compute-quota/*".format(*cluster.split(":")[:5]) for cluster in quota_clusters}
        )
        statements += [
            iam.PolicyStatement(actions=["sagemaker:ListComputeQuotas"], resources=["*"]),
            iam.PolicyStatement(
                actions=["sagemaker:DescribeComputeQuota", "sagemaker:UpdateComputeQuota"], resources=quotas
            ),
        ]
    return statements


def _parameter_statements(stack: Stack, model: GovernanceModel) -> list[iam.PolicyStatement]:
    """The parameters the controller publishes (each team's active training plans, the raises it
    applied) and Cost Explorer when a team declares a monthly budget."""
    parameter = lambda name: stack.format_arn(  # noqa: E731
        service="ssm", resource="parameter", resource_name=name.lstrip("/")
    )
    statements = []
    plan_teams = sorted({w.team for w in model.capacity_windows if w.feeds.kind == CONSUMER_SAGEMAKER_TRAINING_JOBS})
    if plan_teams:  # capacity/delivery.py
        statements.append(
            iam.PolicyStatement(
                actions=["ssm:GetParameter", "ssm:PutParameter"],
                resources=[parameter(team_training_plans_parameter(model.organisation, team)) for team in plan_teams],
            )
        )
    if raising_windows(model):  # for the reclaim controller (capacity/raised.py)
        statements.append(
            iam.PolicyStatement(
                actions=["ssm:GetParameter", "ssm:PutParameter"],
                resources=[parameter(raised_guarantees_parameter(model.organisation))],
            )
        )
    if polls_team_spend(model):
        statements.append(iam.PolicyStatement(actions=["ce:GetCostAndUsage"], resources=["*"]))
    return statements


def _slurm_statements(stack: Stack, model: GovernanceModel, head_nodes: dict[str, str]) -> list[iam.PolicyStatement]:
    """The window's nodes drained and resumed on the head node (capacity/slurm_window.py)."""
    if not head_nodes:
        return []
    document = run_shell_script_arn(stack)
    pools = {p.name: p for p in model.pools}
    return [
        iam.PolicyStatement(
            actions=["ssm:SendCommand"],
            resources=[document, *(ssm_target_arn(stack, node) for _, node in sorted(head_nodes.items()))],
        ),
        iam.PolicyStatement(actions=["ssm:CancelCommand", "ssm:GetCommandInvocation"], resources=["*"]),
        iam.PolicyStatement(
            actions=["sagemaker:ListClusterNodes", "sagemaker:DescribeClusterNode"],
            resources=sorted({pools[pool].cluster_arn for pool in head_nodes}),
        ),
    ]


def _acknowledge(policy: Any, statements: list, requeue: list, cluster: list, slurm: list) -> None:
    acknowledge(
        policy,
        "The purchase permission must stay with this one role: an inline policy cannot be attached to "
        "any other principal, a managed policy could.",
        "IAMNoInlinePolicy",
    )
    acknowledge(
        policy,
        "DynamoDB and SNS grants name these KMS wildcards; the key policy itself allows this role only "
        "Encrypt, Decrypt, GenerateDataKey and DescribeKey on this one key.",
        "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
    )
    acknowledge_wildcard_resources(
        policy,
        [r for s in statements for r in s.resources] + ["*"],
        "Describe/List/Search calls and Cost Explorer's GetCostAndUsage (granted when a team declares a monthly budget) "
        "support no resource-level permission; purchases are limited to this region's "
        "capacity-reservation / training-plan ARNs carrying the controller's tags (no instance-type condition key exists); "
        "launch template and compute quota ARNs carry ids, not the names the governance file declares."
        + (
            " ssm:GetCommandInvocation and ssm:CancelCommand support none either: they read and cancel commands this role sent, and ssm:SendCommand "
            "is limited to AWS-RunShellScript on the declared Slurm head nodes."
            if slurm
            else ""
        ),
    )
    if cluster:
        acknowledge_update_cluster(policy)
    if requeue:
        acknowledge_wildcard_resources(
            policy,
            [r for s in requeue for r in s.resources],
            "Requeueing a Batch job at drain terminates it and submits a copy to the queue that ran it with its own job "
            "definition; queue, job definition and the compute environment's ECS cluster are named by Batch at run time. "
            "The controller only touches jobs of the window's job queue: on its own Capacity Block, or running on demand, "
            "tagged checkpointable, moved onto the block.",
        )
        acknowledge(
            policy,
            "At drain the controller requeues whichever team's job runs on its own expiring Capacity Block (and "
            "moves a checkpointing job from on demand onto the block, or one that would be cut off it): it stops the "
            "job and submits an identical copy with the job's own share identifier and tags, so no team takes "
            "another's place.",
            "GpuGovernance-JobControlWithoutShare[Action::batch:SubmitJob]",
            "GpuGovernance-JobControlWithoutShare[Action::batch:TerminateJob]",
            "GpuGovernance-JobControlWithoutShare[Action::batch:TagResource]",
        )
