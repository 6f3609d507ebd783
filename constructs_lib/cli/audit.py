"""`gpu-governance audit [FILE] [--json]`: who can do what, per team and per governance layer,
computed from the governance file offline (constructs_lib/audit.py)."""

from __future__ import annotations

import argparse
import json

from constructs_lib.model.loader import CONFIG_ENVIRONMENT_VARIABLE, load_model


def register(subparsers: argparse._SubParsersAction) -> None:
    help_text = "access review: per team and layer (organisation, project, cluster, workload, data), who can do what"
    audit = subparsers.add_parser("audit", help=help_text, description=help_text)
    audit.add_argument("config", nargs="?", help=f"governance file (YAML or JSON); default ${CONFIG_ENVIRONMENT_VARIABLE}, else the built-in example")
    audit.add_argument("--json", action="store_true", help="print one JSON object: teams -> layer -> [{who, can, on}]")
    audit.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace) -> int:
    from constructs_lib.organisation.audit import as_json, audit, render

    rows = audit(load_model(args.config))
    print(json.dumps(as_json(rows), indent=2) if args.json else render(rows), end="\n" if args.json else "")
    return 0
