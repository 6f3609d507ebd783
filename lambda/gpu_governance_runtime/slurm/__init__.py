"""Slurm governance for SageMaker HyperPod: the plan (what should exist in Slurm) and the
idempotent shell script that makes a cluster match it.

Plain Python: the CDK construct, the CLI, the tests and the reclaim controller's Slurm adapter
all use the same names from here.
"""

from .plan import (
    BORROW_PARTITION,
    DataPath,
    PosixGroup,
    SlurmAccount,
    SlurmGroupAccount,
    SlurmPartition,
    SlurmPlan,
    SlurmQos,
    SlurmUser,
    borrow_qos_name,
    class_qos_name,
)
from .render import render_apply_script

__all__ = [
    "BORROW_PARTITION",
    "DataPath",
    "PosixGroup",
    "SlurmAccount",
    "SlurmGroupAccount",
    "SlurmPartition",
    "SlurmPlan",
    "SlurmQos",
    "SlurmUser",
    "borrow_qos_name",
    "class_qos_name",
    "render_apply_script",
]
