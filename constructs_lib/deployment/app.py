"""The organisation as a CDK app: ``python -m constructs_lib.deployment`` (cdk.json:
``"app": "python -m constructs_lib.deployment"``) synthesizes the governance file of
`-c config=PATH`, $GPU_GOVERNANCE_CONFIG or the built-in example, with the standard compliance
packs applied to every stack, from an installed package alone.

Exit codes as the CLI's: 0 synthesized, 1 synthesis failed or a synthesized template breaks a
limit (constructs_lib/organisation/limits.py), 2 the governance file (or the size of the organisation for its
stack layout) is refused. Never a traceback."""

import json
import os
import sys
from importlib import resources
from pathlib import Path

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model.loader import load_model
from constructs_lib.organisation.deploy_checks import check_deployable
from constructs_lib.organisation.limits import check_assembly, check_model

# jsii prints a large banner on Node.js 20 unless told not to. A program's own defaults, set by
# main before it imports aws_cdk (the library itself changes no environment); a caller's choice wins.
QUIET_JSII = {
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}

# Errors the CDK raises (through jsii, as RuntimeError) that the size of the organisation causes.
_INPUT_LIMITS = ("TooManyResourcesInStack",)


def synthesis_failure(error: Exception) -> tuple[str, int]:
    """One line for any error from synthesis, and the exit code."""
    text = str(error)
    if "ValidationFailed" in text:  # the packs' unacknowledged findings: the list is the message
        return f"synthesis stopped by unacknowledged compliance findings:\n{text}", 1
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("at ")]
    first = lines[0] if lines else type(error).__name__
    if any(name in text for name in _INPUT_LIMITS):
        return f"synthesis refused: {first} - set stack_layout: per_team (docs/architecture.md)", 2
    return f"synthesis failed: {first}", 1


def recommended_feature_flags() -> dict:
    """The CDK feature flags the library is built and tested with (the reference cdk.json's
    context; `gpu-governance init` writes them into a new project's cdk.json)."""
    return json.loads(resources.files("constructs_lib").joinpath("data", "feature-flags.json").read_text())


def cdk_json_context(cdk_json: Path) -> dict:
    """cdk.json's context (the feature flags): the CDK CLI passes it to the app, `python app.py`
    (make synth) reads it here, so both synthesize the same templates. Only defaults: context
    from the CLI (-c, cdk.json, cdk.context.json) wins. No cdk.json: no defaults."""
    return json.loads(cdk_json.read_text()).get("context", {}) if cdk_json.is_file() else {}


def main(cdk_json: Path = Path("cdk.json")) -> int:
    """Synthesize the organisation of `-c config=PATH` (or $GPU_GOVERNANCE_CONFIG, else the
    built-in example) into $CDK_OUTDIR (the CDK CLI sets it; default cdk.out), with ``cdk_json``'s
    context as defaults. Returns the exit code."""
    for variable, value in QUIET_JSII.items():
        os.environ.setdefault(variable, value)
    from aws_cdk import App

    from constructs_lib.organisation.compliance import apply_standard_packs

    from .reference import build_reference_app

    outdir = os.environ.get("CDK_OUTDIR") or "cdk.out"
    app = App(outdir=outdir, context=cdk_json_context(cdk_json))
    unset = [flag for flag in recommended_feature_flags() if app.node.try_get_context(flag) is None]
    if unset:  # the templates would differ from the reference's, silently
        print(
            f"warning: {len(unset)} of the library's recommended CDK feature flags are not set (cdk.json "
            f"context), e.g. {unset[0]}: some resources synthesize differently from the tested reference; "
            "`gpu-governance init` writes a cdk.json with them (docs/install.md)",
            file=sys.stderr,
        )
    try:
        model = load_model(app.node.try_get_context("config"))
        problems = check_model(model)
        if problems:
            raise GovernanceError(problems)
        # Constructs check what only their backend knows (Slurm GPU counts, for one), so the
        # build belongs inside the same guard as the file.
        build_reference_app(app, model)
    except GovernanceError as error:
        print(f"invalid governance configuration:\n{error}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # the CDK refusing a construct, through jsii
        message, code = synthesis_failure(error)
        print(message, file=sys.stderr)
        return code
    try:
        apply_standard_packs(app)
        app.synth()
    except Exception as error:  # jsii raises RuntimeError (JSIIError and others): never a traceback
        message, code = synthesis_failure(error)
        print(message, file=sys.stderr)
        return code
    problems = check_assembly(outdir)
    if problems:
        print("synthesized templates break limits:\n" + "\n".join(str(p) for p in problems), file=sys.stderr)
        return 1
    problems = check_deployable(outdir)
    if problems:
        print(
            "synthesized templates would be refused at deployment:\n" + "\n".join(str(p) for p in problems),
            file=sys.stderr,
        )
        return 1
    return 0
