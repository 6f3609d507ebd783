"""`gpu-governance`: validate, explain and inspect a governance model.

Exit codes: 0 success, 1 a check found something (open compliance findings), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from constructs_lib.backends import BACKENDS
from constructs_lib.cli import (
    audit as cli_audit,
    capacity as cli_capacity,
    init as cli_init,
    member as cli_member,
    simulate as simulator_cli,
    status as cli_status,
    team as cli_team,
    usage as cli_usage,
)
from constructs_lib.cli.config import add_config_arguments, model_from
from constructs_lib.core.errors import GovernanceError
from constructs_lib.core.wording import counted
from constructs_lib.model import GovernanceModel
from constructs_lib.model.explain import as_json, caveats, deals, group_notes, render, wrapped_note
from constructs_lib.model.loader import default_config_text

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
DISTRIBUTION = "cdk-gpu-governance"

# Modules that add subcommands: each exposes register(subparsers) and sets `handler` on its
# parsers, as each backend's command module does. None of them imports aws_cdk
# (tests/foundation/test_cli_imports.py).
SUBCOMMAND_MODULES = (
    cli_init,
    simulator_cli,
    cli_capacity,
    cli_team,
    cli_member,
    cli_status,
    cli_audit,
    cli_usage,
)


def _validate(args: argparse.Namespace) -> int:
    from constructs_lib.cli.capacity import grid_notes
    from constructs_lib.model.capacity import window_warnings
    from constructs_lib.model.principals import shared_account_warnings
    from constructs_lib.organisation.limits import check_model, estimate

    model = model_from(args)
    problems = check_model(model)  # what synthesis and deployment would hit, before any synthesis
    if problems:
        raise GovernanceError(problems)
    for warning in window_warnings(model, datetime.now(UTC)):  # valid, but worth a second look
        print(f"warning: {warning}", file=sys.stderr)
    stacks = estimate(model)
    largest = max(stacks, key=lambda s: s.resources)
    print(
        f"valid: {counted(len(model.teams), 'team')}, {counted(len(model.pools), 'pool')}, "
        f"{counted(len(model.consumer_accounts), 'consumer account')}, {counted(len(model.priority_classes), 'priority class')}"
    )
    print(
        f"stack layout {model.stack_layout}: {counted(len(stacks), 'capacity-account stack')}, the largest "
        f"{largest.name} with about {largest.resources} resources (estimated, at most 500)"
    )
    # Settings a backend ignores, and what IAM leaves to the accounts: part of the report, not an error.
    for line in [*caveats(model), *shared_account_warnings(model)]:
        print(f"warning: {line}")
    for line in [*grid_notes(model), *group_notes(model)]:  # what the grid makes windows pay; who holds each tree
        print(f"note: {line}")
    return EXIT_OK


def _example(args: argparse.Namespace) -> int:
    sys.stdout.write(default_config_text())
    return EXIT_OK


def _schema(args: argparse.Namespace) -> int:
    schema = GovernanceModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    print(json.dumps(schema, indent=2))
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    model = model_from(args)
    now = datetime.now(UTC)
    windows = {
        w.name: {"team": w.team, "summary": w.summary(now), "ended": w.ended(now)} for w in model.capacity_windows
    }
    if args.json:
        print(json.dumps(as_json(deals(model), windows, [*caveats(model), *group_notes(model)]), indent=2))
        return EXIT_OK
    width = min(max(shutil.get_terminal_size((100, 24)).columns, 60), 120)
    print(render(deals(model), [f"{name}: {w['summary']}" for name, w in windows.items()], width))
    for line in [*caveats(model), *group_notes(model)]:  # beside the deals, on stderr
        print(wrapped_note(line, width), file=sys.stderr)
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    from constructs_lib.cli.report import render, summarise

    try:
        summary = summarise(args.outdir)
    except (OSError, ValueError, KeyError) as error:
        raise GovernanceError.single(
            "outdir", "not a readable cloud assembly", args.outdir, f"a cdk.out folder ({error})"
        ) from None
    print(render(summary))
    return EXIT_FINDINGS if summary.open_findings else EXIT_OK


def installed_version() -> str:
    """The version of the installed distribution (its metadata: one place, pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed: pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-governance", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    simple: list[tuple[str, str, Callable[[argparse.Namespace], int], bool]] = [
        ("validate", "check a governance file; exit 2 listing every problem", _validate, True),
        ("example", "print the built-in reference configuration", _example, False),
        ("schema", "print the JSON Schema of the governance file", _schema, False),
        ("explain", "each team's deal per pool: guarantee, borrowing, lending, reclaim, preemption", _explain, True),
    ]
    for name, help_text, handler, takes_config in simple:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if takes_config:
            add_config_arguments(sub, positional_alias=True)
        sub.set_defaults(handler=handler)
    commands.choices["explain"].add_argument(
        "--json", action="store_true", help="print one JSON object: deals, capacity_windows, notes"
    )
    report = commands.add_parser(
        "report",
        help="summarise a synthesized cdk.out: stacks, resources, findings",
        description="Summarise a synthesized cloud assembly (make synth, cdk synth): stacks, resources per type, "
        "open and acknowledged compliance findings; exit 1 while a finding is open.",
    )
    report.add_argument(
        "outdir", nargs="?", default="cdk.out", metavar="CDK_OUT", help="the cloud assembly folder (default cdk.out)"
    )
    report.set_defaults(handler=_report)
    docs = dict(COMMAND_DOCS)
    for module in SUBCOMMAND_MODULES:
        module.register(commands)
    for backend in BACKENDS.values():  # a backend's own commands (its package's command module)
        if (command := backend.part("command")) is not None:
            command.register(commands)
            docs.update(command.DOCS)
    for name, sub in commands.choices.items():  # every --help page says where to read more
        for leaf in _leaves(sub):
            leaf.epilog = f"More: {docs[name]} (the repository's docs; README.md lists every command)."
    return parser


