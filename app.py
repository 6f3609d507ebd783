#!/usr/bin/env python3
"""A CDK app: the organisation of the governance file (`-c config=PATH`, else cdk.json's context
`config`, else $GPU_GOVERNANCE_CONFIG, else the library's example), every stack with the standard
compliance packs (constructs_lib.deployment.app). Reads the cdk.json beside it, as the CDK CLI
does. `gpu-governance init` writes this file into a new project."""

import sys
from pathlib import Path

from constructs_lib.deployment.app import main

if __name__ == "__main__":
    sys.exit(main(Path(__file__).with_name("cdk.json")))
