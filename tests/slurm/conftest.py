"""The real Slurm cluster each module's tests run on, governed by the default teams: one per
module, its jobs cancelled after. Modules that change the cluster first define their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .cluster import Cluster, governed_cluster


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = governed_cluster(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
    yield cluster
    cluster.cancel_all()
