"""`gpu-governance slurm script`: print the apply script of one hyperpod_slurm pool, to read,
review or run by hand on a head node (`... | sudo bash -s -- --dry-run`)."""

from __future__ import annotations

import argparse
import sys

from constructs_lib.cli.config import add_config_arguments, model_from
from gpu_governance_runtime.slurm import render_apply_script

from .plan import DEFAULT_DATA_ROOT, slurm_plan

DOCS = {"slurm": "docs/slurm.md"}


def register(subparsers: argparse._SubParsersAction) -> None:
    slurm = subparsers.add_parser("slurm", help="SageMaker HyperPod on Slurm: the generated governance")
    commands = slurm.add_subparsers(dest="slurm_command", required=True, metavar="COMMAND")
    script = commands.add_parser("script", help="print the idempotent apply script of one hyperpod_slurm pool")
    add_config_arguments(script, positional_alias=True)
    script.add_argument("--pool", required=True, help="name of a hyperpod_slurm pool")
    script.add_argument(
        "--data-root",
        default=DEFAULT_DATA_ROOT,
        help=f"shared directory for per-team data (default {DEFAULT_DATA_ROOT})",
    )
    script.set_defaults(handler=_script)


def _script(args: argparse.Namespace) -> int:
    sys.stdout.write(render_apply_script(slurm_plan(model_from(args), args.pool, data_root=args.data_root)))
    return 0
