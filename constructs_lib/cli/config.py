"""How every command takes the governance file: ``--config FILE``, else ``$GPU_GOVERNANCE_CONFIG``,
else a refusal, unless ``--example`` asks for the built-in example organisation. A command
that reports on an organisation must never silently report on the example one."""

from __future__ import annotations

import argparse
import os
import sys

from constructs_lib.core.errors import GovernanceError
from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import (
    CONFIG_ENVIRONMENT_VARIABLE,
    DEFAULT_CONFIG_NAME,
    default_config_text,
    load_model,
    parse_config,
)

CONFIG_HELP = f"governance file (YAML or JSON); default ${CONFIG_ENVIRONMENT_VARIABLE}"
EXAMPLE_HELP = "use the built-in example organisation (`gpu-governance example`) instead of a governance file"
# The positional spelling some commands took before 0.2.0; still read, with a warning.
_LEGACY = "legacy_config"


def add_config_arguments(parser: argparse.ArgumentParser, *, positional_alias: bool = False) -> None:
    """``--config`` and ``--example`` on a command; ``positional_alias`` keeps the old
    ``COMMAND FILE`` spelling working (deprecated, hidden from the help)."""
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    parser.add_argument("--example", action="store_true", help=EXAMPLE_HELP)
    if positional_alias:
        parser.add_argument(_LEGACY, nargs="?", metavar="FILE", help=argparse.SUPPRESS)


def chosen_config(args: argparse.Namespace) -> str | None:
    """The file the command was given (``--config``, the deprecated positional, or the
    environment variable), or None for ``--example``; refuses both or neither."""
    legacy = getattr(args, _LEGACY, None)
    if legacy is not None:
        if args.config is not None:
            raise GovernanceError.single(
                "--config",
                "given twice (as --config and as a positional file)",
                [args.config, legacy],
                "one governance file",
            )
        print(f"gpu-governance: the positional governance file is deprecated; use --config {legacy}", file=sys.stderr)
    given = args.config or legacy
    if args.example:
        if given is not None:
            raise GovernanceError.single(
                "--example", "given with a governance file", given, "either --config FILE or --example"
            )
        return None
    given = given or os.environ.get(CONFIG_ENVIRONMENT_VARIABLE) or None
    if given is None:
        raise GovernanceError.single(
            "--config",
            "missing",
            None,
            f"a governance file (--config FILE or ${CONFIG_ENVIRONMENT_VARIABLE}), "
            "or --example for the built-in example organisation",
        )
    return given


def model_from(args: argparse.Namespace) -> GovernanceModel:
    """The governance model the command was asked for (see :func:`chosen_config`)."""
    path = chosen_config(args)
    if path is None:
        return parse_config(default_config_text(), f"<built-in {DEFAULT_CONFIG_NAME}>")
    return load_model(path)
