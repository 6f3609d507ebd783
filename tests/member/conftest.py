"""Fixtures of the member tests: the reference organisation and its research team as deployed."""

from __future__ import annotations

import dataclasses

import pytest

from constructs_lib.model.loader import load_model
from constructs_lib.member import TeamSetup, team_setup

BUCKET, KEY = "acme-research-bucket-1x2y3z", "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
IMAGE = "111122223333.dkr.ecr.us-east-1.amazonaws.com/gpu-governance/research:1"


@pytest.fixture(scope="module")
def model():
    return load_model(None)


@pytest.fixture(scope="module")
def deployed(model) -> TeamSetup:
    """The research team's setup as its discovery document would give it once deployed."""
    return dataclasses.replace(team_setup(model, "research", backend="batch"), bucket=BUCKET, kms_key_arn=KEY, image_uri=IMAGE)
