"""`gpu-governance team submit-example TEAM --backend batch|hyperpod_eks|slurm`: print a
ready-to-run submission for one team, from the model (offline) or from the team's discovery
document (``--setup FILE``, the value of its SSM parameter).

- batch: an AWS CLI ``submit-service-job`` request into the team's quota share. Values only a
  deployment knows (bucket, key) come from ``--setup``; without it they are read from the
  shell variables ``TEAM_BUCKET`` and ``TEAM_KMS_KEY`` when the snippet runs.
- hyperpod_eks: a Job manifest for the team's namespace, queue and priority class.
- slurm: the ``sbatch`` line with the team's account, partition and QoS.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from constructs_lib.backends import backend_of
from constructs_lib.backends.base import call
from constructs_lib.cli.config import add_config_arguments, model_from
from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import (
    MEMBER_BACKENDS,
    TeamSetup,
    active_training_plan,
    sbatch_line,
    service_job_request,
    team_setup,
    training_job_manifest,
    unique_job_name,
)
from constructs_lib.model.loader import dump_yaml

# Shell variables the batch snippet reads for what only a deployment knows.
UNKNOWN_UNTIL_DEPLOYED = {"bucket": "TEAM_BUCKET", "kms_key_arn": "TEAM_KMS_KEY"}
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
    return call(backend_of(setup.backend).submit_example, args, setup, priority_class, instance_type)


def slurm_example(args: argparse.Namespace, setup: TeamSetup, priority_class: str, instance_type: str) -> int:
    """The ``sbatch`` line with the team's account, partition and QoS."""
    print(sbatch_line(setup, priority_class=priority_class, gpus=args.gpus, script=shlex.split(args.script)))
    return 0


def eks_example(args: argparse.Namespace, setup: TeamSetup, priority_class: str, instance_type: str) -> int:
    """A Job manifest for the team's namespace, queue and priority class."""
    image = _image(args, setup)
    manifest = training_job_manifest(
        setup,
        job_name=unique_job_name(setup.team, args.job_name),
        priority_class=priority_class,
        image=image,
        command=[args.script],
        instance_type=instance_type,
        gpus=args.gpus,
        dedicated_team_nodes=_dedicated(args, setup),
    )
    sys.stdout.write(dump_yaml(manifest))
    return 0


def batch_example(args: argparse.Namespace, setup: TeamSetup, priority_class: str, instance_type: str) -> int:
    """An AWS CLI ``submit-service-job`` request into the team's quota share."""
    image = _image(args, setup)
    job_name = unique_job_name(setup.team, args.job_name)
    plans = None
    if args.training_plans:
        try:
            plans = Path(args.training_plans).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise GovernanceError.single(
                "--training-plans", "cannot read the file", args.training_plans, f"a readable JSON file ({error})"
            ) from None
    plan = active_training_plan(setup, instance_type, plans)
    sys.stdout.write(
        _batch_snippet(
            setup,
            job_name=job_name,
            priority_class=priority_class,
            instance_type=instance_type,
            image_uri=image,
            training_plan_arn=plan,
        )
    )
    return 0


def _image(args: argparse.Namespace, setup: TeamSetup) -> str:
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


def _dedicated(args: argparse.Namespace, setup: TeamSetup) -> bool:
    """Whether the team's pods must use its dedicated instance groups (the admission policy
    refuses them elsewhere); only the model says so."""
    model = model_from(args)
    team = next((t for t in model.teams if t.name == setup.team), None)
    return bool(team and setup.pool in team.kubernetes and team.kubernetes[setup.pool].dedicated_instance_groups)


def _batch_snippet(setup: TeamSetup, **job: str) -> str:
    # ${NAME:?}: the shell stops with "NAME: parameter null or not set" instead of sending an empty bucket.
    placeholders = {
        key: f"${{{variable}:?}}" for key, variable in UNKNOWN_UNTIL_DEPLOYED.items() if getattr(setup, key) is None
    }
    filled = replace(setup, **placeholders)
    request = service_job_request(filled, **job)
    file = f"{setup.team}-job.json"
    lines = [
        f"# team {setup.team}, pool {setup.pool}: quota share {setup.quota_share}, priority class {job['priority_class']} "
        f"(schedulingPriority {request['schedulingPriority']}), run as {setup.submission_role_arn}"
    ]
    lines.append("set -euo pipefail  # a script (bash submit.sh): it stops at the first error")
    if placeholders:
        # Checked before anything runs: the first one missing is the only error, and aws never runs.
        lines.append(
            ": "
            + " ".join(
                f'"${{{variable}:?set it to the {key} of the team discovery document}}"'
                for key, variable in UNKNOWN_UNTIL_DEPLOYED.items()
                if key in placeholders
            )
        )
    if job.get("training_plan_arn"):
        lines.append(f"# on the team's training plan {job['training_plan_arn']} (ResourceConfig.TrainingPlanArn)")
    elif setup.training_plans_parameter:
        lines.append(
            f"# no active training plan of {job['instance_type']} given: when the team owns one, pass --training-plans with the value of "
            f"`aws ssm get-parameter --name {setup.training_plans_parameter} --query Parameter.Value --output text`"
        )
    # An unquoted heredoc expands the variables; quoted, nothing in the JSON is touched.
    lines += [
        f"cat > {file} <<{'EOF' if placeholders else chr(39) + 'EOF' + chr(39)}",
        json.dumps(request, indent=2),
        "EOF",
        f"aws batch submit-service-job --region {setup.region} --cli-input-json file://{file}",
        "",
    ]
    return "\n".join(lines)
