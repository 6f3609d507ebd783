"""Fixtures of the member tests: the reference organisation and its research team as deployed."""

from __future__ import annotations

import json

import pytest

from constructs_lib.member import TeamSetup
from constructs_lib.member.discovery import describe
from constructs_lib.model.loader import load_model
from gpu_governance_runtime import contract

BUCKET, KEY = (
    "acme-research-bucket-1x2y3z",
    "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
)
IMAGE = "111122223333.dkr.ecr.us-east-1.amazonaws.com/acme-ml/research:1"  # the team's repository, an image tag pushed there


@pytest.fixture(scope="module")
def model():
    return load_model(None)


@pytest.fixture(scope="module")
def published(model) -> str:
    """The research team's discovery parameter on the quota-share pool, as deployed."""
    return json.dumps(describe(model, "research", "sagemaker-training", bucket=BUCKET, kms_key_arn=KEY))


@pytest.fixture(scope="module")
def research_tags(model) -> dict[str, str]:
    """What every job of the research team must carry: its team tag and, since it declares one
    in the reference organisation, its cost centre (IAM requires both, tests/security/test_cost_centre.py)."""
    research = next(t for t in model.teams if t.name == "research")
    assert research.cost_centre, "the reference research team declares a cost centre"
    return {contract.TAG_TEAM: "research", contract.TAG_COST_CENTRE: research.cost_centre}


@pytest.fixture(scope="module")
def deployed(published) -> TeamSetup:
    """The research team's setup as its discovery document gives it once deployed."""
    return TeamSetup.from_parameter(published)
