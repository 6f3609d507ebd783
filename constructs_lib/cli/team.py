"""`gpu-governance team show TEAM`: what the team's discovery parameters say, from the model;
`gpu-governance team pause|resume TEAM --config FILE`: set the team's `paused` in the file.

The same documents the deployment publishes (constructs_lib/member/discovery.py), offline: the bucket
name and the key ARN are generated at deployment and print as unknown here.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from constructs_lib.cli.config import CONFIG_HELP, add_config_arguments, model_from
from constructs_lib.core.errors import GovernanceError
from constructs_lib.model.loader import CONFIG_ENVIRONMENT_VARIABLE, load_model

_UNKNOWN = "(known after deployment: read the parameter)"


def register(subparsers: argparse._SubParsersAction) -> None:
    team = subparsers.add_parser("team", help="what a team's members need to find their capacity")
    commands = team.add_subparsers(dest="team_command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show", help="the team's discovery parameters (queue, share, roles, bucket, key, images, priorities), per pool"
    )
    show.add_argument("team", metavar="TEAM")
    add_config_arguments(show)
    show.add_argument("--json", action="store_true", help="print one JSON object: parameter name -> document")
    show.set_defaults(handler=_show)
    for name, paused, what in (
        ("pause", True, "no new job of the team starts on any backend; running jobs finish"),
        ("resume", False, "the team's jobs start again"),
    ):
        command = commands.add_parser(
            name, help=f"{what}: sets the team's `paused` in the governance file, nothing else; deploy to apply"
        )
        command.add_argument("team", metavar="TEAM")
        command.add_argument("--config", metavar="FILE", help=CONFIG_HELP)  # the file to change: no --example
        command.set_defaults(handler=_set_paused, paused=paused)


def _show(args: argparse.Namespace) -> int:
    from constructs_lib.member.discovery import describe_team

    documents = describe_team(model_from(args), args.team)
    print(json.dumps(documents, indent=2) if args.json else _as_text(documents))
    return 0


def _set_paused(args: argparse.Namespace) -> int:
    from constructs_lib.model.edit import set_team_paused

    path = args.config or os.environ.get(CONFIG_ENVIRONMENT_VARIABLE)
    if not path:
        raise GovernanceError.single(
            "--config", "no governance file to change", None, f"--config FILE or ${CONFIG_ENVIRONMENT_VARIABLE}"
        )
    load_model(path)  # the loader's checks (size, encoding, validity) before the text is read
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    edited = set_team_paused(text, args.team, args.paused, str(file))
    state = "paused" if args.paused else "active"
    if edited == text:
        print(f"team {args.team} is already {state} in {file}; nothing changed")
        return 0
    partial = file.with_name(f".{file.name}.gpu-governance-edit")
    partial.write_text(edited, encoding="utf-8")
    partial.replace(file)  # atomic: a reader sees the old file or the new one, never half of it
    print(f"team {args.team} is now {state} in {file}; deploy it (cdk deploy, or the pipeline) to take effect")
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
                lines += [
                    f"    {c['name']}: " + ", ".join(f"{k}={v}" for k, v in c.items() if k != "name") for c in value
                ]
            elif key == "backend" or key == "pool" or (value is None and key.startswith("borrow_")):
                continue
            else:
                lines.append(f"  {key}: {_value(value)}")
        lines.append("")
    return "\n".join(lines).rstrip()
