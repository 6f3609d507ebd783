"""``python -m constructs_lib.deployment``: the organisation as a CDK app (app.main)."""

import sys

from constructs_lib.deployment.app import main

sys.exit(main())
