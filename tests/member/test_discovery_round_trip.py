"""One document format: ``discovery.describe`` writes the team's discovery document, and the
member's ``TeamSetup`` reads exactly that, from the published JSON or from the model."""

from __future__ import annotations

import json

import pytest

from constructs_lib.core.errors import GovernanceError
from constructs_lib.member import MEMBER_BACKENDS, TeamSetup, team_setup
from constructs_lib.member.discovery import describe
from constructs_lib.model.quota import instance_quota
from tests.eks_kueue.org import reference_with_eks_kueue

from .conftest import BUCKET, KEY


def test_every_published_document_reads_as_the_offline_setup():
    """For every team and pool: the parameter's JSON, read back, is the setup ``team_setup``
    builds from the model with the deployed bucket and key (the reference, and an eks_kueue pool
    so that every backend members submit to is read)."""
    model = reference_with_eks_kueue()
    checked = set()
    for team in model.teams:
        for pool in team.quotas:
            document = describe(model, team.name, pool, bucket=BUCKET, kms_key_arn=KEY)
            read = TeamSetup.from_parameter(json.dumps(document))
            if model.pool(pool).backend in MEMBER_BACKENDS.values():
                assert read == team_setup(model, team.name, pool=pool, bucket=BUCKET, kms_key_arn=KEY), (
                    team.name,
                    pool,
                )
            else:  # Batch fair share: readable, but no member submission helper takes it
                assert read == TeamSetup.from_document(document)
                with pytest.raises(GovernanceError, match="^pool: not a pool of team"):
                    team_setup(model, team.name, pool=pool)
            assert (read.team, read.pool, read.bucket, read.kms_key_arn) == (team.name, pool, BUCKET, KEY)
            assert read.quota == instance_quota(team, model.pool(pool))
            checked.add(model.pool(pool).backend)
    assert checked >= set(MEMBER_BACKENDS.values())


def test_the_submission_helpers_take_their_backend_names_from_the_document(model):
    """The priority a backend takes is the document's, not a second derivation."""
    eks = team_setup(model, "research", backend="hyperpod_eks")
    slurm = team_setup(model, "research", backend="slurm")
    for setup, key in ((eks, "kueue_priority_class"), (slurm, "qos")):
        assert [setup.priority(c["name"]) for c in setup.priority_classes] == [
            c[key] for c in describe(model, "research", setup.pool)["priority_classes"]
        ]
    assert slurm.least_urgent() == min(model.priority_classes, key=lambda c: c.weight).name
