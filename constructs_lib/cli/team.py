"""`gpu-governance team show TEAM`: what the team's discovery parameters say, from the model.

The same documents the deployment publishes (constructs_lib/discovery.py), offline: the bucket
name and the key ARN are generated at deployment and print as unknown here.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from constructs_lib.cli.config import add_config_arguments, model_from

_UNKNOWN = "(known after deployment: read the parameter)"


def register(subparsers: argparse._SubParsersAction) -> None:
    team = subparsers.add_parser("team", help="what a team's members need to find their capacity")
    commands = team.add_subparsers(dest="team_command", required=True, metavar="COMMAND")
    show = commands.add_parser("show", help="the team's discovery parameters (queue, share, roles, bucket, key, images, priorities), per pool")
    show.add_argument("team", metavar="TEAM")
    add_config_arguments(show)
    show.add_argument("--json", action="store_true", help="print one JSON object: parameter name -> document")
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    from constructs_lib.member.discovery import describe_team

    documents = describe_team(model_from(args), args.team)
    print(json.dumps(documents, indent=2) if args.json else _as_text(documents))
    return 0


def _value(value: Any) -> str:
    if value is None:
        return _UNKNOWN
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def _as_text(documents: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, document in documents.items():
        lines.append(f"{document['pool']} ({document['backend']}): SSM parameter {name}")
        for key, value in document.items():
            if key == "priority_classes":
                lines.append("  priority_classes:")
                lines += [f"    {c['name']}: " + ", ".join(f"{k}={v}" for k, v in c.items() if k != "name") for c in value]
            elif key == "backend" or key == "pool" or (value is None and key.startswith("borrow_")):
                continue
            else:
                lines.append(f"  {key}: {_value(value)}")
        lines.append("")
    return "\n".join(lines).rstrip()
