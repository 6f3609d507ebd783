"""The delivery construct: script asset, SSM document, grant; clean under the packs and cfn-lint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk import App, Environment, Stack, aws_iam as iam
from aws_cdk.assertions import Template

from constructs_lib.acknowledgements import acknowledge
from constructs_lib.compliance import apply_standard_packs
from constructs_lib.errors import GovernanceError
from constructs_lib.report import summarise
from constructs_lib.slurm.construct import HyperPodSlurmGovernance
from gpu_governance_runtime.slurm.render import plan_digest
from constructs_lib.slurm import slurm_plan

from .models import POOL, governance_model


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(outdir=str(outdir))
    stack = Stack(app, "SlurmGovernance", env=Environment(account="111122223333", region="us-east-1"))
    governance = HyperPodSlurmGovernance(stack, "ResearchSlurm", model=governance_model(), pool_name=POOL)
    cluster_role = iam.Role(stack, "ClusterRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    governance.grant_read_script(cluster_role)
    acknowledge(
        cluster_role.node.find_child("DefaultPolicy"),
        "Stand-in for the HyperPod execution role the capacity-account stack owns; only the grant is under test.",
        "NIST.800.53.R5-IAMNoInlinePolicy", "HIPAA.Security-IAMNoInlinePolicy", "PCI.DSS.321-IAMNoInlinePolicy",
    )
    apply_standard_packs(app)
    assembly = app.synth()  # raises on any unacknowledged finding
    return governance, Template.from_stack(stack), Path(outdir), assembly


def document_content(template: Template) -> dict:
    (document,) = template.find_resources("AWS::SSM::Document").values()
    return document["Properties"]["Content"]


def test_document_reapplies_the_script_as_a_dry_run_by_default(synthesized) -> None:
    governance, template, _, _ = synthesized
    template.has_resource_properties("AWS::SSM::Document", {"DocumentType": "Command", "UpdateMethod": "NewVersion"})
    content = document_content(template)
    assert content["parameters"]["Mode"]["default"] == "dry-run"
    assert content["parameters"]["Scope"]["allowedValues"] == ["controller", "os-only"]
    assert governance.policy_digest in content["description"]
    command = json.dumps(content["mainSteps"][0]["inputs"]["runCommand"])
    assert "aws s3 cp s3://" in command and "bash /opt/gpu-governance/gpu-governance-slurm.sh $flags" in command


def test_the_asset_is_the_rendered_script(synthesized) -> None:
    governance, _, outdir, _ = synthesized
    key = governance.script.s3_object_key
    asset = next(outdir.glob(f"asset.{key.removesuffix('.sh')}*"))
    text = (asset / "gpu-governance-slurm.sh").read_text() if asset.is_dir() else asset.read_text()
    assert f"GG_POLICY_DIGEST={plan_digest(slurm_plan(governance_model(), POOL))}" in text


def test_lifecycle_command_fetches_and_applies(synthesized) -> None:
    governance, _, _, _ = synthesized
    stack = Stack.of(governance)
    controller = stack.resolve(governance.lifecycle_command())
    compute = stack.resolve(governance.lifecycle_command(os_only=True))
    assert controller.endswith("bash /opt/gpu-governance/gpu-governance-slurm.sh")
    assert compute.endswith("gpu-governance-slurm.sh --os-only")
    assert [g.name for g in governance.instance_groups] == ["critical-g5-12xlarge", "steady-g5-12xlarge", "burst-g5-12xlarge"]


def test_grant_lets_the_cluster_role_read_only_the_script(synthesized) -> None:
    governance, template, _, _ = synthesized
    (policy,) = template.find_resources("AWS::IAM::Policy").values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "s3:GetObject"
    assert statement["Resource"]["Fn::Join"][1][-1].endswith(f"-assets-111122223333-us-east-1/{governance.script.s3_object_key}")


def test_no_open_findings_and_cfn_lint_is_clean(synthesized) -> None:
    from cfnlint.api import lint

    _, _, outdir, _ = synthesized
    assert summarise(outdir).open_findings == []
    template = (outdir / "SlurmGovernance.template.json").read_text()
    errors = [str(m) for m in lint(template, regions=["us-east-1"]) if m.rule.id.startswith("E")]
    assert errors == []


def test_bad_pool_is_reported_before_anything_is_built() -> None:
    stack = Stack(App(), "Bad")
    with pytest.raises(GovernanceError, match="no hyperpod_slurm pool of this name"):
        HyperPodSlurmGovernance(stack, "Slurm", model=governance_model(), pool_name="missing")
