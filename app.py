#!/usr/bin/env python3
"""Reference CDK app: the organisation from `-c config=PATH`, $GPU_GOVERNANCE_CONFIG or the
built-in default, with the standard compliance packs applied to every stack."""

import json
import os
import sys
from pathlib import Path

# jsii prints a large banner on Node.js 20 unless told not to; set before aws_cdk starts Node.js
# (the library itself changes no environment). Only defaults: a caller's own choice wins.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import App  # noqa: E402

from constructs_lib.compliance import apply_standard_packs
from constructs_lib.errors import GovernanceError
from constructs_lib.loader import load_model
from stacks import build_reference_app


def cdk_json_context() -> dict:
    """cdk.json's context (the feature flags): the CDK CLI passes it to the app, `python app.py`
    (make synth) reads it here, so both synthesize the same templates. Only defaults: context
    from the CLI (-c, cdk.json, cdk.context.json) wins."""
    return json.loads(Path(__file__).with_name("cdk.json").read_text())["context"]


def main() -> int:
    app = App(outdir=os.environ.get("CDK_OUTDIR") or "cdk.out", context=cdk_json_context())
    try:
        # Constructs check what only their backend knows (Slurm GPU counts, for one), so the
        # build belongs inside the same guard as the file.
        build_reference_app(app, load_model(app.node.try_get_context("config")))
    except GovernanceError as error:
        print(f"invalid governance configuration:\n{error}", file=sys.stderr)
        return 2
    apply_standard_packs(app)
    try:
        app.synth()
    except RuntimeError as error:  # jsii surfaces the packs' ValidationFailed as RuntimeError
        if "ValidationFailed" not in str(error):
            raise
        print(f"synthesis stopped by unacknowledged compliance findings:\n{error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
