"""A small valid organisation as plain data, for tests to mutate one field at a time, and the
reference app synthesized from a model."""

import copy
from pathlib import Path

import yaml

from constructs_lib.model.loader import default_config_text

CDK_JSON = Path(__file__).resolve().parents[2] / "cdk.json"


def default_data() -> dict:
    return copy.deepcopy(yaml.safe_load(default_config_text()))


def with_raisable_compute_quota(data: dict) -> dict:
    """``data`` (the reference as plain data) with research's p5 quota on HyperPod EKS in whole
    instances: a capacity window that raises it writes instances, so validate refuses one in GPUs,
    as the reference declares it (docs/governance-file.md, Quotas in GPUs)."""
    research = next(t for t in data["teams"] if t["name"] == "research")
    research["quotas"]["hyperpod-eks"]["ml.p5.48xlarge"] = 2
    return data


def synthesize_reference(model, outdir, *, packs: bool = True, cdk_json: bool = False) -> list:
    """The reference app's stacks for ``model``, synthesized into ``outdir``. With ``packs`` the
    standard compliance packs run, and synthesis raises on any unacknowledged finding. With
    ``cdk_json`` the app gets cdk.json's context (feature flags), as `make synth` and the CDK CLI
    give it: weak cross-stack references (Fn::GetStackOutput) among them."""
    from aws_cdk import App  # here, not at the top: the CLI tests import this module too

    from constructs_lib.deployment import build_reference_app
    from constructs_lib.deployment.app import cdk_json_context
    from constructs_lib.organisation.compliance import apply_standard_packs

    app = App(outdir=str(outdir), context=cdk_json_context(CDK_JSON) if cdk_json else None)
    stacks = build_reference_app(app, model)
    if packs:
        apply_standard_packs(app)
    app.synth()
    return stacks
