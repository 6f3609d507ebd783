"""Optional multi-account delivery through CDK Pipelines: the capacity-account stack and one
stack per consumer account, each deployed as a Stage to its own account, with the compliance
packs applied inside every Stage (plugins on the App do not reach a Stage's stacks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aws_cdk import Environment, Stack, Stage, pipelines
from constructs import Construct

from constructs_lib.model import Account, GovernanceModel
from constructs_lib.organisation.compliance import apply_standard_packs

# The synth step runs the project's own checks before anything is deployed: the tests (not the
# real-Slurm suite, which needs root and Debian packages, nor the SageMaker SDK tests, which need
# the [member] extra: both deselected by marker, never skipped), the synth with every pack (fails on
# an open finding), then cfn-lint on every template of every stage.
SYNTH_COMMANDS = (
    "pip install -e '.[test]'",
    "npm install -g aws-cdk",
    "export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1 JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20",
    "python -m pytest -m 'not slurm and not member_sdk'",
    "cdk synth",
    "cfn-lint 'cdk.out/**/*.template.json'",
)


@dataclass(frozen=True, kw_only=True)
class PipelineSource:
    """Where the pipeline reads the app: a CodeConnections connection to a repository."""

    repository: str  # "owner/name"
    branch: str = "main"
    connection_arn: str


class GovernanceStage(Stage):
    """One account's stacks (built by ``build(stage)``), checked by the compliance packs added
    to the Stage itself."""

    def __init__(
        self, scope: Construct, id: str, *, account: Account, build: Callable[[GovernanceStage], object]
    ) -> None:
        super().__init__(scope, id, env=Environment(account=account.account_id, region=account.region))
        build(self)
        apply_standard_packs(self)


class GovernancePipelineStack(Stack):
    """A self-mutating CDK pipeline in ``pipeline_account`` that deploys the capacity account
    (after a manual approval) and then every consumer account as a wave. ``capacity_stacks(stage)``
    and ``consumer_stacks(stage, account_name)`` build the stacks of one account into its Stage
    (the reference app passes its CapacityAccountStack and ConsumerAccountStack).
    ``cross_account_keys`` encrypts the artifacts with a KMS key the target accounts' deployment
    roles may use; every target account is bootstrapped with ``--trust`` for the pipeline
    account (docs/delivery.md)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: GovernanceModel,
        source: PipelineSource,
        pipeline_account: Account,
        capacity_stacks: Callable[[Stage], object],
        consumer_stacks: Callable[[Stage, str], object],
    ) -> None:
        super().__init__(
            scope, id, env=Environment(account=pipeline_account.account_id, region=pipeline_account.region)
        )
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=f"{model.organisation}-gpu-governance",
            cross_account_keys=True,
            enable_key_rotation=True,
            synth=pipelines.ShellStep(
                "Synth",
                input=pipelines.CodePipelineSource.connection(
                    source.repository, source.branch, connection_arn=source.connection_arn
                ),
                commands=list(SYNTH_COMMANDS),
            ),
        )
        self.capacity_stage = GovernanceStage(self, "Capacity", account=model.capacity_account, build=capacity_stacks)
        self.pipeline.add_stage(
            self.capacity_stage,
            pre=[
                pipelines.ManualApprovalStep(
                    "ApproveCapacityChange", comment="Changes quotas, queues or keys in the capacity account"
                )
            ],
        )
        # Consumers deploy after the capacity account: their policies name its submission roles.
        consumers = self.pipeline.add_wave("Consumers")
        self.consumer_stages = {
            name: GovernanceStage(
                self, f"Consumer-{name}", account=account, build=lambda stage, name=name: consumer_stacks(stage, name)
            )
            for name, account in model.consumer_accounts.items()
        }
        for stage in self.consumer_stages.values():
            consumers.add_stage(stage)
