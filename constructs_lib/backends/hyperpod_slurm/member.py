"""The ``sbatch`` line that runs a job on the team's own nodes of a HyperPod Slurm cluster, at a
priority class: account, partition and QoS as the apply script creates them (docs/slurm.md)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from constructs_lib.member.setup import TeamSetup

# What constructs_lib.member re-exports.
__all__ = ["sbatch_arguments", "sbatch_line"]


def sbatch_arguments(setup: TeamSetup, *, priority_class: str, gpus: int, script: Sequence[str]) -> list[str]:
    setup.require("slurm_account", "partition")
    return [
        "sbatch",
        f"--account={setup.slurm_account}",
        f"--partition={setup.partition}",
        f"--qos={setup.priority(priority_class)}",
        f"--gres=gpu:{gpus}",
        *script,
    ]


def sbatch_line(setup: TeamSetup, *, priority_class: str, gpus: int, script: Sequence[str]) -> str:
    return shlex.join(sbatch_arguments(setup, priority_class=priority_class, gpus=gpus, script=script))
