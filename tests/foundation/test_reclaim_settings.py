"""Reclaim mode and Slurm head nodes come from the governance file (issue 26): the reference
stacks switch the controller to act and govern a Slurm pool without a fork of the stacks."""

from __future__ import annotations

import json

from aws_cdk import App
from aws_cdk.assertions import Template

from constructs_lib.deployment import build_reference_app
from constructs_lib.model import GovernanceModel
from gpu_governance_runtime.contract import ENV_DRY_RUN, ENV_RECLAIM_TARGETS

from .org import default_data


def reclaim_environment(data: dict) -> dict:
    capacity = build_reference_app(App(), GovernanceModel.from_dict(data))[0]
    (function,) = [
        f
        for f in Template.from_stack(capacity).find_resources("AWS::Lambda::Function").values()
        if ENV_RECLAIM_TARGETS in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    return function["Properties"]["Environment"]["Variables"]


def targets_of(environment: dict) -> dict:
    """The targets variable by pool; queue ARNs (tokens joined in) read as a placeholder."""
    value = environment[ENV_RECLAIM_TARGETS]
    if isinstance(value, dict):
        value = "".join(part if isinstance(part, str) else "TOKEN" for part in value["Fn::Join"][1])
    return {target["pool"]: target for target in json.loads(value)}


def test_the_file_switches_reclaim_to_act_and_gives_slurm_its_head_node():
    default = reclaim_environment(default_data())
    assert default[ENV_DRY_RUN] == "true"  # dry run unless the file says act
    assert "hyperpod-slurm" not in targets_of(default)
    data = default_data()
    data["reclaim_mode"] = "act"
    slurm = next(p for p in data["pools"] if p["backend"] == "hyperpod_slurm")
    slurm["head_node"] = {"instance_id": "i-0123456789abcdef0"}
    acting = reclaim_environment(data)
    assert acting[ENV_DRY_RUN] == "false"
    assert targets_of(acting)["hyperpod-slurm"] == {
        "pool": "hyperpod-slurm",
        "instance_id": "i-0123456789abcdef0",
        "instance_type": "ml.p5.48xlarge",
    }
