"""`gpu-governance team submit-example TEAM --backend hyperpod_eks`: a Job manifest."""

from __future__ import annotations

import argparse
import sys

from constructs_lib.cli.config import model_from
from constructs_lib.cli.member import image_of
from constructs_lib.member.setup import TeamSetup, unique_job_name
from constructs_lib.model.loader import dump_yaml

from .member import training_job_manifest


def example(args: argparse.Namespace, setup: TeamSetup, priority_class: str, instance_type: str) -> int:
    """A Job manifest for the team's namespace, queue and priority class."""
    image = image_of(args, setup)
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


def _dedicated(args: argparse.Namespace, setup: TeamSetup) -> bool:
    """Whether the team's pods must use its dedicated instance groups (the admission policy
    refuses them elsewhere); only the model says so."""
    model = model_from(args)
    team = next((t for t in model.teams if t.name == setup.team), None)
    return bool(team and setup.pool in team.kubernetes and team.kubernetes[setup.pool].dedicated_instance_groups)
