"""`gpu-governance team submit-example TEAM --backend slurm`: the ``sbatch`` line."""

from __future__ import annotations

import argparse
import shlex

from constructs_lib.member.setup import TeamSetup

from .member import sbatch_line


def example(args: argparse.Namespace, setup: TeamSetup, priority_class: str, instance_type: str) -> int:
    """The ``sbatch`` line with the team's account, partition and QoS."""
    print(sbatch_line(setup, priority_class=priority_class, gpus=args.gpus, script=shlex.split(args.script)))
    return 0
