"""`gpu-governance team submit-example TEAM --backend batch|hyperpod_eks|slurm`: print a
ready-to-run submission for one team, from the model (offline) or from the team's discovery
document (``--setup FILE``, the value of its SSM parameter): each backend's ``submit`` module
prints it (batch: an AWS CLI ``submit-service-job`` request into the team's quota share;
hyperpod_eks: a Job manifest for the team's namespace, queue and priority class; slurm: the
``sbatch`` line with the team's account, partition and QoS).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from constructs_lib.backends import backend_of
from constructs_lib.cli.config import add_config_arguments, model_from
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import MEMBER_BACKENDS, TeamSetup, team_setup

# An image reference (registry/repository:tag or @digest): nothing the shell would expand.
IMAGE_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9./:@_-]*")


def register(subparsers: argparse._SubParsersAction) -> None:
    example = _team_commands(subparsers).add_parser(
        "submit-example",
        help="print a ready-to-run submission for a team: AWS CLI request, Job manifest or sbatch line",
    )
    example.add_argument("team", metavar="TEAM")
    example.add_argument("--backend", required=True, choices=sorted(MEMBER_BACKENDS))
    example.add_argument("--pool", help="the pool, when the team has several of this backend")
    add_config_arguments(example)
    example.add_argument(
        "--setup", help="the team's discovery document (JSON, the value of its SSM parameter) instead of the model"
    )
    example.add_argument("--priority-class", help="default: the least urgent class")
    example.add_argument("--instance-type", help="default: the first instance type of the team's quota")
    example.add_argument("--gpus", type=int, default=1, help="GPUs per node (hyperpod_eks, slurm; default 1)")
    example.add_argument(
        "--image", help="training image (batch, hyperpod_eks), e.g. <the team's ecr_repository_uri>:<tag>"
    )
    example.add_argument(
        "--job-name", default="train", help="job name after '<team>-' (a time is appended for batch and hyperpod_eks)"
    )
    example.add_argument("--script", default="train.sh", help="batch script (slurm; default train.sh)")
    example.add_argument(
        "--training-plans",
        help="batch: the team's active training plans (JSON, the value of the discovery document's "
        "training_plans_parameter); the plan of the instance type is set as ResourceConfig.TrainingPlanArn",
    )
    example.set_defaults(handler=_submit_example)


def _team_commands(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The `team` command group's subcommands, shared with the other module that adds to it."""
    team = subparsers.choices.get("team")
    if team is None:
        team = subparsers.add_parser("team", help="a team's view: its setup and how to submit")
        team.add_subparsers(dest="team_command", required=True, metavar="COMMAND")
    (commands,) = (action for action in team._actions if isinstance(action, argparse._SubParsersAction))
    return commands


def _submit_example(args: argparse.Namespace) -> int:
    setup = _setup(args)
    priority_class = args.priority_class or setup.least_urgent()
    instance_type = args.instance_type or sorted(setup.quota)[0]
    if args.gpus < 1:
        raise GovernanceError.single("--gpus", "invalid", args.gpus, "at least 1")
    return backend_of(setup.backend).part("submit").example(args, setup, priority_class, instance_type)


def image_of(args: argparse.Namespace, setup: TeamSetup) -> str:
    if not args.image:
        raise GovernanceError.single(
            "--image",
            "missing",
            None,
            f"a training image, e.g. {setup.ecr_repository_uri}:<tag> (the team's repository)",
        )
    if not IMAGE_REFERENCE.fullmatch(args.image):
        raise GovernanceError.single(
            "--image", "not an image reference", args.image, "registry/repository:tag or @sha256:digest"
        )
    return args.image


def _setup(args: argparse.Namespace) -> TeamSetup:
    if not args.setup:
        return team_setup(model_from(args), args.team, backend=args.backend, pool=args.pool)
    try:
        setup = TeamSetup.from_parameter(Path(args.setup).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise GovernanceError.single(
            "--setup", "cannot read the file", args.setup, f"a readable JSON file ({error})"
        ) from None
    if (
        setup.team != args.team
        or setup.backend != MEMBER_BACKENDS[args.backend]
        or (args.pool and setup.pool != args.pool)
    ):
        raise GovernanceError.single(
            "--setup",
            "describes another team, backend or pool",
            f"{setup.team}/{setup.backend}/{setup.pool}",
            f"the document of team {args.team} on {MEMBER_BACKENDS[args.backend]}"
            + (f" pool {args.pool}" if args.pool else ""),
        )
    return setup
