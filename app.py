#!/usr/bin/env python3
"""Reference CDK app: the organisation from `-c config=PATH`, $GPU_GOVERNANCE_CONFIG or the
built-in default, with the standard compliance packs applied to every stack
(constructs_lib.deployment.app, which an installed package runs as `python -m
constructs_lib.deployment`). Reads the feature flags of the cdk.json beside it."""

import os
import sys
from pathlib import Path

# jsii prints a large banner on Node.js 20 unless told not to; set before aws_cdk starts Node.js
# (the library itself changes no environment). Only defaults: a caller's own choice wins.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from constructs_lib.deployment.app import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(Path(__file__).with_name("cdk.json")))
