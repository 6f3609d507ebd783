"""``gpu-governance init [FOLDER]``: a platform team's own CDK project, ready to synthesize what
the reference does: a starting governance file, the library's CDK app and a ``cdk.json`` with
the feature flags the library is built and tested with (docs/install.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model.loader import default_config_text

GOVERNANCE_FILE = "governance.yaml"
# The reference repository's app.py is this very text (tests/foundation/test_init.py).
APP_TEXT = '''#!/usr/bin/env python3
"""A CDK app: the organisation of the governance file (`-c config=PATH`, else cdk.json's context
`config`, else $GPU_GOVERNANCE_CONFIG, else the library's example), every stack with the standard
compliance packs (constructs_lib.deployment.app). Reads the cdk.json beside it, as the CDK CLI
does. `gpu-governance init` writes this file into a new project."""

import sys
from pathlib import Path

from constructs_lib.deployment.app import main

if __name__ == "__main__":
    sys.exit(main(Path(__file__).with_name("cdk.json")))
'''


def cdk_json() -> dict:
    """The new project's cdk.json: the app, the reference's settings, the recommended feature
    flags and the governance file (the CDK CLI's ``-c config=PATH`` still wins)."""
    from constructs_lib.deployment.app import recommended_feature_flags  # a pure module until main() runs

    return {
        "app": "python3 app.py",
        "versionReporting": False,
        "pathMetadata": False,
        "assetMetadata": False,
        "context": {"config": GOVERNANCE_FILE, **recommended_feature_flags()},
    }


def register(subparsers: argparse._SubParsersAction) -> None:
    text = "write a starting governance file, app.py and cdk.json into an empty folder (docs/install.md)"
    parser = subparsers.add_parser("init", help=text, description=text)
    parser.add_argument("folder", nargs="?", default=".", metavar="FOLDER", help="default: the current folder")
    parser.add_argument(
        "--force", action="store_true", help="write into a folder that is not empty (the three files are replaced)"
    )
    parser.set_defaults(handler=_init)


def _init(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if folder.exists() and not folder.is_dir():
        raise GovernanceError.single("FOLDER", "not a folder", args.folder, "an empty folder, or one to create")
    present = sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []
    if present and not args.force:
        raise GovernanceError.single(
            "FOLDER",
            f"{args.folder} is not empty",
            ", ".join(present[:5]) + (", ..." if len(present) > 5 else ""),
            f"an empty folder, or --force to write {GOVERNANCE_FILE}, app.py and cdk.json there anyway",
        )
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        GOVERNANCE_FILE: default_config_text(),
        "app.py": APP_TEXT,
        "cdk.json": json.dumps(cdk_json(), indent=2) + "\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    print(
        f"wrote {', '.join(files)} to {folder}. Next: edit {GOVERNANCE_FILE} (gpu-governance validate --config "
        f"{folder / GOVERNANCE_FILE}), install cdk-gpu-governance[cdk] and the CDK CLI, then `cdk synth` there"
    )
    return 0
