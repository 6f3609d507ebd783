"""Where compliance plugins reach, and the pipeline stack: every account a Stage with the packs
inside it, the capacity account behind a manual approval.

Measured with aws-cdk-lib 2.275 and cdk-nag 3.0.2, contrary to the cdk-nag 2 (Aspects) lore: a
policy-validation plugin on the App *does* check the stacks inside a Stage, and a plugin on
both reports every finding twice. The tests pin that behaviour down so a change shows up."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, CfnTag, Stack, Stage, Validations, aws_kms as kms
from aws_cdk.assertions import Template

from constructs_lib import GpuGovernanceChecks
from constructs_lib.deployment import build_capacity_account, build_consumer_account
from constructs_lib.model import Account
from constructs_lib.model.loader import load_model
from constructs_lib.organisation.pipeline import (
    SYNTH_COMMANDS,
    GovernancePipelineStack,
    GovernanceStage,
    PipelineSource,
)
from gpu_governance_runtime.contract import TAG_TEAM


def _unrotated_team_key(scope) -> kms.CfnKey:
    """A team's data key (the pack checks teams' keys only) that does not rotate: one finding."""
    return kms.CfnKey(
        Stack(scope, "Data"), "Key", enable_key_rotation=False, tags=[CfnTag(key=TAG_TEAM, value="research")]
    )


def _app_with_unrotated_key_in_a_stage(tmp_path) -> tuple[App, Stage]:
    app = App(outdir=str(tmp_path))
    stage = Stage(app, "Prod")
    _unrotated_team_key(stage)
    return app, stage


def _reported_key_rotation_findings(tmp_path) -> int:
    report = json.loads((tmp_path / "validation-report.json").read_text())
    return sum(
        1
        for plugin in report["pluginReports"]
        for v in plugin["violations"]
        if v["ruleName"] == "GpuGovernance-KeyRotation"
    )


@pytest.mark.parametrize("on_app,on_stage,reported", [(True, False, 1), (False, True, 1), (True, True, 2)])
def test_where_plugins_reach_stage_stacks(tmp_path, on_app, on_stage, reported):
    app, stage = _app_with_unrotated_key_in_a_stage(tmp_path)
    for scope, wanted in ((app, on_app), (stage, on_stage)):
        if wanted:
            Validations.of(scope).add_plugins(GpuGovernanceChecks(scope))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    assert _reported_key_rotation_findings(tmp_path) == reported


def test_governance_stage_checks_its_stacks_without_app_plugins(tmp_path):
    app = App(outdir=str(tmp_path))
    GovernanceStage(
        app,
        "Prod",
        account=Account(account_id="111111111111", region="us-east-1"),
        build=_unrotated_team_key,
    )
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    assert _reported_key_rotation_findings(tmp_path) == 1


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    model = load_model()
    app = App(outdir=str(tmp_path_factory.mktemp("pipeline.out")))
    stack = GovernancePipelineStack(
        app,
        "Delivery",
        model=model,
        source=PipelineSource(
            repository="example/gpu-platform",
            connection_arn="arn:aws:codeconnections:us-east-1:999999999999:connection/abc",
        ),
        pipeline_account=Account(account_id="999999999999", region="us-east-1"),
        capacity_stacks=lambda stage: build_capacity_account(stage, model),
        consumer_stacks=lambda stage, name: build_consumer_account(stage, model, name),
    )
    app.synth()  # the packs inside every stage raise on any open finding
    return model, stack, Template.from_stack(stack)


def _stages(template: Template) -> list[dict]:
    (pipeline,) = template.find_resources("AWS::CodePipeline::Pipeline").values()
    return pipeline["Properties"]["Stages"]


def test_every_account_is_a_stage_of_its_own(pipeline):
    model, stack, _ = pipeline
    stages = [stack.capacity_stage, *stack.consumer_stages.values()]
    assert [s.account for s in stages] == [
        model.capacity_account.account_id,
        *(a.account_id for a in model.consumer_accounts.values()),
    ]


def test_capacity_account_waits_for_a_manual_approval_before_consumers(pipeline):
    _, _, template = pipeline
    stages = _stages(template)
    names = [s["Name"] for s in stages]
    assert names.index("Capacity") < names.index("Consumers")
    capacity = next(s for s in stages if s["Name"] == "Capacity")
    kinds = sorted((a["RunOrder"], a["ActionTypeId"]["Category"]) for a in capacity["Actions"])
    assert kinds[0] == (1, "Approval")
    assert all(category == "Deploy" for order, category in kinds[1:] if order > 1)


def test_synth_runs_tests_and_cfn_lint_with_cross_account_keys(pipeline):
    _, _, template = pipeline
    build_specs = [
        p["Properties"]["Source"]["BuildSpec"] for p in template.find_resources("AWS::CodeBuild::Project").values()
    ]
    synth = next(spec for spec in build_specs if "cfn-lint" in spec)
    assert all(command in synth for command in ("python -m pytest -m 'not slurm and not member_sdk'", "cfn-lint"))
    assert list(SYNTH_COMMANDS)[-1].startswith("cfn-lint")
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    (pipeline,) = template.find_resources("AWS::CodePipeline::Pipeline").values()
    stores = pipeline["Properties"]["ArtifactStores"]  # one per region deployed to
    assert stores and all(store["ArtifactStore"]["EncryptionKey"]["Type"] == "KMS" for store in stores)
