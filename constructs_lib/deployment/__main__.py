"""``python -m constructs_lib.deployment``: the organisation as a CDK app (app.main)."""

import os
import sys

# jsii prints a large banner on Node.js 20 unless told not to; set before aws_cdk starts Node.js
# (the library itself changes no environment). Only defaults: a caller's own choice wins.
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from constructs_lib.deployment.app import main  # noqa: E402

sys.exit(main())
