"""`gpu-governance audit --config FILE [--json]`: who can do what, per team and per governance layer,
computed from the governance file offline (constructs_lib/organisation/audit.py)."""

from __future__ import annotations

import argparse
import json

from constructs_lib.cli.config import add_config_arguments, model_from


def register(subparsers: argparse._SubParsersAction) -> None:
    help_text = "access review: per team and layer (organisation, project, cluster, workload, data), who can do what"
    audit = subparsers.add_parser("audit", help=help_text, description=help_text)
    add_config_arguments(audit, positional_alias=True)
    audit.add_argument("--json", action="store_true", help="print one JSON object: teams -> layer -> [{who, can, on}]")
    audit.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace) -> int:
    from constructs_lib.organisation.audit import as_json, audit, render

    rows = audit(model_from(args))
    print(json.dumps(as_json(rows), indent=2) if args.json else render(rows), end="\n" if args.json else "")
    return 0
