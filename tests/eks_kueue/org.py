"""The reference organisation with an ``eks_kueue`` pool and a team of its own there (the
reference's teams each have a pod role on its HyperPod EKS pool already, and a team has one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from constructs_lib.model import GovernanceModel
from constructs_lib.model.loader import default_config_text

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "org-eks-kueue.yaml"
POOL = "eks-kueue"


def eks_kueue_pool() -> dict[str, Any]:
    """The example's pool, as the governance file declares it."""
    return next(p for p in yaml.safe_load(EXAMPLE.read_text())["pools"] if p["name"] == POOL)


def with_eks_kueue(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a governance file) with the example's pool and team ``inference`` there."""
    return {
        **data,
        "pools": [*data["pools"], eks_kueue_pool()],
        "teams": [
            *data["teams"],
            {
                "name": "inference",
                "account": "research",
                "preset": "background",
                "members": ["arn:aws:iam::444455556666:role/InferenceEngineers"],
                "quotas": {POOL: {"p5.48xlarge": 2, "g6e.12xlarge": {"accelerators": 8}}},
            },
        ],
    }


def reference_with_eks_kueue() -> GovernanceModel:
    return GovernanceModel.from_dict(with_eks_kueue(yaml.safe_load(default_config_text())))


def example_model() -> GovernanceModel:
    """examples/org-eks-kueue.yaml: three teams, a group of two, three priority classes."""
    return GovernanceModel.from_dict(yaml.safe_load(EXAMPLE.read_text()))


def example_data() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())
