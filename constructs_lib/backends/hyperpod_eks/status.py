"""How `gpu-governance status` reads a team's use of a ``hyperpod_eks`` pool: Kueue's Workloads in
``hyperpod-ns-TEAM`` and the ClusterQueues task governance made (``cli.status.kueue_status``)."""

from __future__ import annotations

import argparse

from constructs_lib.cli.status import kueue_status
from constructs_lib.member.waiting import Observation

from . import kubernetes


def read(args: argparse.Namespace, pool, model) -> Observation:
    return kueue_status(args, pool, kubernetes.TENANTS)
