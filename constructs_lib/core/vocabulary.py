"""The shared vocabulary of the constructs, the nag pack and the guardrails: the metadata key
the constructs record governance facts under, the IAM action sets more than one part grants or
denies, and the model's sharing strategies in HyperPod's words. Pure Python (no aws_cdk), so the
nag pack, usable in any CDK app, depends on this and not on a construct module. Tag keys, metric
and environment names shared with the Lambda controllers live in the runtime's ``contract``.
"""

from __future__ import annotations

from gpu_governance_runtime.contract import SharingStrategy

GOVERNANCE_METADATA = "GpuGovernance"
"""CloudFormation metadata key under which the constructs record team and preset for checks."""

PURCHASE_ACTIONS = (
    "ec2:PurchaseCapacityBlock",
    "ec2:PurchaseCapacityBlockExtension",
    "sagemaker:CreateTrainingPlan",
    "sagemaker:ExtendTrainingPlan",
    "ec2:CreateCapacityReservation",
    "ec2:CreateCapacityReservationFleet",
    "ec2:PurchaseReservedInstancesOffering",
    "savingsplans:CreateSavingsPlan",
)
"""Every IAM action that buys GPU capacity, or commits to paying for it (reservations, Savings
Plans): the nag rules and the organisation guardrails."""

PURCHASING_MANAGED_POLICIES = (
    "AdministratorAccess",
    "PowerUserAccess",
    "AmazonEC2FullAccess",
    "AmazonSageMakerFullAccess",
)
"""AWS-managed policies whose statements allow purchase actions above: ``*`` (AdministratorAccess),
every action but IAM, Organizations and Account (PowerUserAccess), ``ec2:*`` (AmazonEC2FullAccess,
Capacity Blocks and reservations), ``sagemaker:*`` outside Studio resources
(AmazonSageMakerFullAccess, training plans). Their documents:
https://docs.aws.amazon.com/aws-managed-policy/latest/reference/<name>.html"""

# Full key administration without use of the key: for the CloudFormation execution role on
# tenant keys (it must keep kms:PutKeyPolicy: CreateKey refuses a policy that locks its creator
# out) and for the account on controller keys.
KEY_ADMIN_ACTIONS = [
    "kms:Create*",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
]
# What a platform admin needs to operate a tenant key: read it, switch it off and on, rotate
# it, revoke a grant and schedule or cancel its deletion. Nothing that widens who may use it
# (PutKeyPolicy, CreateGrant) or that access conditions may read (aliases, tags): those
# change only through the deployment.
PLATFORM_KEY_ADMIN_ACTIONS = [
    "kms:DescribeKey",
    "kms:GetKeyPolicy",
    "kms:GetKeyRotationStatus",
    "kms:ListGrants",
    "kms:ListKeyPolicies",
    "kms:ListKeyRotations",
    "kms:ListResourceTags",
    "kms:EnableKey",
    "kms:DisableKey",
    "kms:EnableKeyRotation",
    "kms:RotateKeyOnDemand",
    "kms:RevokeGrant",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
]
KEY_USE_ACTIONS = ["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"]

TENANT_METRIC_NAMESPACES = ("/aws/sagemaker/TrainingJobs",)
"""Every CloudWatch namespace a role the library gives a team may publish metrics into
(``cloudwatch:PutMetricData`` under the ``cloudwatch:namespace`` condition
[aws: cw.put-metric-data-namespace-condition]): a training job's execution role writes its
metrics where SageMaker writes the job's own. The team policies grant exactly these, and
``validate`` warns of any capacity alarm watching one, since any team can set its value;
tests/security/test_tenant_metrics.py proves the synthesized policies allow no other."""

HYPERPOD_SHARING_STRATEGY = {
    SharingStrategy.RESERVE: "DontLend",
    SharingStrategy.LEND: "Lend",
    SharingStrategy.LEND_AND_BORROW: "LendAndBorrow",
}
"""The model's sharing strategies as HyperPod compute quota strategies."""

UNLIMITED_BORROW_LIMIT = -1
"""How AWS Batch says a quota share borrows without limit (the governance file's "unlimited", the
policy document's null):
https://docs.aws.amazon.com/batch/latest/APIReference/API_QuotaShareResourceSharingConfiguration.html"""
