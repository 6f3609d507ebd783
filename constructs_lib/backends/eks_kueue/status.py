"""How `gpu-governance status` reads a team's use of an ``eks_kueue`` pool: Kueue's Workloads in
``gpu-team-TEAM`` and the pool's ClusterQueues (``cli.status.kueue_status``), why a workload waits
from its conditions."""

from __future__ import annotations

import argparse

from constructs_lib.cli.status import kueue_status
from constructs_lib.member.waiting import Observation

from .kueue import tenants


def read(args: argparse.Namespace, pool, model) -> Observation:
    return kueue_status(args, pool, tenants(model.pool(pool.name)))
