"""SageMaker training plans: what a window feeding SageMaker (a HyperPod instance group, training
jobs) buys (docs/capacity.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpu_governance_runtime.contract import CONSUMER_HYPERPOD_INSTANCE_GROUP, CONSUMER_SAGEMAKER_TRAINING_JOBS
from gpu_governance_runtime.planners.kinds.training_plan import TRAINING_PLAN_COUNTS

from .base import CapacityKind, KindGrant

if TYPE_CHECKING:
    from aws_cdk import aws_iam as iam


def _window_problem(window: Any) -> str | None:
    if not window.instance_type.startswith("ml."):
        return (
            f"{window.feeds.kind} is bought as a training plan: instance_type must be ml.*, not {window.instance_type}"
        )
    if window.instance_count not in TRAINING_PLAN_COUNTS:
        # [aws: sm-plan.instance-counts]: "The reservation instance quantity options are 1, 2, 4, 8, 16, 32 or 64"
        return (
            f"instance_count: a training plan holds 1, 2, 4, 8, 16, 32 or 64 instances ({window.instance_count}) - "
            "one of those"
        )
    return None


def _statements(grant: KindGrant) -> list[iam.PolicyStatement]:
    from aws_cdk import aws_iam as iam  # here: the model loads this module, and no CDK

    plans = grant.arn("sagemaker", "training-plan")
    return [
        iam.PolicyStatement(
            actions=["sagemaker:CreateTrainingPlan", "sagemaker:AddTags"],
            resources=[plans],
            conditions=grant.tagged_by_us,
        ),
        iam.PolicyStatement(
            actions=["sagemaker:CreateReservedCapacity"], resources=[grant.arn("sagemaker", "reserved-capacity")]
        ),
        iam.PolicyStatement(
            actions=["sagemaker:DescribeTrainingPlan", "sagemaker:DescribeTrainingPlanExtensionHistory"],
            resources=[plans],
        ),
        iam.PolicyStatement(
            actions=["sagemaker:ExtendTrainingPlan"], resources=[plans], conditions=grant.managed_by_us
        ),
        iam.PolicyStatement(
            actions=["sagemaker:SearchTrainingPlanOfferings", "sagemaker:ListTrainingPlans"], resources=["*"]
        ),
    ]


KIND = CapacityKind(
    name="training_plan",
    label="training plan",
    feeds=(CONSUMER_HYPERPOD_INSTANCE_GROUP, CONSUMER_SAGEMAKER_TRAINING_JOBS),
    window_problem=_window_problem,
    statements=_statements,
)
