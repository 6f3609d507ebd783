"""`gpu-governance team submit-example TEAM --backend eks_kueue`: a Job manifest."""

from __future__ import annotations

import argparse
import sys

from constructs_lib.cli.member import image_of
from constructs_lib.member.kueue import training_job_manifest
from constructs_lib.member.setup import TeamSetup, unique_job_name
from constructs_lib.model.loader import dump_yaml


def example(args: argparse.Namespace, setup: TeamSetup, priority_class: str, instance_type: str) -> int:
    """A Job manifest for the team's namespace, queue and priority class."""
    manifest = training_job_manifest(
        setup,
        job_name=unique_job_name(setup.team, args.job_name),
        priority_class=priority_class,
        image=image_of(args, setup),
        command=[args.script],
        instance_type=instance_type,
        gpus=args.gpus,
    )
    sys.stdout.write(dump_yaml(manifest))
    return 0