# The page that describes each command (tests/foundation/test_cli_contract.py checks each exists);
# a backend's own commands name theirs (its command module's DOCS).
COMMAND_DOCS = {
    "validate": "docs/governance-file.md",
    "example": "docs/governance-file.md",
    "schema": "docs/governance-file.md",
    "explain": "docs/governance-file.md",
    "init": "docs/install.md",
    "report": "docs/compliance.md",
    "simulate": "docs/simulator.md",
    "openb-trace": "docs/simulator.md",
    "trace": "docs/simulator.md",
    "capacity": "docs/capacity.md",
    "team": "docs/team-guide.md",
    "status": "docs/status.md",
    "audit": "docs/unified-studio.md",
    "usage": "docs/chargeback.md",
}


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and the parsers of its subcommands, at every depth."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _leaves(sub)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handling below, not at interpreter exit
        return code
    except GovernanceError as error:
        print(f"gpu-governance {args.command}: invalid input", file=sys.stderr)
        print(str(error), file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # The reader went away (`status --json | head`): nothing more to say, and nowhere to say it.
        # https://docs.python.org/3/library/signal.html#note-on-sigpipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FINDINGS
    except KeyboardInterrupt:
        print(f"gpu-governance {args.command}: interrupted", file=sys.stderr)
        return EXIT_FINDINGS
    except Exception as error:  # noqa: BLE001 - only AWS's own errors are turned into a line; anything else is a bug
        if not type(error).__module__.startswith("botocore"):
            raise
        print(f"gpu-governance {args.command}: AWS could not be reached: {_aws_hint(error)}", file=sys.stderr)
        return EXIT_FINDINGS


def _aws_hint(error: Exception) -> str:
    """One line for an AWS client error: what is missing and how to give it."""
    from botocore.exceptions import NoCredentialsError, NoRegionError

    if isinstance(error, NoRegionError):
        return "no AWS region configured; pass --region or set AWS_REGION"
    if isinstance(error, NoCredentialsError):
        return "no AWS credentials; sign in (e.g. `aws sso login`) or assume the role the command needs"
    return " ".join(str(error).split())
